// DistributedDataParallel over c10d: one process per rank, a TCPStore on 127.0.0.1 for
// rendezvous, ProcessGroupGloo on CPU and ProcessGroupNCCL on CUDA.
//
// Note [Fused gradient all-reduce]
// A Gloo all-reduce over loopback costs ~200 µs however small the tensor, so one
// collective per parameter makes small models communication-bound. All gradients are
// copied into one flat buffer and reduced in a single collective. The buffer carries one
// extra element, the rank's stop wish, so a graceful stop needs no extra round trip and
// every rank leaves after the same step.
#include <chrono>

#include "common/error.h"
#include "engine/c10d_compat.h"
#include "engine/gradient_sync.h"

namespace ptw::engine {
namespace {

class DdpSync final : public GradientSync {
 public:
  explicit DdpSync(const SyncContext& ctx) : m_world(ctx.world) {
    const auto& p = ctx.profile;
    auto timeout = std::chrono::milliseconds(static_cast<long>(p.run.timeoutS * 1000));
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(ctx.port);
    so.isServer = ctx.rank == 0;
    so.numWorkers = static_cast<std::size_t>(ctx.world);
    so.waitWorkers = true;
    so.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
    if (p.strategy.backend == "nccl") {
#if defined(PTW_WITH_CUDA) && defined(USE_C10D_NCCL)
      m_group = c10dcompat::makeNccl(store, ctx.rank, ctx.world, timeout);
#else
      PTW_FAIL("strategy.backend: this build of ptw has no NCCL (LibTorch without CUDA); use \"gloo\"");
#endif
    } else {
      m_group = c10dcompat::makeGloo(store, ctx.rank, ctx.world, timeout);
    }
  }

  void attach(const std::vector<torch::Tensor>& params) override {
    torch::NoGradGuard noGrad;
    std::vector<torch::Tensor> flat{torch::cat(flatten(params))};
    m_group->broadcast(flat)->wait();
    std::int64_t offset = 0;
    for (const auto& p : params) {
      p.copy_(flat[0].narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
  }

  bool reduce(const std::vector<torch::Tensor>& params, bool localStop) override {
    torch::NoGradGuard noGrad;
    std::int64_t total = 1;
    for (const auto& p : params) total += p.numel();
    if (!m_buffer.defined() || m_buffer.numel() != total)
      m_buffer = torch::empty({total}, params.front().options());
    std::int64_t offset = 0;
    for (const auto& p : params) {
      auto slot = m_buffer.narrow(0, offset, p.numel());
      if (p.grad().defined()) slot.copy_(p.grad().reshape({-1}));
      else slot.zero_();
      offset += p.numel();
    }
    m_buffer[total - 1] = localStop ? 1.0f : 0.0f;
    std::vector<torch::Tensor> io{m_buffer};
    m_group->allreduce(io)->wait();
    m_buffer.narrow(0, 0, total - 1).div_(m_world);
    offset = 0;
    for (const auto& p : params) {
      auto slot = m_buffer.narrow(0, offset, p.numel()).view_as(p);
      if (p.grad().defined()) p.mutable_grad().copy_(slot);
      else p.mutable_grad() = slot.clone();
      offset += p.numel();
    }
    return m_buffer[total - 1].item<float>() > 0.5f;
  }

 private:
  static std::vector<torch::Tensor> flatten(const std::vector<torch::Tensor>& params) {
    std::vector<torch::Tensor> out;
    for (const auto& p : params) out.push_back(p.detach().reshape({-1}));
    return out;
  }

  int m_world;
  c10::intrusive_ptr<c10dcompat::Group> m_group;
  torch::Tensor m_buffer;
};

}  // namespace

std::unique_ptr<GradientSync> makeShmSync(const SyncContext& ctx);

std::unique_ptr<GradientSync> makeDdpSync(const SyncContext& ctx) {
  if (ctx.profile.strategy.backend == "shm") return makeShmSync(ctx);
  return std::make_unique<DdpSync>(ctx);
}

}  // namespace ptw::engine
