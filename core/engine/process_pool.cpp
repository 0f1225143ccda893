// Process pool: a coordinator process (rank 0) and N worker processes (ranks 1..N).
// The parameters and one gradient slot per worker live in one POSIX shared-memory
// segment mapped as tensors, so nothing is copied between processes per step.
//
// Note [Pool modes]
// sync: every step each worker computes the gradient of its DistributedSampler shard
//   (worker r trains shard r-1 of N) into its slot, then all meet at a barrier; the
//   coordinator averages the slots into its gradients and steps the one optimizer, which
//   writes the shared parameters in place; a second barrier releases the workers onto the
//   new parameters. Mathematically the same as Single on the full batch: the fix for the
//   `Pool().map(model, data)` idea, where gradients never flowed back from the workers.
// hogwild: each worker steps its own optimizer on the shared parameters without locks
//   (as PyTorch's mnist_hogwild example does); the coordinator follows the slowest
//   worker's progress, reports the mean loss, validates and checkpoints the shared
//   parameters. Hogwild resumes the parameters; worker optimizer state (momentum) restarts.
//
// Slot layout (floats): gradients of every parameter, then loss, samples, stop wish.
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/shm_segment.h"
#include "engine/strategy.h"

namespace ptw::engine {
namespace {

class ProcessPool final : public Strategy {
 public:
  explicit ProcessPool(const SyncContext& ctx)
      : m_rank(ctx.rank),
        m_world(ctx.world),
        m_workers(ctx.world - 1),
        m_hogwild(ctx.profile.strategy.poolMode == "hogwild"),
        m_timeout(std::chrono::milliseconds(static_cast<long>(ctx.profile.run.timeoutS * 1000))),
        m_name("/ptw-" + std::to_string(ctx.port) + "-pool") {
    PTW_CHECK(m_workers >= 1, "pool: expected a coordinator and at least one worker, got ", ctx.world, " process(es)");
  }

  // The coordinator walks shard 0's plan: the same number of steps as every worker.
  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override {
    return shardPlan(p, samples, m_rank == 0 ? 0 : m_rank - 1, m_workers);
  }

  bool computesGradients() const override { return m_rank != 0; }
  bool stepsOptimizer() const override { return m_hogwild ? m_rank != 0 : m_rank == 0; }

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
  }

  bool reduce(Model&, StepState& state) override {
    if (m_hogwild) return m_rank == 0 ? followWorkers(state) : publishProgress(state);
    return m_rank == 0 ? averageSlots(state) : offerGradients(state);
  }

  void afterOptimizerStep(Model&) override {
    if (!m_hogwild && m_rank == 0) m_segment->barrier();  // parameters updated: release the workers
  }

  void finish() override {
    if (m_rank != 0 && m_segment) m_segment->doneFlag(m_rank).store(1, std::memory_order_release);
  }

 private:
  float* slot(int worker) const { return m_slots + static_cast<std::size_t>(worker - 1) * m_slotFloats; }

  // sync, worker: gradients, loss and stop wish into the slot; wait for the new parameters.
  bool offerGradients(StepState& state) {
    float* s = slot(m_rank);
    bindGradients(m_params, m_segment, s);  // normally already there: nothing to copy
    s[m_numel] = static_cast<float>(state.loss);
    s[m_numel + 1] = static_cast<float>(state.samples);
    s[m_numel + 2] = m_localStop ? 1.f : 0.f;
    m_segment->barrier();  // gradients offered
    m_segment->barrier();  // coordinator stepped (afterOptimizerStep on rank 0)
    return m_segment->stopFlag().load(std::memory_order_acquire) != 0;
  }

  // sync, coordinator: the average of the workers' gradients, in worker order.
  bool averageSlots(StepState& state) {
    m_segment->barrier();
    torch::NoGradGuard noGrad;
    bool stop = m_localStop;
    double lossSum = 0, samples = 0;
    std::size_t off = 0;
    for (auto& p : m_params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      const auto n = static_cast<std::size_t>(p.numel());
      averageInto(p.mutable_grad().data_ptr<float>(), m_slotPtrs.data(), m_workers, off, n);
      off += n;
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
                m_timeout.count() / 1000.0, " s (run.timeout_s)");
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
  std::chrono::milliseconds m_timeout;
  std::string m_name;
  std::shared_ptr<ShmSegment> m_segment;
  std::vector<const float*> m_slotPtrs;  ///< slot(1) .. slot(N)
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
