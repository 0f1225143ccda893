// SPDX-License-Identifier: GPL-3.0-or-later
// Process pool: a coordinator process (rank 0) and N worker processes (ranks 1..N).
// The parameters and one gradient slot per worker live in one POSIX shared-memory
// segment mapped as tensors, so nothing is copied between processes per step. This file
// holds what they share (ProcessPool) and the choice of class: SyncPoolWorker,
// SyncPoolCoordinator, SharedSgdPoolWorker, SharedSgdPoolCoordinator (pool_sync.cpp),
// HogwildPoolWorker, HogwildPoolCoordinator (pool_hogwild.cpp).
//
// Note [Pool modes]
// sync: every step each worker computes the gradient of its DistributedSampler shard
//   (worker r trains shard r-1 of N) into its slot, then all meet at a barrier; the
//   parameters then take one optimizer step on the average of the slots, and a second
//   barrier releases the workers onto the new parameters. Mathematically the same as
//   Single on the full batch, unlike mapping the model over the data with a process
//   Pool, where gradients never flow back from the workers. With SGD and no clipping the workers step
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
// shared ones, so its checkpoints hold them. Awake once a step, to record it, it takes
// nothing from the workers' cores at either end of a step on a machine with a core per
// worker (BENCHMARKS.md: pool sync against DDP shm).
// The workers may be computing the next step while it reads, so each slot keeps a step's
// loss, samples and stop wish in one of two sets, by the step's parity: a worker writes a
// set again two steps on, after a first barrier that the coordinator reaches only once it
// has read the set. The parameters change only between the first barrier and the workers'
// second, so between its wake-up and its next arrival the coordinator reads them whole
// (validation, checkpoints).
//
// Slot layout (floats): gradients of every parameter, then two sets of loss, samples, stop wish.
#include "engine/process_pool.h"

#include <cstring>

#include "common/error.h"
#include "common/shm_names.h"
#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/peer_wait.h"

namespace ptw::engine {

ProcessPool::ProcessPool(const SyncContext& ctx, Layout layout)
    : m_rank(ctx.rank),
      m_world(ctx.world),
      m_workers(ctx.world - 1),
      m_layout(layout),
      m_statSets(layout.lockstep ? 2 : 1),
      m_momentum(ctx.profile.hyper.momentum != 0),
      m_timeout(peerTimeout(ctx.profile)),
      m_name(core::sharedSegmentName(ctx.port, "pool")),
      m_modelField(ctx.profile.model.kind == "torchscript" ? "model.path" : "model.kind") {
  PTW_CHECK(m_workers >= 1, "pool: expected a coordinator and at least one worker, got ", ctx.world, " process(es)");
}

BatchPlan ProcessPool::plan(const core::Profile& p, std::int64_t samples) const {
  return shardPlan(p, samples, m_rank == 0 ? 0 : m_rank - 1, m_workers);
}

namespace {
// The segment holds float32 parameters: a model of another type fails here, on every rank
// alike, before any rank waits for another.
void checkFloat32(const std::string& field, const std::vector<torch::Tensor>& params) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    PTW_CHECK(p.scalar_type() == torch::kFloat && p.device().is_cpu(), field,
              ": the process pool needs float32 CPU parameters, got ", p.dtype(), " on ", p.device(), " in parameter ",
              i, " (shape ", p.sizes(), "); save the model in float32, or train it with strategy.kind ddp or single");
  }
}
}  // namespace

void ProcessPool::attach(Model& model) {
  m_params = model.parameters();
  checkFloat32(m_modelField, m_params);
  m_numel = 0;
  for (const auto& p : m_params) m_numel += static_cast<std::size_t>(p.numel());
  m_slotFloats = cacheLineFloats(m_numel + 2 * kStats);
  const std::size_t paramFloats = cacheLineFloats(m_numel);
  const std::size_t bufferFloats = m_layout.sharedSgd && m_momentum ? paramFloats : 0;
  // The workers wait for each other awake; a sync coordinator sleeps through the step
  // (Note [Lock-step waits] in shm_segment.cpp).
  m_segment = std::make_shared<ShmSegment>(
      m_name, m_rank, m_world,
      sizeof(float) * (paramFloats + bufferFloats + m_slotFloats * static_cast<std::size_t>(m_workers)), m_timeout,
      m_layout.lockstep ? m_workers : 0);
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
  // From here every process's parameters are views of the segment.
  std::size_t off = 0;
  for (auto& p : m_params) {
    p.set_data(segmentView(m_segment, m_shared + off, p.sizes()));
    off += static_cast<std::size_t>(p.numel());
  }
  for (int w = 1; w <= m_workers; ++w) m_slotPtrs.push_back(slot(w));
  if (m_layout.sharedSgd) m_sgd.emplace(m_segment, m_params, m_shared, bufferFloats ? m_shared + paramFloats : nullptr);
  // Every process built the same model (seed or file) and resumed the same checkpoint, so a
  // worker's buffers now are the coordinator's, which no forward of the coordinator moves.
  m_buffers = model.buffers();
  if (m_rank != 0)
    for (const auto& b : m_buffers) m_coordinatorBuffers.push_back(b.detach().clone());
  attached();
  m_workersMet = m_segment->generation(ShmSegment::Among::AllButRankZero);
  m_segment->barrier();
}

void ProcessPool::beginStep(bool localStop) {
  Strategy::beginStep(localStop);
  torch::NoGradGuard noGrad;
  for (std::size_t k = 0; k < m_coordinatorBuffers.size(); ++k) m_buffers[k].copy_(m_coordinatorBuffers[k]);
}

void ProcessPool::offerStats(const StepState& state, bool stop) {
  float* s = stats(m_rank);
  s[0] = static_cast<float>(state.loss);
  s[1] = static_cast<float>(state.samples);
  s[2] = stop ? 1.f : 0.f;
}

bool ProcessPool::anyWorkerStops() const {
  for (int w = 1; w <= m_workers; ++w)
    if (stats(w)[2] > 0.5f) return true;
  return false;
}

void ProcessPool::addUpLoss(StepState& state) const {
  double lossSum = 0, samples = 0;
  for (int w = 1; w <= m_workers; ++w) {
    const float* s = stats(w);
    lossSum += static_cast<double>(s[0]) * s[1];
    samples += s[1];
  }
  state.loss = samples > 0 ? lossSum / samples : 0;
  state.samples = static_cast<std::int64_t>(samples);
}

std::unique_ptr<Strategy> makeProcessPool(const SyncContext& ctx) {
  return ctx.profile.strategy.poolMode == "hogwild" ? makeHogwildPool(ctx) : makeSyncPool(ctx);
}

PTW_REGISTER_STRATEGY("pool", makeProcessPool);

}  // namespace ptw::engine
