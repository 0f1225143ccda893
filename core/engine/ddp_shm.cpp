// SPDX-License-Identifier: GPL-3.0-or-later
// DDP for ranks on one machine over POSIX shared memory (strategy.backend "shm"): a base
// that holds the segment, and one class per way of stepping over it, chosen once for the
// model (makeShmDdp; Note [Chosen once]): OneBarrierDdp, ShardedSgdDdp, AllReduceDdp.
//
// Note [Shared-memory all-reduce]
// On loopback a Gloo all-reduce has a fixed cost, even for one float, many times the whole
// step of a small model. Ranks on the same machine instead share one segment with a
// slot per rank, and each rank's gradients live in its own slot: at attach every
// parameter's .grad becomes a view of the slot, and backward accumulates into it in place
// (zero_grad zeroes it, it never replaces it), so nothing is packed. At a barrier each
// rank takes its own share of the elements, sums them over all slots in rank order,
// scales by 1/world and writes the average back into every slot; after a second barrier
// every rank's gradients are the average, bit-identical on all ranks (every element is
// summed once, in the same order). Each rank moves its share of the gradients once in
// and world times out, near two passes over the gradients where packing them, summing into
// a result and copying back take five: the step is memory-bound once gradients are
// megabytes. Two barriers a step cost little next to that. The reduction is one fused
// pass after backward: at these latencies overlapping it with the backward pass (Note
// [Gradient buckets]) would buy nothing.
//
// Note [Sharded SGD step]
// With SGD and no clipping (the optimizer every rank would otherwise run on the same
// averaged gradients), the ranks also share one copy of the parameters and of the
// momentum buffers, in the segment after the slots: each parameter's data is a view of
// it (set at attach, which is also the broadcast of rank 0's values), and its momentum
// buffer in the optimizer's state is one too. After the first barrier each rank averages
// its share of the gradients and applies SGD's update (sgdUpdate, Note [Fused SGD]) to
// its share of the parameters and buffers at once (SharedSgd, which the pool's workers
// use too); the second barrier ends the step.
// Each rank so does 1/world of the optimizer's work, and the averaged gradients are never
// written anywhere: after backward a rank reads its share from every slot (one pass over
// the gradients in all) and reads and writes its share of parameters and buffers (4/world
// passes), where packing, summing, copying back and a whole optimizer step take about ten. What it
// has read it zeroes while it is in cache, for the next backward, so no rank zeroes its
// whole slot at the start of a step (zero_grad: one more pass over all the gradients). A
// checkpoint (rank 0) holds the full parameters and buffers, as a torch SGD would; a
// resumed buffer is copied in, share by share, on the first step.
// Adam, AdamW or clipping (which needs the norm of the whole gradient) keep the
// all-reduce above and every rank's own optimizer. The views keep the mapping alive
// (their deleter holds the segment), so parameters outlive the strategy safely.
//
// Note [One-barrier step]
// A model of at most kOneBarrierFloats parameters (the seed workload's has 22) steps in
// microseconds, and each barrier costs a share of that and a wait for the slower rank. Such
// a model skips both schemes above: after backward a rank copies its gradients into its slot,
// meets the others at one barrier, and sums every slot in rank order into its own
// gradients (averageInto), so every rank holds the same average, bit for bit; each then
// runs its own optimizer, as with Adam. Without a second barrier a fast rank could write
// its next gradients while a slow one still reads these, so the slots come in two sets
// and steps alternate between them: a rank writes a set again two steps on, after it
// passed the next barrier, which no rank reaches before it has read the set. Copying
// and summing the whole model on every rank costs less than the barrier it saves while
// the model fits in a few KiB.
#include "engine/ddp_shm.h"

#include <cstring>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "common/error.h"
#include "common/shm_names.h"
#include "engine/collective_position.h"
#include "engine/kernels.h"
#include "engine/model.h"
#include "engine/peer_wait.h"
#include "engine/shared_sgd.h"
#include "engine/shm_segment.h"

