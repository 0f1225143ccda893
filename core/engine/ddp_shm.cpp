// DDP for ranks on one machine over POSIX shared memory (strategy.backend "shm").
//
// Note [Shared-memory all-reduce]
// On loopback a Gloo all-reduce costs ~200 µs even for one float, which is ten times the
// whole step of a small model. Ranks on the same machine instead each write their
// gradients into their own slot of one shared segment and meet at a barrier; each rank
// then sums its own share of the elements over all slots, in rank order, into a shared
// result (every element is summed once, in the same order, so every rank reads
// bit-identical results), and after a second barrier every rank copies the whole result,
// averaged, into its gradients. Splitting the sum keeps the memory each rank moves near
// three passes over the gradients, which is what bounds the step once they are megabytes.
// Two barriers a step cost a few microseconds. The reduction is one fused pass after
// backward: at these latencies overlapping it with the backward pass (Note [Gradient
// buckets]) would buy nothing.
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "engine/model.h"
#include "engine/shm_segment.h"
#include "engine/strategy.h"

namespace ptw::engine {
namespace {

void addInto(float* __restrict sum, const float* __restrict part, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) sum[i] += part[i];
}

void scaleInto(float* __restrict out, const float* __restrict in, std::size_t n, float scale) {
  for (std::size_t i = 0; i < n; ++i) out[i] = in[i] * scale;
}

class DdpShm final : public Strategy {
 public:
  explicit DdpShm(const SyncContext& ctx)
      : m_rank(ctx.rank),
        m_world(ctx.world),
        m_timeout(std::chrono::milliseconds(static_cast<long>(ctx.profile.run.timeoutS * 1000))),
        m_name("/ptw-" + std::to_string(ctx.port) + "-ddp") {}

  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override {
    return shardPlan(p, samples, m_rank, m_world);
  }

  void attach(Model& model) override {
    m_params = model.parameters();
    const auto& params = m_params;
    std::int64_t total = 1;  // + the stop wish
    for (const auto& p : params) total += p.numel();
    m_slotFloats = static_cast<std::size_t>((total + 15) / 16 * 16);
    // One slot per rank, then the shared result.
    m_segment = std::make_unique<ShmSegment>(
        m_name, m_rank, m_world, sizeof(float) * m_slotFloats * static_cast<std::size_t>(m_world + 1), m_timeout);
    // Broadcast rank 0's parameters through its slot.
    torch::NoGradGuard noGrad;
    if (m_rank == 0) pack(params, /*grads=*/false, 0.f);
    m_segment->barrier();
    m_segment->unlink();
    if (m_rank != 0) unpack(params, slot(0), /*grads=*/false, 1.0f);
    m_segment->barrier();
  }

  bool reduce(Model&, StepState&) override {
    const auto& params = m_params;
    pack(params, /*grads=*/true, m_localStop ? 1.f : 0.f);
    m_segment->barrier();
    // This rank's share of the elements, summed over the slots in rank order.
    const std::size_t n = m_total;
    const std::size_t share = (n + static_cast<std::size_t>(m_world) - 1) / static_cast<std::size_t>(m_world);
    const std::size_t lo = std::min(n, share * static_cast<std::size_t>(m_rank)), hi = std::min(n, lo + share);
    float* result = slot(m_world);
    if (hi > lo) {
      std::memcpy(result + lo, slot(0) + lo, (hi - lo) * sizeof(float));
      for (int r = 1; r < m_world; ++r) addInto(result + lo, slot(r) + lo, hi - lo);
    }
    m_segment->barrier();
    const bool stop = result[n - 1] > 0.5f;
    unpack(params, result, /*grads=*/true, 1.0f / static_cast<float>(m_world));
    return stop;
  }

 private:
  float* slot(int r) const { return static_cast<float*>(m_segment->payload()) + static_cast<std::size_t>(r) * m_slotFloats; }

  void pack(const std::vector<torch::Tensor>& params, bool grads, float flag) {
    float* dst = slot(m_rank);
    std::size_t off = 0;
    for (const auto& p : params) {
      const auto n = static_cast<std::size_t>(p.numel());
      torch::Tensor src = grads ? p.grad() : p.detach();
      if (src.defined()) {
        auto c = src.contiguous();
        std::memcpy(dst + off, c.data_ptr<float>(), n * sizeof(float));
      } else {
        std::memset(dst + off, 0, n * sizeof(float));
      }
      off += n;
    }
    dst[off] = flag;
    m_total = off + 1;
  }

  void unpack(const std::vector<torch::Tensor>& params, const float* src, bool grads, float scale) {
    std::size_t off = 0;
    for (const auto& p : params) {
      const auto n = static_cast<std::size_t>(p.numel());
      torch::Tensor dst = grads ? p.mutable_grad() : p.detach();
      if (!dst.defined()) {
        p.mutable_grad() = torch::zeros_like(p);
        dst = p.mutable_grad();
      }
      scaleInto(dst.data_ptr<float>(), src + off, n, scale);
      off += n;
    }
  }

  int m_rank;
  int m_world;
  std::chrono::milliseconds m_timeout;
  std::string m_name;
  std::unique_ptr<ShmSegment> m_segment;
  std::vector<torch::Tensor> m_params;
  std::size_t m_slotFloats = 0;
  std::size_t m_total = 0;
};

}  // namespace

std::unique_ptr<Strategy> makeDdpShm(const SyncContext& ctx) { return std::make_unique<DdpShm>(ctx); }

}  // namespace ptw::engine
