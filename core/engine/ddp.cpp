// SPDX-License-Identifier: GPL-3.0-or-later
// DistributedDataParallel over c10d: one process per rank, a TCPStore on 127.0.0.1 for
// rendezvous, ProcessGroupGloo on CPU and ProcessGroupNCCL on CUDA (compat.h hides the
// 1.13/2.x differences). Same-machine CPU ranks can use shared memory instead (ddp_shm.cpp).
//
// Note [Gradient buckets]
// This is our own bucketing over c10d rather than c10d::Reducer: Reducer's C++ API is
// internal, differs between 1.13 and 2.x, and expects the Python DDP wrapper around it.
// The idea is Reducer's. Parameters are grouped, in reverse order (the order backward
// produces their gradients), into buckets of at most strategy.bucket_mb. A post-hook on
// each parameter's gradient accumulator copies the finished gradient into its bucket's
// flat buffer; when a bucket's last gradient arrives, its all-reduce is launched
// asynchronously, so communication overlaps the rest of the backward pass. Buckets are
// launched strictly in order (a ready bucket waits for the ones before it), so every
// rank issues the same collectives in the same order. reduce() then only waits. With
// gradient accumulation the hooks are disarmed on all but the last micro-batch, so the
// accumulated gradient is communicated once (no_sync). A Gloo all-reduce over loopback has
// a fixed cost however small it is, so small models get one bucket: one collective a step.
// The bucket holding the first parameter (the last to be ready) carries one extra
// element, the rank's stop wish, so a graceful stop needs no extra round trip.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <chrono>
#include <cstdio>
#include <mutex>

#include "common/error.h"
#include "engine/collective_position.h"
#include "engine/compat_c10d.h"
#include "engine/ddp_shm.h"
#include "engine/model.h"
#include "engine/peer_wait.h"
#include "engine/strategy.h"

namespace ptw::engine {
namespace {

constexpr bool kHaveNccl = PTW_HAVE_NCCL;

class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : m_fn(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    m_fn();
    return outputs;
  }

 private:
  std::function<void()> m_fn;
};

struct Bucket {
  std::vector<std::size_t> params;    ///< indices into the parameter list
  std::vector<std::int64_t> offsets;  ///< of each in `buffer`
  torch::Tensor buffer;
  std::size_t pending = 0;
  bool ready = false;
  compat::WorkPtr work;
};

class Ddp final : public Strategy {
 public:
  explicit Ddp(const SyncContext& ctx)
      : m_rank(ctx.rank), m_world(ctx.world), m_bucketMb(ctx.profile.strategy.bucketMb) {
    m_needsAutograd = true;  // the buckets are launched from hooks on autograd's AccumulateGrad nodes
    collectivePosition().counting.store(true, std::memory_order_relaxed);  // Note [Collective positions]
    const auto& p = ctx.profile;
    setDevice(
        deviceFor(p, ctx.localRank >= 0 ? ctx.localRank : ctx.rank));  // before rendezvous: a missing GPU fails fast
    const auto timeout = peerTimeout(p);
    // Meeting the others is waiting for them (Note [Who stalled]): a rank that never comes is
    // the one named, not those that wait for it.
    PeerWait meeting;
    // Note [Local rendezvous] in launcher.cpp: a FileStore for local runs, else a TCPStore.
    c10::intrusive_ptr<c10d::Store> store;
    if (!ctx.storeFile.empty()) {
      store = c10::make_intrusive<c10d::FileStore>(ctx.storeFile, ctx.world);
      store->setTimeout(timeout);
    } else {
      c10d::TCPStoreOptions so;
      so.port = static_cast<std::uint16_t>(ctx.port);
      so.isServer = ctx.rank == 0;
      so.numWorkers = static_cast<std::size_t>(ctx.world);
      so.waitWorkers = true;
      so.timeout = timeout;
      store = c10::make_intrusive<c10d::TCPStore>(ctx.masterAddr, so);
    }
    if (core::collectiveBackend(p, kHaveNccl) == "nccl") {
#if PTW_HAVE_NCCL
      m_group = compat::makeNccl(store, ctx.rank, ctx.world, timeout);
#else
      PTW_FAIL(
          "strategy.backend: this build of ptw has no NCCL (its LibTorch has no CUDA, or nccl.h was not found "
          "when ptw was built: see the \"ptw: LibTorch\" line of its configure); ",
          PTW_HAVE_GLOO ? "use \"gloo\"" : "it has no Gloo either, so it cannot run DDP on GPUs");
#endif
    } else {
#if PTW_HAVE_GLOO
      m_group = compat::makeGloo(store, ctx.rank, ctx.world, timeout, ctx.masterAddr);
#else
      PTW_FAIL(
          "strategy.backend: this build of ptw has no Gloo (its LibTorch came without the gloo headers: see the "
          "\"ptw: LibTorch\" line of its configure); ",
          p.strategy.device == "cpu" ? "use \"shm\" with float32 models"
          : PTW_HAVE_NCCL            ? "use \"nccl\""
                                     : "it has no NCCL either, so it cannot run DDP on GPUs");
#endif
    }
  }

  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override {
    return shardPlan(p, samples, m_rank, m_world);
  }

