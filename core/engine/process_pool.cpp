// Process pool: a coordinator process (rank 0) and N worker processes (ranks 1..N).
// The parameters and one gradient slot per worker live in one POSIX shared-memory
// segment mapped as tensors, so nothing is copied between processes per step.
//
// Note [Pool modes]
// sync: every step each worker computes the gradient of its DistributedSampler shard
//   (worker r trains shard r-1 of N) into its slot, then all meet at a barrier; the
//   coordinator averages the slots into its gradients and steps the one optimizer, which
//   writes the shared parameters in place; a second barrier releases the workers onto the
//   new parameters. With SGD and no clipping the coordinator does both in one pass
//   (averageThenSgd, as DDP's sharded step does with its share), so the averaged gradient
//   is never written. Mathematically the same as Single on the full batch: the fix for the
//   `Pool().map(model, data)` idea, where gradients never flowed back from the workers.
// hogwild: each worker steps its own optimizer on the shared parameters without locks
//   (as PyTorch's mnist_hogwild example does); the coordinator follows the slowest
//   worker's progress, reports the mean loss, validates and checkpoints the shared
//   parameters. Hogwild resumes the parameters; worker optimizer state (momentum) restarts.
//
// Slot layout (floats): gradients of every parameter, then loss, samples, stop wish.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/shm_names.h"
#include "engine/kernels.h"
#include "engine/lane_pool.h"  // lanesFor
#include "engine/model.h"
#include "engine/peer_wait.h"
#include "engine/shm_segment.h"
#include "engine/strategy.h"
#include "engine/workload.h"

namespace ptw::engine {
namespace {

// Spins, then yields, until `done()`: the coordinator and its helpers waiting for each other
// within one step (Note [Coordinator helpers]), a wait of microseconds. False if `quit()`
// became true first.
template <typename Done, typename Quit>
bool spinUntil(const Done& done, const Quit& quit) {
  for (std::uint64_t spins = 0; !done(); ++spins) {
    if (quit()) return false;
    if (spins > 2000) std::this_thread::yield();
  }
  return true;
}

class ProcessPool final : public Strategy {
 public:
  explicit ProcessPool(const SyncContext& ctx)
      : m_rank(ctx.rank),
        m_world(ctx.world),
        m_workers(ctx.world - 1),
        m_hogwild(ctx.profile.strategy.poolMode == "hogwild"),
        m_sgdWithoutClipping(ctx.profile.hyper.optimizer == "sgd" && ctx.profile.hyper.clipNorm <= 0),
        m_timeout(peerTimeout(ctx.profile)),
        m_name(core::sharedSegmentName(ctx.port, "pool")) {
    PTW_CHECK(m_workers >= 1, "pool: expected a coordinator and at least one worker, got ", ctx.world, " process(es)");
  }

  // The coordinator walks shard 0's plan: the same number of steps as every worker.
  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override {
    return shardPlan(p, samples, m_rank == 0 ? 0 : m_rank - 1, m_workers);
  }

  bool computesGradients() const override { return m_rank != 0; }
  bool stepsOptimizer() const override { return m_hogwild ? m_rank != 0 : m_rank == 0; }
  /// A sync worker whose coordinator steps in one pass finds its slot zeroed by that pass.
  bool zeroesGradients() const override { return m_rank != 0 && fusedSync(); }

  void attach(Model& model) override {
    m_params = model.parameters();
    m_numel = 0;
    for (const auto& p : m_params) m_numel += static_cast<std::size_t>(p.numel());
    m_slotFloats = cacheLineFloats(m_numel + 3);
    const std::size_t paramFloats = cacheLineFloats(m_numel);
    m_segment = std::make_shared<ShmSegment>(
        m_name, m_rank, m_world, sizeof(float) * (paramFloats + m_slotFloats * static_cast<std::size_t>(m_workers)),
        m_timeout);
    m_shared = static_cast<float*>(m_segment->payload());
    m_slots = m_shared + paramFloats;
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
    // gradients are views of its slot: backward writes them where the coordinator reads.
    std::size_t off = 0;
    for (auto& p : m_params) {
      p.set_data(segmentView(m_segment, m_shared + off, p.sizes()));
      off += static_cast<std::size_t>(p.numel());
    }
    if (!m_hogwild && m_rank != 0) bindGradients(m_params, m_segment, slot(m_rank));
    for (int w = 1; w <= m_workers; ++w) m_slotPtrs.push_back(slot(w));
    m_segment->barrier();
    if (fusedStep()) {  // Note [Coordinator helpers]
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      m_lanes = lanesFor(m_numel, std::min(m_workers, cores));
      const std::uint32_t attached = m_segment->generation();
      for (int lane = 1; lane < m_lanes; ++lane) m_helpers.emplace_back([this, lane, attached] { help(lane, attached); });
    }
  }

