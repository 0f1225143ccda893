// GradientSync: how one rank's gradients meet the other ranks' before the optimizer
// steps. One class per strategy, chosen by name from a registry (makeGradientSync), so
// adding a strategy is a file and a registry line.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "common/profile.h"

namespace ptw::engine {

struct SyncContext {
  const core::Profile& profile;
  int rank = 0;
  int world = 1;
  int port = 0;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  /// Called once with the model's parameters before training: DDP broadcasts rank 0's.
  virtual void attach(const std::vector<torch::Tensor>& params) = 0;
  /// Makes every rank's gradients the average over ranks. `localStop` is this rank's wish
  /// to stop; returns whether any rank wished it, so all ranks stop after the same step.
  virtual bool reduce(const std::vector<torch::Tensor>& params, bool localStop) = 0;
};

using GradientSyncFactory = std::function<std::unique_ptr<GradientSync>(const SyncContext&)>;

/// Strategy name (profile strategy.kind) -> factory.
const std::map<std::string, GradientSyncFactory>& gradientSyncRegistry();

std::unique_ptr<GradientSync> makeGradientSync(const SyncContext& ctx);

}  // namespace ptw::engine
