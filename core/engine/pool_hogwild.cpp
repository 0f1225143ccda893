// SPDX-License-Identifier: GPL-3.0-or-later
// The hogwild pool's processes (Note [Pool modes] in process_pool.cpp): each worker steps
// its own optimizer on the shared parameters without locks; the coordinator follows them.
#include <chrono>
#include <thread>

#include "common/error.h"
#include "engine/peer_wait.h"
#include "engine/process_pool.h"

namespace ptw::engine {
namespace {

class HogwildPoolWorker final : public ProcessPool {
 public:
  explicit HogwildPoolWorker(const SyncContext& ctx) : ProcessPool(ctx, {false, false}) {}

  // Publishes the loss (the step's progress follows its update, in optimizerStep); stops
  // when the coordinator says so.
  bool reduce(Model&, StepState& state) override {
    ++m_steps;
    offerStats(state, false);
    return m_localStop || stopFlagSet();
  }

  // A worker's step counts once its update is in the shared parameters, so that what the
  // coordinator validates and checkpoints after step s holds every worker's s.
  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    Strategy::optimizerStep(optimizer, clipNorm);
    m_segment->progress(m_rank).fetch_add(1, std::memory_order_release);
  }

  void finish() override {
    if (m_segment) m_segment->doneFlag(m_rank).store(1, std::memory_order_release);
  }
};

// A step is done when every worker has done it (or finished).
class HogwildPoolCoordinator final : public PoolCoordinator {
 public:
  explicit HogwildPoolCoordinator(const SyncContext& ctx) : PoolCoordinator(ctx, {false, false}) {}

  bool reduce(Model&, StepState& state) override {
    ++m_steps;
    if (m_localStop) m_segment->stopFlag().store(1, std::memory_order_release);
    const auto start = std::chrono::steady_clock::now();
    PeerWait waiting;
    for (;;) {
      bool behind = false, endedEarly = false;
      for (int w = 1; w <= m_workers; ++w) {
        const bool done = m_segment->doneFlag(w).load(std::memory_order_acquire) != 0;
        const bool lagging =
            m_segment->progress(w).load(std::memory_order_acquire) < static_cast<std::int64_t>(m_steps);
        if (lagging && done) endedEarly = true;  // a worker stopped before this step: stop too
        if (lagging && !done) behind = true;
      }
      if (!behind) {
        addUpLoss(state);
        return m_localStop || endedEarly;
      }
      PTW_CHECK(std::chrono::steady_clock::now() - start < m_timeout, "pool: no hogwild worker progress for ",
                m_timeout.count() / 1000.0, " s (run.timeout_s and 5 s)");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // leave the cores to the workers
    }
  }

  /// The workers step the shared parameters.
  void optimizerStep(torch::optim::Optimizer&, double) override {}
};

}  // namespace

std::unique_ptr<Strategy> makeHogwildPool(const SyncContext& ctx) {
  if (ctx.rank == 0) return std::make_unique<HogwildPoolCoordinator>(ctx);
  return std::make_unique<HogwildPoolWorker>(ctx);
}

}  // namespace ptw::engine