  void attach(Model& model) override {
    m_params = model.parameters();
    m_buffers = model.buffers();
    broadcastParameters();
    broadcastBuffers();
    makeBuckets();
    for (std::size_t i = 0; i < m_params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(m_params[i]);
      PTW_CHECK(acc, "ddp: parameter ", i, " is not a trainable leaf tensor");
      acc->add_post_hook(std::make_unique<GradReadyHook>([this, i] { onGradReady(i); }));
      m_accumulators.push_back(std::move(acc));  // the variable holds only a weak reference
    }
  }

  void beginStep(bool localStop) override {
    Strategy::beginStep(localStop);
    broadcastBuffers();  // Note [Buffers]: before this step's forward
    for (auto& b : m_buckets) {
      b.pending = b.params.size();
      b.ready = false;
      b.work.reset();
    }
    m_nextLaunch = 0;
  }

  void setSyncGradients(bool on) override { m_armed = on; }

  bool reduce(Model&, StepState&) override {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      // Parameters that got no gradient this step (unused by the forward pass) count as zero.
      for (auto& b : m_buckets) {
        if (b.ready) continue;
        for (std::size_t k = 0; k < b.params.size(); ++k) {
          const auto& g = m_params[b.params[k]].grad();
          auto slot = b.buffer.narrow(0, b.offsets[k], m_params[b.params[k]].numel());
          if (g.defined())
            slot.copy_(g.reshape({-1}));
          else
            slot.zero_();
        }
        markReady(b);
      }
    }
    torch::NoGradGuard noGrad;
    for (auto& b : m_buckets) {
      {
        PeerWait waiting;
        b.work->wait();
      }
      completeCollective();
      b.buffer.div_(m_world);
      for (std::size_t k = 0; k < b.params.size(); ++k) {
        auto& p = m_params[b.params[k]];
        auto slot = b.buffer.narrow(0, b.offsets[k], p.numel()).view_as(p);
        if (p.grad().defined())
          p.mutable_grad().copy_(slot);
        else
          p.mutable_grad() = slot.clone();
      }
    }
    // The stop element was divided with the rest: any rank's wish leaves it > 0.
    const auto& last = m_buckets.back().buffer;
    return last[last.numel() - 1].item<float>() > 0.f;
  }

  void finish() override { compat::shutdown(*m_group); }

