// Trainer: the training loop of one rank. It owns the model, the data shard and the
// optimizer, and leaves communication to a GradientSync and reporting to a callback.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include <torch/torch.h>

#include "common/profile.h"
#include "common/record.h"
#include "engine/gradient_sync.h"
#include "engine/workload.h"

namespace ptw::engine {

/// The batches of one epoch, as dataset indices.
using BatchPlan = std::function<std::vector<std::vector<std::int64_t>>(std::int64_t epoch)>;

/// The plan of rank `rank` of `world` under the profile's sampler settings.
BatchPlan shardPlan(const core::Profile& profile, int rank, int world);

class Trainer {
 public:
  using RecordSink = std::function<void(const core::Record&)>;

  Trainer(core::Profile profile, int rank, int world, std::unique_ptr<GradientSync> sync, BatchPlan plan,
          RecordSink sink = {});

  /// Trains until max_steps / epochs, or until a rank asks to stop (checked every step,
  /// agreed across ranks by the sync). Returns the number of optimizer steps taken.
  std::int64_t run(const std::atomic<bool>& stopRequested);

  std::vector<torch::Tensor> parameters() const;
  std::int64_t step() const { return m_step; }

 private:
  core::Profile m_profile;
  int m_rank;
  int m_world;
  std::unique_ptr<GradientSync> m_sync;
  BatchPlan m_plan;
  RecordSink m_sink;
  Dataset m_data;
  torch::nn::Sequential m_model;
  std::unique_ptr<torch::optim::Optimizer> m_optimizer;
  std::int64_t m_step = 0;
};

/// Resident set size of this process in bytes.
std::int64_t residentBytes();

}  // namespace ptw::engine