  bool reduce(Model&, StepState& state) override {
    if (m_hogwild) return m_rank == 0 ? followWorkers(state) : publishProgress(state);
    return m_rank == 0 ? averageSlots(state) : offerGradients(state);
  }

  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    if (!fusedStep()) return Strategy::optimizerStep(optimizer, clipNorm);
    auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
    PTW_CHECK(sgd && clipNorm <= 0, "internal: the pool's fused step needs SGD without clipping");
    auto next = m_params.begin();
    m_pieces = sgdPieces(*sgd, [&](torch::Tensor& p) {
      PTW_CHECK(next != m_params.end() && next->is_same(p), "internal: the optimizer's parameters are not the pool's");
      ++next;
      return true;
    });
    ++m_steps;
    m_posted.store(m_steps, std::memory_order_release);  // the helpers, awake since the barrier, take their shares
    stepShare(0);
    const auto helpers = m_helpers.size();
    spinUntil([&] { return m_finished.load(std::memory_order_acquire) == m_steps * helpers; }, [] { return false; });
  }

  void afterOptimizerStep(Model&) override {
    if (!m_hogwild && m_rank == 0) m_segment->barrier();  // parameters updated: release the workers
  }

  ~ProcessPool() override {
    m_quit.store(true, std::memory_order_release);
    for (auto& t : m_helpers) t.join();
  }

  void finish() override {
    if (m_rank != 0 && m_segment) m_segment->doneFlag(m_rank).store(1, std::memory_order_release);
  }

 private:
  /// A sync pool whose coordinator steps SGD (without clipping) in one pass with the average.
  bool fusedSync() const { return !m_hogwild && m_sgdWithoutClipping; }
  /// This process is that coordinator.
  bool fusedStep() const { return m_rank == 0 && fusedSync(); }

  /// Lane `lane`'s share of the fused step.
  void stepShare(int lane) {
    const auto [lo, hi] = shareOf(m_numel, m_lanes, lane);
    forEachInShare(m_pieces, lo, hi, [&](std::size_t i, std::size_t a, std::size_t b) {
      const auto& piece = m_pieces[i];
      averageThenSgd(piece.w + a, piece.buf ? piece.buf + a : nullptr, m_slotPtrs.data(), m_workers, piece.at + a,
                     piece.at + b, piece.scalars, piece.first);
    });
  }