 private:
  void broadcastParameters() {
    torch::NoGradGuard noGrad;
    std::vector<torch::Tensor> flat;
    for (const auto& p : m_params) flat.push_back(p.detach().reshape({-1}));
    std::vector<torch::Tensor> io{torch::cat(flat)};
    {
      PeerWait waiting;
      enterCollective("broadcast");
      m_group->broadcast(io)->wait();
      completeCollective();
    }
    std::int64_t offset = 0;
    for (const auto& p : m_params) {
      p.detach().copy_(io[0].narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
  }

  // Rank 0's buffers to every rank, in one float64 tensor (Note [Buffers]); nothing without buffers.
  void broadcastBuffers() {
    if (m_buffers.empty()) return;
    torch::NoGradGuard noGrad;
    std::vector<torch::Tensor> flat;
    for (const auto& b : m_buffers) flat.push_back(b.detach().reshape({-1}).to(torch::kDouble));
    std::vector<torch::Tensor> io{torch::cat(flat)};
    {
      PeerWait waiting;
      enterCollective("broadcast");
      m_group->broadcast(io)->wait();
      completeCollective();
    }
    if (m_rank == 0) return;
    std::int64_t offset = 0;
    for (auto& b : m_buffers) {
      b.detach().copy_(io[0].narrow(0, offset, b.numel()).view_as(b));
      offset += b.numel();
    }
  }

  void makeBuckets() {
    const auto capBytes = static_cast<std::int64_t>(m_bucketMb * 1024 * 1024);
    Bucket current;
    std::int64_t bytes = 0;
    for (std::size_t k = m_params.size(); k-- > 0;) {
      const std::int64_t size = m_params[k].numel() * static_cast<std::int64_t>(m_params[k].element_size());
      if (!current.params.empty() && bytes + size > capBytes) {
        m_buckets.push_back(std::move(current));
        current = Bucket{};
        bytes = 0;
      }
      current.offsets.push_back(bytes / static_cast<std::int64_t>(m_params[k].element_size()));
      current.params.push_back(k);
      bytes += size;
    }
    m_buckets.push_back(std::move(current));
    m_bucketOf.assign(m_params.size(), 0);
    for (std::size_t b = 0; b < m_buckets.size(); ++b) {
      auto& bucket = m_buckets[b];
      std::int64_t numel = 0;
      for (auto k : bucket.params) {
        m_bucketOf[k] = b;
        numel += m_params[k].numel();
      }
      const bool carriesStop = b + 1 == m_buckets.size();
      bucket.buffer = torch::zeros({numel + (carriesStop ? 1 : 0)}, m_params.front().options().requires_grad(false));
    }
  }

  // Runs on the autograd thread as each parameter's gradient is accumulated.
  void onGradReady(std::size_t index) {
    if (!m_armed) return;
    std::lock_guard<std::mutex> lock(m_mutex);
    Bucket& b = m_buckets[m_bucketOf[index]];
    if (b.ready) return;
    std::size_t k = 0;
    while (b.params[k] != index) ++k;
    torch::NoGradGuard noGrad;
    b.buffer.narrow(0, b.offsets[k], m_params[index].numel()).copy_(m_params[index].grad().reshape({-1}));
    if (--b.pending == 0) markReady(b);
  }

  // Call with m_mutex held.
  void markReady(Bucket& bucket) {
    bucket.ready = true;
    if (&bucket == &m_buckets.back()) {
      auto& buf = bucket.buffer;
      buf[buf.numel() - 1].fill_(m_localStop ? 1.0f : 0.0f);
    }
    while (m_nextLaunch < m_buckets.size() && m_buckets[m_nextLaunch].ready) {
      std::vector<torch::Tensor> io{m_buckets[m_nextLaunch].buffer};
      enterCollective("all-reduce");
      m_buckets[m_nextLaunch].work = m_group->allreduce(io);
      ++m_nextLaunch;
      ++m_exchanges;
    }
  }

  int m_rank;
  int m_world;
  double m_bucketMb;
  c10::intrusive_ptr<compat::Group> m_group;
  std::vector<torch::Tensor> m_params;
  std::vector<torch::Tensor> m_buffers;  ///< Note [Buffers]
  std::vector<std::shared_ptr<torch::autograd::Node>> m_accumulators;
  std::vector<Bucket> m_buckets;
  std::vector<std::size_t> m_bucketOf;
  std::size_t m_nextLaunch = 0;
  bool m_armed = true;
  std::mutex m_mutex;
};

}  // namespace

namespace {

// Note [Auto backend on CPU]
// strategy.backend "auto" on CPU ranks means shared memory, which reduces dense float32
// parameters listed once each. A model it cannot reduce (float64 parameters, say) trains
// over Gloo instead, rather than failing with advice to set the backend by hand. The choice
// waits for the model (choose(), Note [Chosen once]) and is made from it alone, so every
// rank, having built the same model, makes the same one before any rank touches a segment
// or a store; rank 0's log says which, and why. Shared memory picks its algorithm from the
// model too (its size), so "shm" chooses the same way, without the fallback.
class CpuDdpChoice final : public Strategy {
 public:
  explicit CpuDdpChoice(const SyncContext& ctx) : m_ctx(ctx) {}

  std::unique_ptr<Strategy> choose(Model& model) override {
    if (m_ctx.profile.strategy.backend != "auto") return makeShmDdp(m_ctx, model);
    const std::string refusal = shmRefusal(model.parameters());
    if (m_ctx.rank == 0)
      std::fprintf(stderr, "[rank 0] strategy.backend auto: %s\n",
                   refusal.empty() ? "shm" : ("gloo, as shared memory " + refusal).c_str());
    if (refusal.empty()) return makeShmDdp(m_ctx, model);
    return std::make_unique<Ddp>(m_ctx);
  }

  // Never trains: chooseFor() replaces it by what choose() returns.
  BatchPlan plan(const core::Profile&, std::int64_t) const override { unchosen(); }
  void attach(Model&) override { unchosen(); }
  bool reduce(Model&, StepState&) override { unchosen(); }

 private:
  [[noreturn]] static void unchosen() {
    PTW_FAIL("internal: DDP on CPU ranks trains through the class chooseFor() picks for the model");
  }

  const SyncContext m_ctx;
};

}  // namespace

std::unique_ptr<Strategy> makeDdp(const SyncContext& ctx) {
  const std::string backend = core::collectiveBackend(ctx.profile, kHaveNccl);
  if (backend == "shm") return std::make_unique<CpuDdpChoice>(ctx);
  if (ctx.profile.strategy.backend == "auto" && ctx.rank == 0)
    std::fprintf(stderr, "[rank 0] strategy.backend auto: %s\n", backend.c_str());
  return std::make_unique<Ddp>(ctx);
}

PTW_REGISTER_STRATEGY("ddp", makeDdp);

}  // namespace ptw::engine
