// Process pool: a coordinator process (rank 0) and N worker processes (ranks 1..N).
// The parameters and one gradient slot per worker live in one POSIX shared-memory
// segment mapped as tensors, so nothing is copied between processes per step.
//
// Note [Pool modes]
// sync: every step each worker computes the gradient of its DistributedSampler shard
//   (worker r trains shard r-1 of N) into its slot, then all meet at a barrier; the
//   parameters then take one optimizer step on the average of the slots, and a second
//   barrier releases the workers onto the new parameters. Mathematically the same as
//   Single on the full batch: the fix for the `Pool().map(model, data)` idea, where
//   gradients never flowed back from the workers. With SGD and no clipping the workers step
//   the shared parameters themselves, each its share (Note [Workers step the pool]); with
//   Adam or clipping the coordinator averages the slots into its gradients and steps its
//   optimizer, which writes the shared parameters in place, while the workers wait.
// hogwild: each worker steps its own optimizer on the shared parameters without locks
//   (as PyTorch's mnist_hogwild example does); the coordinator follows the slowest
//   worker's progress (a worker's step counts once its update is in), reports the mean
//   loss, validates and checkpoints the shared parameters, which by then hold every
//   worker's updates up to that step (and perhaps some of the next: nothing waits for the
//   coordinator). Hogwild resumes the parameters and the step; worker optimizer state
//   (momentum) restarts.
//
// Note [Workers step the pool]
// With SGD and no clipping a sync pool steps as DDP over shared memory does (Note [Sharded
// SGD step] in ddp_shm.cpp): the momentum buffers live in the segment beside the
// parameters, and after the first barrier each worker averages its share of the elements
// over every slot and applies SGD's update to its share of the parameters and buffers at
// once (SharedSgd); the workers then meet at a second barrier of their own, which the
// coordinator takes no part in. The coordinator computes nothing: it arrives at the first
// barrier without waiting there, sleeps until the workers' barrier has passed, and reads
// the step's losses and stop wishes; its optimizer's momentum buffers are views of the
// shared ones, so its checkpoints hold them. The coordinator used to average and step alone
// while the workers waited (0.8-1.4 ms a step on mlp, split with a helper thread), and to
// stay awake for 1 ms of every step at the first barrier: on a machine with a core per
// worker it took from the workers' cores at both ends of each step. Now it wakes once a
// step, to record it (BENCHMARKS.md: pool sync ÷ DDP shm on mlp 0.93-1.08 in three runs,
// 0.89 in the run before; a coordinator that yields for 100 µs before it sleeps took the
// seed workload's pool from 0.78 to 0.31 of DDP shm, each cycle awake one a worker lost).
// The workers may be computing the next step while it reads, so each slot keeps a step's
// loss, samples and stop wish in one of two sets, by the step's parity: a worker writes a
// set again two steps on, after a first barrier that the coordinator reaches only once it
// has read the set. The parameters change only between the first barrier and the workers'
// second, so between its wake-up and its next arrival the coordinator reads them whole
// (validation, checkpoints).
//
// Slot layout (floats): gradients of every parameter, then two sets of loss, samples, stop wish.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/shm_names.h"
#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/peer_wait.h"
#include "engine/shared_sgd.h"
#include "engine/shm_segment.h"
#include "engine/strategy.h"

namespace ptw::engine {
namespace {

using Among = ShmSegment::Among;

class ProcessPool final : public Strategy {
 public:
  explicit ProcessPool(const SyncContext& ctx)
      : m_rank(ctx.rank),
        m_world(ctx.world),
        m_workers(ctx.world - 1),
        m_hogwild(ctx.profile.strategy.poolMode == "hogwild"),
        m_sgdWithoutClipping(ctx.profile.hyper.optimizer == "sgd" && ctx.profile.hyper.clipNorm <= 0),
        m_momentum(ctx.profile.hyper.momentum != 0),
        m_timeout(peerTimeout(ctx.profile)),
        m_name(core::sharedSegmentName(ctx.port, "pool")) {
    PTW_CHECK(m_workers >= 1, "pool: expected a coordinator and at least one worker, got ", ctx.world, " process(es)");
  }

  // The coordinator walks shard 0's plan: the same number of steps as every worker.
  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override {
    return shardPlan(p, samples, m_rank == 0 ? 0 : m_rank - 1, m_workers);
  }

  bool computesGradients() const override { return m_rank != 0; }
  /// Hogwild: every worker its own optimizer. Sync: the workers step the shared parameters
  /// (the coordinator's optimizer only takes up the shared momentum buffers), or, with Adam or
  /// clipping, the coordinator steps them alone.
  bool stepsOptimizer() const override {
    if (m_hogwild) return m_rank != 0;
    return workersStep() || m_rank == 0;
  }
  /// The workers' step zeroes what it read of every slot.
  bool zeroesGradients() const override { return m_rank != 0 && workersStep(); }

