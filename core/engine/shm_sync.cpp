// DDP for ranks on one machine over POSIX shared memory (strategy.backend "shm").
//
// Note [Shared-memory all-reduce]
// On loopback a Gloo all-reduce costs ~200 µs even for one float, which is ten times the
// whole step of a small model. Ranks on the same machine instead each write their
// gradients into their own slot of one shared segment, meet at a barrier, and every rank
// sums all slots in rank order (so every rank computes bit-identical results), then meet
// again before a slot may be overwritten. Two barriers a step cost a few microseconds.
// The barrier spins briefly, then yields, then sleeps, so oversubscribed machines (more
// ranks than cores) still progress; it gives up after run.timeout_s and throws, naming
// the ranks that never arrived, so a dead peer never hangs a rank.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "engine/gradient_sync.h"

namespace ptw::engine {
namespace {

constexpr std::uint32_t kReady = 0x70747721;  // "ptw!"

struct alignas(64) Header {
  std::atomic<std::uint32_t> ready;
  std::atomic<std::uint32_t> attached;
  alignas(64) std::atomic<std::uint32_t> arrived;
  alignas(64) std::atomic<std::uint32_t> generation;
  alignas(64) std::atomic<std::uint64_t> arrivedMask;
  std::uint32_t world;
  std::uint64_t slotFloats;
};

class ShmSync final : public GradientSync {
 public:
  explicit ShmSync(const SyncContext& ctx)
      : m_rank(ctx.rank),
        m_world(ctx.world),
        m_timeout(std::chrono::milliseconds(static_cast<long>(ctx.profile.run.timeoutS * 1000))),
        m_name("/ptw-" + std::to_string(ctx.port) + "-" + std::to_string(ctx.world)) {}

  ~ShmSync() override {
    if (m_base) ::munmap(m_base, m_bytes);
    if (m_rank == 0 && !m_unlinked) ::shm_unlink(m_name.c_str());
  }

  void attach(const std::vector<torch::Tensor>& params) override {
    std::int64_t total = 1;  // + the stop wish
    for (const auto& p : params) total += p.numel();
    m_slotFloats = static_cast<std::uint64_t>((total + 15) / 16 * 16);
    m_bytes = sizeof(Header) + sizeof(float) * m_slotFloats * static_cast<std::uint64_t>(m_world);
    map();
    m_header->attached.fetch_add(1);
    // Broadcast rank 0's parameters through its slot.
    torch::NoGradGuard noGrad;
    if (m_rank == 0) pack(params, /*grads=*/false, 0.f);
    barrier();
    if (m_rank == 0) {
      ::shm_unlink(m_name.c_str());  // every rank has it mapped: nothing can leak from here on
      m_unlinked = true;
    } else {
      unpack(params, slot(0), /*grads=*/false, 1.0f);
    }
    barrier();
  }

  bool reduce(const std::vector<torch::Tensor>& params, bool localStop) override {
    pack(params, /*grads=*/true, localStop ? 1.f : 0.f);
    barrier();
    // Sum in rank order into a private buffer: identical on every rank.
    if (m_sum.size() != m_slotFloats) m_sum.assign(m_slotFloats, 0.f);
    const std::size_t n = static_cast<std::size_t>(m_total);
    std::memcpy(m_sum.data(), slot(0), n * sizeof(float));
    for (int r = 1; r < m_world; ++r) {
      const float* s = slot(r);
      for (std::size_t i = 0; i < n; ++i) m_sum[i] += s[i];
    }
    barrier();
    const bool stop = m_sum[n - 1] > 0.5f;
    unpack(params, m_sum.data(), /*grads=*/true, 1.0f / static_cast<float>(m_world));
    return stop;
  }

 private:
  float* slot(int r) const {
    return reinterpret_cast<float*>(reinterpret_cast<char*>(m_base) + sizeof(Header)) +
           static_cast<std::size_t>(r) * m_slotFloats;
  }

