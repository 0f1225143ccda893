// SPDX-License-Identifier: GPL-3.0-or-later
// Helpers shared by the tests that link the engine: comparing parameter lists, and the
// parameters one process trains on the global batches (the reference of every equivalence test).
#pragma once

#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include <torch/torch.h>

#include "common/profile.h"
#include "engine/sampler.h"
#include "engine/strategy.h"
#include "engine/trainer.h"

namespace ptw::test {

/// The largest difference between two parameter lists; infinite when they do not hold the
/// same tensors (a list cut short, empty, or of other shapes never passes for equal).
inline double maxAbsDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.empty() || a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].sizes().equals(b[i].sizes())) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

/// What one process trains from `p` on the global batches of `world` ranks: `single` on the
/// local host, with an accumulated step's micro-batches taken as one batch.
inline std::vector<torch::Tensor> referenceParameters(const core::Profile& p, int world) {
  core::Profile single = p;
  single.strategy.kind = "single";
  single.strategy.ranks = 1;
  single.hosts = core::HostsSpec{};
  single.hyper.batchSize = p.hyper.batchSize * p.hyper.accumulate;
  single.hyper.accumulate = 1;
  engine::SyncContext ctx{single, 0, 1, 0};
  const std::int64_t samples = p.data.samples;
  engine::BatchPlan plan = [single, samples, world](std::int64_t epoch) {
    return engine::globalBatches(engine::samplerOptions(single, samples, world, 0, epoch), single.hyper.batchSize);
  };
  engine::Trainer t(engine::TrainerOptions(single, 0, 1).setPlan(plan), engine::makeStrategy(ctx));
  std::atomic<bool> stop{false};
  t.run(stop);
  return t.parameters();
}

}  // namespace ptw::test
