// SPDX-License-Identifier: GPL-3.0-or-later
// ProcessPool: what every process of the pool shares, coordinator or worker, sync or
// hogwild: the segment of shared parameters and one gradient slot per worker, and the
// loss, samples and stop wish each worker leaves in its slot. One class per algorithm
// derives from it (pool_sync.cpp, pool_hogwild.cpp), chosen once from the profile by
// makeProcessPool (process_pool.cpp; Note [Chosen once]).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/shared_sgd.h"
#include "engine/shm_segment.h"
#include "engine/strategy.h"

namespace ptw::engine {

class ProcessPool : public Strategy {
 public:
  /// How the processes use the segment.
  struct Layout {
    bool lockstep = true;    ///< sync: steps in lock-step, each step's stats in the set of its parity
    bool sharedSgd = false;  ///< the workers step SGD on shared momentum buffers (Note [Workers step the pool])
  };

  ProcessPool(const SyncContext& ctx, Layout layout);

  /// Every process walks its worker's shard; the coordinator shard 0's: as many steps as any.
  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override;
  /// Maps the segment, makes the parameters views of it (the coordinator's values), then attached().
  void attach(Model& model) final;
  /// A worker's forward starts from the coordinator's buffers (Note [Buffers]).
  void beginStep(bool localStop) override;

 protected:
  static constexpr std::size_t kStats = 3;  ///< loss, samples, stop wish

  /// After attach has mapped the parameters, before the last barrier of attach.
  virtual void attached() {}

  float* slot(int worker) const { return m_slots + static_cast<std::size_t>(worker - 1) * m_slotFloats; }
  /// Worker `worker`'s loss, samples and stop wish of this step, in the set of its parity
  /// when sync (Note [Workers step the pool]); hogwild keeps one set, the latest.
  float* stats(int worker) const { return slot(worker) + m_numel + (m_steps % m_statSets) * kStats; }
  /// This worker's loss, samples and stop wish into its slot.
  void offerStats(const StepState& state, bool stop);
  bool anyWorkerStops() const;
  /// The workers' mean loss, weighted by their samples, and their samples, into `state`.
  void addUpLoss(StepState& state) const;
  bool stopFlagSet() const { return m_segment->stopFlag().load(std::memory_order_acquire) != 0; }

  const int m_rank;
  const int m_world;
  const int m_workers;
  const Layout m_layout;
  const std::uint64_t m_statSets;
  const bool m_momentum;
  const std::chrono::milliseconds m_timeout;
  const std::string m_name;
  const std::string m_modelField;  ///< the profile field that names the model, for messages
  std::shared_ptr<ShmSegment> m_segment;
  std::optional<SharedSgd> m_sgd;  ///< the workers' step (Note [Workers step the pool])
  std::uint32_t m_workersMet = 0;  ///< the workers' barrier's generation at attach
  std::uint64_t m_steps = 0;       ///< steps begun (reduce), the same on every process
  std::vector<float*> m_slotPtrs;  ///< slot(1) .. slot(N)
  std::vector<torch::Tensor> m_params;
  std::vector<torch::Tensor> m_buffers;             ///< the model's (Note [Buffers])
  std::vector<torch::Tensor> m_coordinatorBuffers;  ///< a worker's copy of the coordinator's
  std::size_t m_numel = 0;
  std::size_t m_slotFloats = 0;
  float* m_shared = nullptr;
  float* m_slots = nullptr;
};

/// The coordinator (rank 0) computes no gradients: it follows the workers and records.
class PoolCoordinator : public ProcessPool {
 public:
  using ProcessPool::ProcessPool;
  void computeGradients(const std::function<void()>&) final {}
};

/// The sync pool's classes (pool_sync.cpp) and hogwild's (pool_hogwild.cpp), for the rank.
std::unique_ptr<Strategy> makeSyncPool(const SyncContext& ctx);
std::unique_ptr<Strategy> makeHogwildPool(const SyncContext& ctx);

}  // namespace ptw::engine