namespace ptw::engine {
namespace {

// The segment of one slot per rank (Note [Shared-memory all-reduce]), rank 0's parameters
// broadcast at attach, and the ranks' meetings: what every algorithm over shared memory shares.
class ShmDdp : public Strategy {
 public:
  ShmDdp(const SyncContext& ctx, std::size_t gradFloats)
      : m_rank(ctx.rank),
        m_world(ctx.world),
        m_timeout(peerTimeout(ctx.profile)),
        m_name(core::sharedSegmentName(ctx.port, "ddp")),
        m_momentum(ctx.profile.hyper.momentum != 0),
        m_gradFloats(gradFloats),
        m_slotFloats(cacheLineFloats(gradFloats + 1)) {                    // the gradients, then the stop wish
    collectivePosition().counting.store(true, std::memory_order_relaxed);  // Note [Collective positions]
  }

  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override {
    return shardPlan(p, samples, m_rank, m_world);
  }

  void attach(Model& model) final {
    m_params = model.parameters();
    m_buffers = model.buffers();
    std::size_t bufferBytes = 0;
    for (const auto& b : m_buffers) {
      PTW_CHECK(b.device().is_cpu() && b.is_contiguous(),
                "strategy.backend shm: expected contiguous CPU buffers, got one on ", b.device(), " of shape ",
                b.sizes());
      bufferBytes += static_cast<std::size_t>(b.nbytes());
    }
    m_bufferFloats = cacheLineFloats((bufferBytes + sizeof(float) - 1) / sizeof(float));
    const std::size_t floats =
        m_slotFloats * static_cast<std::size_t>(m_world) * slotSets() + extraFloats() + 2 * m_bufferFloats;
    m_segment = std::make_shared<ShmSegment>(m_name, m_rank, m_world, sizeof(float) * floats, m_timeout);
    m_bufferSets = static_cast<float*>(m_segment->payload()) + floats - 2 * m_bufferFloats;
    for (int r = 0; r < m_world; ++r) m_slots.push_back(slot(r));
    placeShared();
    // Broadcast rank 0's parameters through `staging`, its buffers through the first set.
    torch::NoGradGuard noGrad;
    float* staging = broadcastStaging();
    if (m_rank == 0)
      forEachParameter([&](torch::Tensor& p, std::size_t off) {
        std::memcpy(staging + off, p.data_ptr<float>(), static_cast<std::size_t>(p.numel()) * sizeof(float));
      });
    offerBuffers(0);
    meet("broadcast");
    m_segment->unlink();
    adopt(staging);
    takeBuffers(0);
    meet();
    attached();
  }

 protected:
  /// Sets of slots in the segment, one after the other.
  virtual std::size_t slotSets() const { return 1; }
  /// Floats after the slots.
  virtual std::size_t extraFloats() const { return 0; }
  /// Before the broadcast, with the segment mapped.
  virtual void placeShared() {}
  /// Where rank 0 leaves its parameters for the others: its slot unless said otherwise.
  virtual float* broadcastStaging() { return slot(0); }
  /// Takes up rank 0's parameters from `staging`.
  virtual void adopt(float* staging) {
    if (m_rank == 0) return;
    forEachParameter([&](torch::Tensor& p, std::size_t off) {
      std::memcpy(p.data_ptr<float>(), staging + off, static_cast<std::size_t>(p.numel()) * sizeof(float));
    });
  }
  /// From here on the slot holds this rank's gradients (Note [Shared-memory all-reduce]).
  virtual void attached() { bindGradients(m_params, m_segment, slot(m_rank)); }

  /// The ranks' barrier, awake as lock-step ranks are (Note [Lock-step waits]), counted as
  /// the collective `name` (Note [Collective positions]).
  void meet(const char* name = "barrier") {
    enterCollective(name);
    m_segment->barrier(m_segment->lockstepAwake());
    completeCollective();
  }

  /// Puts this rank's stop wish after its gradients in `set`, waits for every rank at the
  /// barrier, and returns whether any rank wished to stop. Every wish is read before the
  /// next barrier, so no rank can overwrite one first.
  /// Rank 0's buffers travel the same way, for the next step's forward (Note [Buffers]), in
  /// one of two sets by the step's parity: rank 0 writes a set again two steps on, after the
  /// next barrier, which no rank passes before it has copied this one.
  bool meet(const std::vector<float*>& set) {
    ++m_exchanges;
    set[static_cast<std::size_t>(m_rank)][m_gradFloats] = m_localStop ? 1.f : 0.f;
    const auto bufferSet = static_cast<std::size_t>(m_exchanges % 2);
    offerBuffers(bufferSet);
    meet("all-reduce");
    takeBuffers(bufferSet);
    bool stop = false;
    for (const float* s : set) stop = stop || s[m_gradFloats] > 0.5f;
    return stop;
  }

