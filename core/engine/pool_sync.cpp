// SPDX-License-Identifier: GPL-3.0-or-later
// The sync pool's processes (Note [Pool modes] in process_pool.cpp): with SGD and no
// clipping the workers step the shared parameters, each its share, while the coordinator
// sleeps (SharedSgdPoolWorker, SharedSgdPoolCoordinator; Note [Workers step the pool]);
// with Adam or clipping the coordinator averages the slots and steps its optimizer while
// the workers wait (SyncPoolWorker, SyncPoolCoordinator).
#include <chrono>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/process_pool.h"

namespace ptw::engine {
namespace {

using Among = ShmSegment::Among;

// A sync worker's gradients are views of its slot: backward writes them where they are averaged.
class SyncWorkerBase : public ProcessPool {
 protected:
  using ProcessPool::ProcessPool;
  void attached() override { bindGradients(m_params, m_segment, slot(m_rank)); }
  /// Gradients, loss and stop wish into the slot.
  void offer(const StepState& state) {
    ++m_steps;
    bindGradients(m_params, m_segment, slot(m_rank));  // normally already there: nothing to copy
    offerStats(state, m_localStop);
  }
};

// Adam or clipping, worker: offers its gradients, then waits while the coordinator steps.
class SyncPoolWorker final : public SyncWorkerBase {
 public:
  explicit SyncPoolWorker(const SyncContext& ctx) : SyncWorkerBase(ctx, {true, false}) {}

  bool reduce(Model&, StepState& state) override {
    offer(state);
    m_segment->barrier();            // gradients offered
    m_segment->barrier(kStepAwake);  // coordinator stepped (its optimizerStep)
    return stopFlagSet();
  }
  /// The coordinator has stepped the shared parameters.
  void optimizerStep(torch::optim::Optimizer&, double) override {}

 private:
  // Note [Workers awake through the step]
  // While the coordinator averages and steps, a worker waits at the second barrier: on mlp
  // about as long as the 1 ms after which a barrier sleeps, so a worker would often sleep and
  // come back a futex wake-up late, both workers in turn. Only that wait, whose length is the
  // coordinator's step and not another worker's compute, stays awake (yielding) longer; the
  // coordinator, whose wait at the first barrier is the workers' compute, still sleeps after 1 ms.
  static constexpr std::chrono::microseconds kStepAwake{5000};
};

// Adam or clipping, coordinator: the average of the workers' gradients, in worker order,
// for its own optimizer, which writes the shared parameters in place.
class SyncPoolCoordinator final : public PoolCoordinator {
 public:
  explicit SyncPoolCoordinator(const SyncContext& ctx) : PoolCoordinator(ctx, {true, false}) {}

  bool reduce(Model&, StepState& state) override {
    ++m_steps;
    m_segment->barrier();
    torch::NoGradGuard noGrad;
    std::size_t off = 0;
    for (auto& p : m_params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      const auto n = static_cast<std::size_t>(p.numel());
      averageInto(p.mutable_grad().data_ptr<float>(), m_slotPtrs.data(), m_workers, off, n);
      off += n;
    }
    addUpLoss(state);
    const bool stop = m_localStop || anyWorkerStops();
    m_segment->stopFlag().store(stop ? 1 : 0, std::memory_order_release);
    return stop;
  }

  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    Strategy::optimizerStep(optimizer, clipNorm);
    m_segment->barrier();  // stepped: release the workers
  }
};

// SGD without clipping, worker (Note [Workers step the pool]).
class SharedSgdPoolWorker final : public SyncWorkerBase {
 public:
  explicit SharedSgdPoolWorker(const SyncContext& ctx) : SyncWorkerBase(ctx, {true, true}) {}

  /// Its step zeroes what it read of every slot.
  void zeroGradients(torch::optim::Optimizer&) override {}

  bool reduce(Model&, StepState& state) override {
    offer(state);
    m_segment->barrier(m_segment->lockstepAwake());  // gradients offered: step (optimizerStep)
    return stopFlagSet() || anyWorkerStops();
  }

  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    PTW_CHECK(dynamic_cast<torch::optim::SGD*>(&optimizer) && clipNorm <= 0,
              "internal: the pool's workers step SGD without clipping only");
    const auto [lo, hi] = shareOf(m_numel, m_workers, m_rank - 1);
    m_sgd->step(optimizer, m_slotPtrs.data(), m_workers, lo, hi);
    m_segment->barrier(m_segment->lockstepAwake(), Among::AllButRankZero);  // stepped: the next step may start
  }
};

// SGD without clipping, coordinator: a stop wish, then asleep until the workers have stepped.
class SharedSgdPoolCoordinator final : public PoolCoordinator {
 public:
  explicit SharedSgdPoolCoordinator(const SyncContext& ctx) : PoolCoordinator(ctx, {true, true}) {}

  bool reduce(Model&, StepState& state) override {
    ++m_steps;
    m_segment->stopFlag().store(m_localStop ? 1 : 0, std::memory_order_release);
    m_segment->arrive();
    m_segment->await(Among::AllButRankZero, m_workersMet + static_cast<std::uint32_t>(m_steps));
    addUpLoss(state);
    return m_localStop || anyWorkerStops();
  }

  /// No share: the first step only takes up the shared momentum buffers.
  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    PTW_CHECK(dynamic_cast<torch::optim::SGD*>(&optimizer) && clipNorm <= 0,
              "internal: the pool's workers step SGD without clipping only");
    if (m_steps == 1) m_sgd->step(optimizer, m_slotPtrs.data(), m_workers, 0, 0);
  }
};

template <typename Coordinator, typename Worker>
std::unique_ptr<Strategy> forRank(const SyncContext& ctx) {
  if (ctx.rank == 0) return std::make_unique<Coordinator>(ctx);
  return std::make_unique<Worker>(ctx);
}

}  // namespace

std::unique_ptr<Strategy> makeSyncPool(const SyncContext& ctx) {
  // The workers step SGD themselves; clipping needs the whole gradient's norm, Adam its own state.
  if (ctx.profile.hyper.optimizer == "sgd" && ctx.profile.hyper.clipNorm <= 0)
    return forRank<SharedSgdPoolCoordinator, SharedSgdPoolWorker>(ctx);
  return forRank<SyncPoolCoordinator, SyncPoolWorker>(ctx);
}

}  // namespace ptw::engine