  void attach(Model& model) override {
    m_params = model.parameters();
    m_numel = 0;
    for (const auto& p : m_params) m_numel += static_cast<std::size_t>(p.numel());
    m_slotFloats = cacheLineFloats(m_numel + 2 * kStats);
    const std::size_t paramFloats = cacheLineFloats(m_numel);
    const std::size_t bufferFloats = workersStep() && m_momentum ? paramFloats : 0;
    // The workers wait for each other awake; a sync coordinator sleeps through the step
    // (Note [Lock-step waits] in shm_segment.cpp).
    m_segment = std::make_shared<ShmSegment>(
        m_name, m_rank, m_world,
        sizeof(float) * (paramFloats + bufferFloats + m_slotFloats * static_cast<std::size_t>(m_workers)), m_timeout,
        m_hogwild ? 0 : m_workers);
    m_shared = static_cast<float*>(m_segment->payload());
    m_slots = m_shared + paramFloats + bufferFloats;
    torch::NoGradGuard noGrad;
    if (m_rank == 0) {  // the coordinator's (seeded or resumed) parameters are the shared ones
      std::size_t off = 0;
      for (const auto& p : m_params) {
        std::memcpy(m_shared + off, p.detach().contiguous().data_ptr<float>(), sizeof(float) * p.numel());
        off += static_cast<std::size_t>(p.numel());
      }
    }
    m_segment->barrier();
    m_segment->unlink();
    // From here every process's parameters are views of the segment, and a sync worker's
    // gradients are views of its slot: backward writes them where they are averaged.
    std::size_t off = 0;
    for (auto& p : m_params) {
      p.set_data(segmentView(m_segment, m_shared + off, p.sizes()));
      off += static_cast<std::size_t>(p.numel());
    }
    if (!m_hogwild && m_rank != 0) bindGradients(m_params, m_segment, slot(m_rank));
    for (int w = 1; w <= m_workers; ++w) m_slotPtrs.push_back(slot(w));
    if (workersStep()) m_sgd.emplace(m_segment, m_params, m_shared, bufferFloats ? m_shared + paramFloats : nullptr);
    m_workersMet = m_segment->generation(Among::AllButRankZero);
    m_segment->barrier();
  }

  bool reduce(Model&, StepState& state) override {
    ++m_steps;
    if (m_hogwild) return m_rank == 0 ? followWorkers(state) : publishProgress(state);
    if (m_rank != 0) return offerGradients(state);
    return workersStep() ? followStep(state) : averageSlots(state);
  }

  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    if (!workersStep()) return Strategy::optimizerStep(optimizer, clipNorm);
    PTW_CHECK(dynamic_cast<torch::optim::SGD*>(&optimizer) && clipNorm <= 0,
              "internal: the pool's workers step SGD without clipping only");
    if (m_rank == 0) {  // no share: the first step only takes up the shared momentum buffers
      if (m_steps == 1) m_sgd->step(optimizer, m_slotPtrs.data(), m_workers, 0, 0);
      return;
    }
    const auto [lo, hi] = shareOf(m_numel, m_workers, m_rank - 1);
    m_sgd->step(optimizer, m_slotPtrs.data(), m_workers, lo, hi);
    m_segment->barrier(m_segment->lockstepAwake(), Among::AllButRankZero);  // stepped: the next step may start
  }

  void afterOptimizerStep(Model&) override {
    // Hogwild: a worker's step counts once its update is in the shared parameters, so that
    // what the coordinator validates and checkpoints after step s holds every worker's s.
    if (m_hogwild && m_rank != 0) m_segment->progress(m_rank).fetch_add(1, std::memory_order_release);
    // Adam or clipping: the coordinator has stepped; release the workers.
    if (!m_hogwild && !workersStep() && m_rank == 0) m_segment->barrier();
  }

  void finish() override {
    if (m_rank != 0 && m_segment) m_segment->doneFlag(m_rank).store(1, std::memory_order_release);
  }

 private:
  static constexpr std::size_t kStats = 3;  ///< loss, samples, stop wish

  /// A sync pool with SGD and no clipping (Note [Workers step the pool]).
  bool workersStep() const { return !m_hogwild && m_sgdWithoutClipping; }

  // Note [Workers awake through the step]
  // With Adam or clipping a sync worker waits at the second barrier while the coordinator
  // averages and steps: on mlp 0.8-1.2 ms, around the 1 ms after which a barrier sleeps, so a
  // worker often slept and came back a futex wake-up late, both workers in turn. Only that
  // wait, whose length is the coordinator's step and not another worker's compute, stays
  // awake (yielding) longer; the coordinator, whose wait at the first barrier is the workers'
  // compute, still sleeps after 1 ms.
  static constexpr std::chrono::microseconds kStepAwake{5000};