  // Note [Coordinator helpers]
  // While the coordinator steps, every worker waits at the second barrier, so the cores they
  // compute on are idle: the coordinator splits its fused step with up to workers - 1 helper
  // threads (no more than the machine's cores, and none for a model under kLaneSplitFloats a
  // lane). Measured on mlp (2 workers): the coordinator's step took 0.8-1.4 ms alone, where
  // DDP's sharded step takes ~0.5. A helper must not spin while the workers compute (it would
  // take a core from them), and one woken by the coordinator started ~0.3 ms late on this
  // machine; so a helper sleeps on the segment's barrier word itself, and the last worker to
  // offer its gradients wakes it together with the coordinator. It then waits for the step's
  // pieces (the learning rate may change every step) and takes its share. Each step passes
  // two barriers: gradients offered, coordinator stepped.
  void help(int lane, std::uint32_t attached) {
    for (std::uint64_t step = 1;; ++step) {
      // Step s's first barrier is the (2s - 1)th after attach: the generation then is attached + 2s - 1.
      const auto offered = attached + static_cast<std::uint32_t>(2 * step - 1);
      if (!m_segment->awaitGeneration(offered, m_quit)) return;
      if (!spinUntil([&] { return m_posted.load(std::memory_order_acquire) == step; },
                     [&] { return m_quit.load(std::memory_order_acquire); }))
        return;
      stepShare(lane);
      m_finished.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  // Note [Workers awake through the step]
  // A sync worker waits at the second barrier while the coordinator averages and steps: on
  // mlp 0.8-1.2 ms, around the 1 ms after which a barrier sleeps, so a worker often slept and
  // came back a futex wake-up late, both workers in turn. Only that wait, whose length is the
  // coordinator's step and not another worker's compute, stays awake (yielding) longer; the
  // coordinator, whose wait at the first barrier is the workers' compute, still sleeps after 1 ms.
  static constexpr std::chrono::microseconds kStepAwake{5000};

  float* slot(int worker) const { return m_slots + static_cast<std::size_t>(worker - 1) * m_slotFloats; }

  // sync, worker: gradients, loss and stop wish into the slot; wait for the new parameters.
  bool offerGradients(StepState& state) {
    float* s = slot(m_rank);
    bindGradients(m_params, m_segment, s);  // normally already there: nothing to copy
    s[m_numel] = static_cast<float>(state.loss);
    s[m_numel + 1] = static_cast<float>(state.samples);
    s[m_numel + 2] = m_localStop ? 1.f : 0.f;
    m_segment->barrier();  // gradients offered
    m_segment->barrier(kStepAwake);  // coordinator stepped (afterOptimizerStep on rank 0)
    return m_segment->stopFlag().load(std::memory_order_acquire) != 0;
  }

  // sync, coordinator: the average of the workers' gradients, in worker order.
  bool averageSlots(StepState& state) {
    m_segment->barrier();
    torch::NoGradGuard noGrad;
    bool stop = m_localStop;
    double lossSum = 0, samples = 0;
    if (!fusedStep()) {  // else optimizerStep averages as it steps
      std::size_t off = 0;
      for (auto& p : m_params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        const auto n = static_cast<std::size_t>(p.numel());
        averageInto(p.mutable_grad().data_ptr<float>(), m_slotPtrs.data(), m_workers, off, n);
        off += n;
      }
    }
    for (int w = 1; w <= m_workers; ++w) {
      const float* s = slot(w);
      lossSum += static_cast<double>(s[m_numel]) * s[m_numel + 1];
      samples += s[m_numel + 1];
      stop = stop || s[m_numel + 2] > 0.5f;
    }
    state.loss = samples > 0 ? lossSum / samples : 0;
    state.samples = static_cast<std::int64_t>(samples);
    m_segment->stopFlag().store(stop ? 1 : 0, std::memory_order_release);
    return stop;
  }

  // hogwild, worker: publish loss and progress; stop when the coordinator says so.
  bool publishProgress(StepState& state) {
    float* s = slot(m_rank);
    s[m_numel] = static_cast<float>(state.loss);
    s[m_numel + 1] = static_cast<float>(state.samples);
    m_segment->progress(m_rank).fetch_add(1, std::memory_order_release);
    return m_localStop || m_segment->stopFlag().load(std::memory_order_acquire) != 0;
  }

  // hogwild, coordinator: a step is done when every worker has done it (or finished).
  bool followWorkers(StepState& state) {
    ++m_followed;
    if (m_localStop) m_segment->stopFlag().store(1, std::memory_order_release);
    const auto start = std::chrono::steady_clock::now();
    PeerWait waiting;
    for (;;) {
      bool behind = false, endedEarly = false;
      for (int w = 1; w <= m_workers; ++w) {
        const bool done = m_segment->doneFlag(w).load(std::memory_order_acquire) != 0;
        const bool lagging = m_segment->progress(w).load(std::memory_order_acquire) < m_followed;
        if (lagging && done) endedEarly = true;  // a worker stopped before this step: stop too
        if (lagging && !done) behind = true;
      }
      if (!behind) return finishWith(state, m_localStop || endedEarly);
      PTW_CHECK(std::chrono::steady_clock::now() - start < m_timeout, "pool: no hogwild worker progress for ",
                m_timeout.count() / 1000.0, " s (run.timeout_s and 5 s)");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // leave the cores to the workers
    }
  }

  bool finishWith(StepState& state, bool stop) {
    double lossSum = 0, samples = 0;
    for (int w = 1; w <= m_workers; ++w) {
      lossSum += static_cast<double>(slot(w)[m_numel]) * slot(w)[m_numel + 1];
      samples += slot(w)[m_numel + 1];
    }
    state.loss = samples > 0 ? lossSum / samples : 0;
    state.samples = static_cast<std::int64_t>(samples);
    return stop;
  }

  int m_rank;
  int m_world;
  int m_workers;
  bool m_hogwild;
  bool m_sgdWithoutClipping;
  std::chrono::milliseconds m_timeout;
  std::string m_name;
  std::shared_ptr<ShmSegment> m_segment;
  // The coordinator's fused step (Note [Coordinator helpers]).
  int m_lanes = 1;  ///< the coordinator and its helpers
  std::vector<SgdPiece> m_pieces;  ///< this step's, written before m_posted
  std::vector<std::thread> m_helpers;
  std::uint64_t m_steps = 0;
  std::atomic<std::uint64_t> m_posted{0};    ///< steps whose pieces are ready
  std::atomic<std::uint64_t> m_finished{0};  ///< shares the helpers have done, over all steps
  std::atomic<bool> m_quit{false};
  std::vector<float*> m_slotPtrs;  ///< slot(1) .. slot(N)
  std::vector<torch::Tensor> m_params;
  std::size_t m_numel = 0;
  std::size_t m_slotFloats = 0;
  float* m_shared = nullptr;
  float* m_slots = nullptr;
  std::int64_t m_followed = 0;
};

}  // namespace

std::unique_ptr<Strategy> makeProcessPool(const SyncContext& ctx) { return std::make_unique<ProcessPool>(ctx); }

}  // namespace ptw::engine
