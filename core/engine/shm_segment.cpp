// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "common/error.h"
#include "engine/peer_wait.h"

namespace ptw::engine {
namespace {
constexpr std::uint32_t kReady = 0x70747721;  // "ptw!"

// Process-shared futex on a word of the segment (not FUTEX_PRIVATE: other processes map it).
void futexWait(std::atomic<std::uint32_t>* word, std::uint32_t expected, long timeoutNs) {
  timespec ts{0, timeoutNs};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
void futexWakeAll(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Tells the core this thread is spinning (a shorter, cheaper wait on the other hyperthread).
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

struct ShmSegment::Barrier {
  alignas(64) std::atomic<std::uint32_t> arrived;
  alignas(64) std::atomic<std::uint32_t> generation;
  std::atomic<std::uint32_t> sleepers;
  alignas(64) std::atomic<std::uint64_t> arrivedMask[kMaxRanks / 64];
};

struct ShmSegment::Header {
  std::atomic<std::uint32_t> ready;
  std::uint32_t world;
  std::uint64_t payloadBytes;
  std::int32_t creator;  ///< rank 0's pid
  Barrier all;
  Barrier allButRankZero;
  alignas(64) std::atomic<std::uint32_t> stop;
  alignas(64) std::atomic<std::int64_t> progress[kMaxRanks];
  alignas(64) std::atomic<std::uint32_t> done[kMaxRanks];
};

ShmSegment::ShmSegment(std::string name, int rank, int world, std::size_t payloadBytes,
                       std::chrono::milliseconds timeout, int lockstep)
    : m_name(std::move(name)), m_rank(rank), m_world(world), m_timeout(timeout) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  if ((lockstep > 0 ? lockstep : world) <= cores) {
    m_spinFor = std::chrono::microseconds(50);        // Note [Barrier waits]
    m_lockstepAwake = std::chrono::milliseconds(20);  // Note [Lock-step waits]
  }
  PTW_CHECK(world <= kMaxRanks, "shm: at most ", kMaxRanks, " processes share a segment, got ", world);
  const std::size_t headerBytes = (sizeof(Header) + 63) / 64 * 64;
  m_bytes = headerBytes + payloadBytes;
  auto deadline = std::chrono::steady_clock::now() + m_timeout;
  int fd = -1;
  if (m_rank == 0) {
    ::shm_unlink(m_name.c_str());  // a leftover of a killed run on the same port
    fd = ::shm_open(m_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    PTW_CHECK(fd >= 0, "shm: cannot create ", m_name, ": ", std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(m_bytes)) != 0) {
      int err = errno;
      ::close(fd);
      ::shm_unlink(m_name.c_str());
      PTW_FAIL("shm: cannot size ", m_name, " to ", m_bytes, " bytes: ", std::strerror(err), " (is /dev/shm full?)");
    }
    // Reserve the memory now: a tmpfs file is sparse, and a page that /dev/shm has no room
    // for would otherwise be a SIGBUS in the middle of training.
    int err = 0;
    do err = ::posix_fallocate(fd, 0, static_cast<off_t>(m_bytes));
    while (err == EINTR);  // a signal during a large reservation; Stop is seen later
    if (err != 0 && err != EOPNOTSUPP && err != EINVAL) {
      ::close(fd);
      ::shm_unlink(m_name.c_str());
      PTW_FAIL("shm: /dev/shm has no room for the ", (m_bytes + (1 << 20) - 1) >> 20,
               " MiB this model's shared segment needs (", std::strerror(err),
               "); enlarge /dev/shm (docker run --shm-size), or for ddp set strategy.backend to \"gloo\"");
    }
    m_base = ::mmap(nullptr, m_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    PTW_CHECK(m_base != MAP_FAILED, "shm: cannot map ", m_name, ": ", std::strerror(errno));
  } else {
    // A segment by this name whose rank 0 is gone was left by a run killed before its ranks
    // had all mapped it (a run on the same port, run.port): it is passed over until this
    // run's rank 0 replaces it, rather than met in and waited on until the timeout.
    std::string waiting = "rank 0 did not create " + m_name;
    for (;;) {
      PTW_CHECK(std::chrono::steady_clock::now() < deadline, "shm: ", waiting, " within ", m_timeout.count() / 1000.0,
                " s");
      if ((fd = ::shm_open(m_name.c_str(), O_RDWR, 0600)) >= 0) {
        struct stat st {};
        if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= m_bytes) {
          void* base = ::mmap(nullptr, m_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          if (base != MAP_FAILED) {
            const auto* h = static_cast<const Header*>(base);
            const bool ready = h->ready.load(std::memory_order_acquire) == kReady;
            const bool gone = ready && ::kill(h->creator, 0) != 0 && errno == ESRCH;
            if (ready && !gone) {
              m_base = base;
              ::close(fd);
              break;
            }
            waiting = gone ? m_name + " is left by a run that ended (its rank 0, pid " + std::to_string(h->creator) +
                                 ", is gone), and this run's rank 0 did not replace it"
                           : "rank 0 never initialised " + m_name;
            ::munmap(base, m_bytes);
          }
        } else {
          waiting = "segment " + m_name + " never reached its size";
        }
        ::close(fd);
      }
      ::usleep(1000);
    }
  }
  m_header = static_cast<Header*>(m_base);
  m_payload = static_cast<char*>(m_base) + headerBytes;
  if (m_rank == 0) {
    new (m_header) Header();
    m_header->world = static_cast<std::uint32_t>(m_world);
    m_header->payloadBytes = payloadBytes;
    m_header->creator = static_cast<std::int32_t>(::getpid());
    m_header->ready.store(kReady, std::memory_order_release);
  } else {
    PTW_CHECK(m_header->world == static_cast<std::uint32_t>(m_world) && m_header->payloadBytes == payloadBytes,
              "shm: ranks disagree on the model: rank 0 shares ", m_header->payloadBytes, " bytes, rank ", m_rank,
              " expected ", payloadBytes);
  }
}

ShmSegment::~ShmSegment() {
  if (m_base && m_base != MAP_FAILED) ::munmap(m_base, m_bytes);
  if (m_rank == 0 && !m_unlinked) ::shm_unlink(m_name.c_str());
}

void ShmSegment::unlink() {
  if (m_rank == 0 && !m_unlinked) ::shm_unlink(m_name.c_str());
  m_unlinked = true;
}

ShmSegment::Barrier& ShmSegment::words(Among among) const {
  return among == Among::All ? m_header->all : m_header->allButRankZero;
}

std::uint32_t ShmSegment::generation(Among among) const {
  return words(among).generation.load(std::memory_order_acquire);
}

std::atomic<std::uint32_t>& ShmSegment::stopFlag() { return m_header->stop; }
std::atomic<std::int64_t>& ShmSegment::progress(int rank) { return m_header->progress[rank]; }
std::atomic<std::uint32_t>& ShmSegment::doneFlag(int rank) { return m_header->done[rank]; }

// Note [Barrier waits]
// A rank first spins (the partner is microseconds away on a small model), then yields
// (when ranks outnumber cores, the rank it waits for may be queued on this core), then,
// `awake` after it arrived (1 ms unless the caller knows its wait is short: Note [Workers
// awake through the step]), sleeps on a futex until the last rank arrives, so a rank that
// waits long (the pool's coordinator while workers compute, a rank whose partner was
// preempted) costs no CPU the others need. The bound is in time, not in yields: on a
// machine with a core per rank a yield returns at once, and when something else (the
// launcher storing records, another program) takes a rank's core, the waiting partner's
// core should go idle soon so that the scheduler moves the preempted rank there, rather
// than both ranks standing still for milliseconds. The last arriver wakes sleepers only
// when some are registered; the sleeper registers before it re-checks the generation, and
// both sides use sequentially consistent operations, so either the waker sees the sleeper
// or the sleeper sees the new generation.
//
// Note [Lock-step waits]
// Ranks in lock-step (DDP over shared memory, the sync pool's workers) that each own a core
// stay awake at a barrier for 20 ms (lockstepAwake()), not 1 ms. What another program takes
// from one of them, the window's process or anything else, stops them all; and on a virtual
// machine a partner that goes to sleep on the futex after 1 ms comes back late (its virtual
// CPU halted and has to be woken), so the stall costs more than the time taken. Beside a
// program that takes a small share of one core, the longer window loses far fewer steps;
// with nothing beside them the two run alike (BENCHMARKS.md). The live window, whose work
// comes in longer pieces, still costs them more than its share of a core (bench_monitoring).
// Waiting ranks still yield, so a program queued on a rank's core runs at once; the cost is
// a core kept busy for up to 20 ms by a rank whose partner is slow, which lock-step ranks
// own anyway.
//
// While every rank has a core of its own (m_spinFor), a rank spins for 50 µs before it
// yields: on a virtual machine a sched_yield is a system call of a few microseconds, and a
// partner that arrives during one is seen only after it; the seed workload's ranks, whose
// compute times differ by a few microseconds from step to step, gain a noticeable share of
// their throughput from it (BENCHMARKS.md). When ranks outnumber cores they yield after the
// first spins, so that a partner queued on this core runs.
void ShmSegment::barrier(std::chrono::microseconds awake, Among among) {
  Barrier& b = words(among);
  const int first = among == Among::All ? 0 : 1;
  PTW_CHECK(m_rank >= first, "internal: rank ", m_rank, " at a barrier it is not part of");
  const std::uint32_t gen = b.generation.load(std::memory_order_acquire);
  if (arriveAt(b, m_world - first)) return;
  PeerWait waiting;
  std::uint64_t spins = 0;
  bool yielding = false;
  const auto start = std::chrono::steady_clock::now();
  while (b.generation.load(std::memory_order_acquire) == gen) {
    if (++spins < 2000) continue;
    if (spins % 16 == 0) {
      const auto waited = std::chrono::steady_clock::now() - start;
      yielding = waited >= m_spinFor;
      if (waited >= awake) break;
    }
    if (yielding)
      ::sched_yield();
    else
      cpuRelax();
  }
  sleepPast(b, gen, first, start);
}

void ShmSegment::arrive() { arriveAt(m_header->all, m_world); }

void ShmSegment::await(Among among, std::uint32_t target) {
  Barrier& b = words(among);
  const int first = among == Among::All ? 0 : 1;
  const auto start = std::chrono::steady_clock::now();
  PeerWait waiting;
  for (;;) {
    const std::uint32_t gen = b.generation.load(std::memory_order_acquire);
    if (static_cast<std::int32_t>(gen - target) >= 0) return;
    sleepPast(b, gen, first, start);
  }
}

bool ShmSegment::arriveAt(Barrier& b, int count) {
  b.arrivedMask[m_rank / 64].fetch_or(1ull << (m_rank % 64), std::memory_order_relaxed);
  if (b.arrived.fetch_add(1, std::memory_order_acq_rel) != static_cast<std::uint32_t>(count) - 1) return false;
  b.arrived.store(0, std::memory_order_relaxed);
  for (auto& m : b.arrivedMask) m.store(0, std::memory_order_relaxed);
  b.generation.fetch_add(1, std::memory_order_seq_cst);
  if (b.sleepers.load(std::memory_order_seq_cst) > 0) futexWakeAll(&b.generation);
  return true;
}

void ShmSegment::sleepPast(Barrier& b, std::uint32_t gen, int first, std::chrono::steady_clock::time_point start) {
  while (b.generation.load(std::memory_order_acquire) == gen) {
    b.sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (b.generation.load(std::memory_order_seq_cst) == gen) futexWait(&b.generation, gen, 10'000'000);
    b.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (std::chrono::steady_clock::now() - start > m_timeout && b.generation.load() == gen) {
      std::string missing;
      for (int r = first; r < m_world; ++r)
        if (!(b.arrivedMask[r / 64].load() & (1ull << (r % 64))))
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      PTW_FAIL("shared-memory barrier timed out after ", m_timeout.count() / 1000.0, " s waiting for rank(s) ", missing,
               " (run.timeout_s and 5 s)");
    }
  }
}

torch::Tensor segmentView(const std::shared_ptr<ShmSegment>& segment, float* at, c10::IntArrayRef sizes) {
  return torch::from_blob(
      at, sizes, [keep = segment](void*) { (void)keep; }, torch::TensorOptions().dtype(torch::kFloat));
}

void bindGradients(const std::vector<torch::Tensor>& params, const std::shared_ptr<ShmSegment>& segment, float* slot) {
  std::size_t off = 0;
  for (const auto& p : params) {
    const auto& g = p.grad();
    if (!g.defined() || g.data_ptr() != static_cast<void*>(slot + off)) {
      auto view = segmentView(segment, slot + off, p.sizes());
      if (g.defined())
        view.copy_(g);
      else
        view.zero_();
      p.mutable_grad() = view;
    }
    off += static_cast<std::size_t>(p.numel());
  }
}

}  // namespace ptw::engine