  float* slot(int worker) const { return m_slots + static_cast<std::size_t>(worker - 1) * m_slotFloats; }
  /// Worker `worker`'s loss, samples and stop wish of this step, in the set of its parity
  /// (Note [Workers step the pool]); hogwild's coordinator reads the latest, in set 0.
  float* stats(int worker) const { return slot(worker) + m_numel + (m_hogwild ? 0 : m_steps % 2) * kStats; }

  // sync, worker: gradients, loss and stop wish into the slot; wait for the others (and,
  // with Adam or clipping, for the coordinator's step).
  bool offerGradients(StepState& state) {
    bindGradients(m_params, m_segment, slot(m_rank));  // normally already there: nothing to copy
    float* s = stats(m_rank);
    s[0] = static_cast<float>(state.loss);
    s[1] = static_cast<float>(state.samples);
    s[2] = m_localStop ? 1.f : 0.f;
    if (!workersStep()) {
      m_segment->barrier();                // gradients offered
      m_segment->barrier(kStepAwake);      // coordinator stepped (afterOptimizerStep on rank 0)
      return m_segment->stopFlag().load(std::memory_order_acquire) != 0;
    }
    m_segment->barrier(m_segment->lockstepAwake());  // gradients offered: step (optimizerStep)
    return m_segment->stopFlag().load(std::memory_order_acquire) != 0 || anyWorkerStops();
  }

  // sync with SGD, coordinator: a stop wish, then asleep until the workers have stepped.
  bool followStep(StepState& state) {
    m_segment->stopFlag().store(m_localStop ? 1 : 0, std::memory_order_release);
    m_segment->arrive();
    m_segment->await(Among::AllButRankZero, m_workersMet + static_cast<std::uint32_t>(m_steps));
    addUpLoss(state);
    return m_localStop || anyWorkerStops();
  }

  // sync with Adam or clipping, coordinator: the average of the workers' gradients, in
  // worker order, for its own optimizer.
  bool averageSlots(StepState& state) {
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

  bool anyWorkerStops() const {
    for (int w = 1; w <= m_workers; ++w)
      if (stats(w)[2] > 0.5f) return true;
    return false;
  }

  /// The workers' mean loss, weighted by their samples, and their samples, into `state`.
  void addUpLoss(StepState& state) const {
    double lossSum = 0, samples = 0;
    for (int w = 1; w <= m_workers; ++w) {
      const float* s = stats(w);
      lossSum += static_cast<double>(s[0]) * s[1];
      samples += s[1];
    }
    state.loss = samples > 0 ? lossSum / samples : 0;
    state.samples = static_cast<std::int64_t>(samples);
  }

  // hogwild, worker: publish the loss (the step's progress follows its update, in
  // afterOptimizerStep); stop when the coordinator says so.
  bool publishProgress(StepState& state) {
    float* s = stats(m_rank);
    s[0] = static_cast<float>(state.loss);
    s[1] = static_cast<float>(state.samples);
    return m_localStop || m_segment->stopFlag().load(std::memory_order_acquire) != 0;
  }

  // hogwild, coordinator: a step is done when every worker has done it (or finished).
  bool followWorkers(StepState& state) {
    if (m_localStop) m_segment->stopFlag().store(1, std::memory_order_release);
    const auto start = std::chrono::steady_clock::now();
    PeerWait waiting;
    for (;;) {
      bool behind = false, endedEarly = false;
      for (int w = 1; w <= m_workers; ++w) {
        const bool done = m_segment->doneFlag(w).load(std::memory_order_acquire) != 0;
        const bool lagging = m_segment->progress(w).load(std::memory_order_acquire) < static_cast<std::int64_t>(m_steps);
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

  int m_rank;
  int m_world;
  int m_workers;
  bool m_hogwild;
  bool m_sgdWithoutClipping;
  bool m_momentum;
  std::chrono::milliseconds m_timeout;
  std::string m_name;
  std::shared_ptr<ShmSegment> m_segment;
  std::optional<SharedSgd> m_sgd;  ///< the workers' step (Note [Workers step the pool])
  std::uint32_t m_workersMet = 0;  ///< the workers' barrier's generation at attach
  std::uint64_t m_steps = 0;       ///< steps begun (reduce), the same on every process
  std::vector<float*> m_slotPtrs;  ///< slot(1) .. slot(N)
  std::vector<torch::Tensor> m_params;
  std::size_t m_numel = 0;
  std::size_t m_slotFloats = 0;
  float* m_shared = nullptr;
  float* m_slots = nullptr;
};

}  // namespace

std::unique_ptr<Strategy> makeProcessPool(const SyncContext& ctx) { return std::make_unique<ProcessPool>(ctx); }

}  // namespace ptw::engine