  void map() {
    auto deadline = std::chrono::steady_clock::now() + m_timeout;
    int fd = -1;
    if (m_rank == 0) {
      ::shm_unlink(m_name.c_str());  // a leftover of a killed run on the same port
      fd = ::shm_open(m_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      PTW_CHECK(fd >= 0, "shm: cannot create ", m_name, ": ", std::strerror(errno));
      PTW_CHECK(::ftruncate(fd, static_cast<off_t>(m_bytes)) == 0, "shm: cannot size ", m_name, " to ", m_bytes,
                " bytes: ", std::strerror(errno), " (is /dev/shm full?)");
    } else {
      while ((fd = ::shm_open(m_name.c_str(), O_RDWR, 0600)) < 0) {
        PTW_CHECK(std::chrono::steady_clock::now() < deadline, "shm: rank 0 did not create ", m_name, " within ",
                  m_timeout.count() / 1000.0, " s");
        ::usleep(1000);
      }
      struct stat st {};
      while (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < m_bytes) {
        PTW_CHECK(std::chrono::steady_clock::now() < deadline, "shm: segment ", m_name, " never reached its size");
        ::usleep(1000);
      }
    }
    m_base = ::mmap(nullptr, m_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    PTW_CHECK(m_base != MAP_FAILED, "shm: cannot map ", m_name, ": ", std::strerror(errno));
    m_header = static_cast<Header*>(m_base);
    if (m_rank == 0) {
      new (m_header) Header();
      m_header->world = static_cast<std::uint32_t>(m_world);
      m_header->slotFloats = m_slotFloats;
      m_header->ready.store(kReady, std::memory_order_release);
    } else {
      while (m_header->ready.load(std::memory_order_acquire) != kReady) {
        PTW_CHECK(std::chrono::steady_clock::now() < deadline, "shm: rank 0 never initialised ", m_name);
        ::usleep(100);
      }
      PTW_CHECK(m_header->world == static_cast<std::uint32_t>(m_world) && m_header->slotFloats == m_slotFloats,
                "shm: ranks disagree on the model: rank 0 has ", m_header->slotFloats, " floats per slot, rank ",
                m_rank, " expected ", m_slotFloats);
    }
  }

  void barrier() {
    Header& h = *m_header;
    const std::uint32_t gen = h.generation.load(std::memory_order_acquire);
    h.arrivedMask.fetch_or(1ull << (m_rank % 64), std::memory_order_relaxed);
    if (h.arrived.fetch_add(1, std::memory_order_acq_rel) == static_cast<std::uint32_t>(m_world) - 1) {
      h.arrived.store(0, std::memory_order_relaxed);
      h.arrivedMask.store(0, std::memory_order_relaxed);
      h.generation.fetch_add(1, std::memory_order_release);
      return;
    }
    std::uint64_t spins = 0;
    auto start = std::chrono::steady_clock::now();
    while (h.generation.load(std::memory_order_acquire) == gen) {
      ++spins;
      if (spins < 2000) continue;
      if (spins < 20000) {
        ::sched_yield();
        continue;
      }
      timespec ts{0, 50'000};
      ::nanosleep(&ts, nullptr);
      if ((spins & 255) == 0 && std::chrono::steady_clock::now() - start > m_timeout) {
        std::uint64_t mask = h.arrivedMask.load();
        std::string missing;
        for (int r = 0; r < m_world && r < 64; ++r)
          if (!(mask & (1ull << r))) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        PTW_FAIL("shm all-reduce timed out after ", m_timeout.count() / 1000.0, " s waiting for rank(s) ", missing);
      }
    }
  }

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
    m_total = static_cast<std::int64_t>(off + 1);
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
      float* d = dst.data_ptr<float>();
      for (std::size_t i = 0; i < n; ++i) d[i] = src[off + i] * scale;
      off += n;
    }
  }

  int m_rank;
  int m_world;
  std::chrono::milliseconds m_timeout;
  std::string m_name;
  void* m_base = nullptr;
  Header* m_header = nullptr;
  std::size_t m_bytes = 0;
  std::uint64_t m_slotFloats = 0;
  std::int64_t m_total = 0;
  std::vector<float> m_sum;
  bool m_unlinked = false;
};

}  // namespace

std::unique_ptr<GradientSync> makeShmSync(const SyncContext& ctx) { return std::make_unique<ShmSync>(ctx); }

}  // namespace ptw::engine