  /// Rank 0 leaves its buffers in set `k` (Note [Buffers]); nothing without buffers.
  void offerBuffers(std::size_t k) {
    if (m_rank != 0 || m_buffers.empty()) return;
    auto* at = reinterpret_cast<char*>(m_bufferSets + k * m_bufferFloats);
    for (const auto& b : m_buffers) {
      std::memcpy(at, b.data_ptr(), b.nbytes());
      at += b.nbytes();
    }
  }
  /// The other ranks copy rank 0's buffers from set `k`, after the barrier.
  void takeBuffers(std::size_t k) {
    if (m_rank == 0 || m_buffers.empty()) return;
    const auto* at = reinterpret_cast<const char*>(m_bufferSets + k * m_bufferFloats);
    for (auto& b : m_buffers) {
      std::memcpy(b.data_ptr(), at, b.nbytes());
      at += b.nbytes();
    }
  }

  float* slot(int r) const {
    return static_cast<float*>(m_segment->payload()) + static_cast<std::size_t>(r) * m_slotFloats;
  }

  /// This rank's share of the gradient elements: [lo, hi). Shares start on a cache line (16
  /// floats; slots and regions are aligned so), so that no two ranks write the same line.
  std::pair<std::size_t, std::size_t> share() const { return shareOf(m_gradFloats, m_world, m_rank); }

  template <typename F>
  void forEachParameter(F&& f) {
    std::size_t off = 0;
    for (auto& p : m_params) {
      f(p, off);
      off += static_cast<std::size_t>(p.numel());
    }
  }

  const int m_rank;
  const int m_world;
  const std::chrono::milliseconds m_timeout;
  const std::string m_name;
  const bool m_momentum;
  const std::size_t m_gradFloats;
  const std::size_t m_slotFloats;
  std::shared_ptr<ShmSegment> m_segment;
  std::vector<torch::Tensor> m_params;
  std::vector<torch::Tensor> m_buffers;  ///< Note [Buffers]
  std::size_t m_bufferFloats = 0;        ///< one set of them, in the segment after everything else
  float* m_bufferSets = nullptr;         ///< two sets
  std::vector<float*> m_slots;
};

// Note [One-barrier step]
class OneBarrierDdp final : public ShmDdp {
 public:
  static constexpr std::size_t kOneBarrierFloats = 4096;
  static bool enabled(const core::Profile&, std::size_t gradFloats) { return gradFloats <= kOneBarrierFloats; }
  using ShmDdp::ShmDdp;

  // This step's set of slots, then the other set next step.
  bool reduce(Model&, StepState&) override {
    std::vector<float*>& set = m_parity ? m_otherSlots : m_slots;
    m_parity = !m_parity;
    float* mine = set[static_cast<std::size_t>(m_rank)];
    forEachParameter([&](torch::Tensor& p, std::size_t off) {
      const std::size_t n = static_cast<std::size_t>(p.numel());
      torch::Tensor& g = p.mutable_grad();
      if (!g.defined())
        g = torch::zeros_like(p);  // a parameter the loss does not reach
      else if (!g.is_contiguous())
        g = g.contiguous();
      std::memcpy(mine + off, g.data_ptr<float>(), n * sizeof(float));
    });
    const bool stop = meet(set);
    forEachParameter([&](torch::Tensor& p, std::size_t off) {
      averageInto(p.mutable_grad().data_ptr<float>(), set.data(), m_world, off, static_cast<std::size_t>(p.numel()));
    });
    return stop;
  }

 private:
  std::size_t slotSets() const override { return 2; }
  // The gradients stay the model's own: they are copied into a slot each step.
  void attached() override {
    for (int r = 0; r < m_world; ++r) m_otherSlots.push_back(slot(m_world + r));
  }

  std::vector<float*> m_otherSlots;  ///< the second set
  bool m_parity = false;             ///< the set for the next step: m_otherSlots when true
};

// Note [Sharded SGD step]
class ShardedSgdDdp final : public ShmDdp {
 public:
  static bool enabled(const core::Profile& p, std::size_t) {
    return p.hyper.optimizer == "sgd" && p.hyper.clipNorm <= 0;
  }
  using ShmDdp::ShmDdp;

  /// The step that reads the gradients zeroes them (averageThenSgd).
  void zeroGradients(torch::optim::Optimizer&) override {}

  bool reduce(Model&, StepState&) override {
    bindGradients(m_params, m_segment, slot(m_rank));
    return meet(m_slots);
  }

  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    PTW_CHECK(dynamic_cast<torch::optim::SGD*>(&optimizer) && clipNorm <= 0,
              "internal: the sharded step needs SGD without clipping");
    const auto [lo, hi] = share();
    m_sgd->step(optimizer, m_slots.data(), m_world, lo, hi);
    meet();
  }

 private:
  std::size_t regionFloats() const { return cacheLineFloats(m_gradFloats); }
  // The parameters, then the momentum buffers.
  std::size_t extraFloats() const override { return regionFloats() * (m_momentum ? 2 : 1); }
  void placeShared() override {
    m_sharedParams = slot(m_world);
    m_sgd.emplace(m_segment, m_params, m_sharedParams, m_momentum ? m_sharedParams + regionFloats() : nullptr);
  }
  float* broadcastStaging() override { return m_sharedParams; }
  void adopt(float*) override {
    forEachParameter([&](torch::Tensor& p, std::size_t off) {
      p.set_data(segmentView(m_segment, m_sharedParams + off, p.sizes()));
    });
  }

  float* m_sharedParams = nullptr;
  std::optional<SharedSgd> m_sgd;
};

// Note [Shared-memory all-reduce]: Adam, AdamW or clipping, each rank its own optimizer.
class AllReduceDdp final : public ShmDdp {
 public:
  static bool enabled(const core::Profile&, std::size_t) { return true; }
  using ShmDdp::ShmDdp;

  bool reduce(Model&, StepState&) override {
    bindGradients(m_params, m_segment, slot(m_rank));
    const bool stop = meet(m_slots);
    const auto [lo, hi] = share();
    averageIntoSlots(m_slots.data(), m_world, lo, hi);
    meet();
    return stop;
  }
};

template <typename Algorithm>
std::unique_ptr<Strategy> ifEnabled(const SyncContext& ctx, std::size_t gradFloats) {
  if (!Algorithm::enabled(ctx.profile, gradFloats)) return nullptr;
  return std::make_unique<Algorithm>(ctx, gradFloats);
}

}  // namespace

std::unique_ptr<Strategy> makeShmDdp(const SyncContext& ctx, Model& model) {
  const auto params = model.parameters();
  const std::string refusal = shmRefusal(params);
  PTW_CHECK(refusal.empty(),
            ctx.profile.strategy.backend == "auto" ? "strategy.backend auto chose shm (CPU ranks), which"
                                                   : "strategy.backend shm",
            " ", refusal, ": set strategy.backend to gloo");
  std::size_t gradFloats = 0;
  for (const auto& p : params) gradFloats += static_cast<std::size_t>(p.numel());
  // The first that applies, in this order.
  if (auto s = ifEnabled<OneBarrierDdp>(ctx, gradFloats)) return s;
  if (auto s = ifEnabled<ShardedSgdDdp>(ctx, gradFloats)) return s;
  return ifEnabled<AllReduceDdp>(ctx, gradFloats);
}

std::string shmRefusal(const std::vector<torch::Tensor>& params) {
  std::unordered_set<const void*> seen;
  for (const auto& p : params) {
    if (p.scalar_type() != torch::kFloat || !p.device().is_cpu() || !p.is_contiguous()) {
      std::ostringstream why;
      why << "reduces dense float32 CPU parameters; this model has a " << p.scalar_type()
          << (p.is_contiguous() ? "" : " non-contiguous") << " parameter on " << p.device();
      return why.str();
    }
    if (!seen.insert(p.unsafeGetTensorImpl()).second)
      return "needs each parameter once, and this model lists one twice (tied weights)";
  }
  return "";
}

}  // namespace ptw::engine
