// SPDX-License-Identifier: GPL-3.0-or-later
// ShmSegment: a POSIX shared-memory segment that the processes of one run on one machine
// map together, with a barrier and a few shared control words in its header. Used by
// the shared-memory all-reduce (ddp_shm.cpp) and the process pool (process_pool.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace ptw::engine {

class ShmSegment {
 public:
  static constexpr int kMaxRanks = 256;

  /// Rank 0 creates `name` with `payloadBytes` after the header; the others wait for it
  /// (up to `timeout`) and check that they agree on its size. `lockstep` ranks wait for
  /// each other awake (Note [Lock-step waits]); all of them unless some sleep through the
  /// step (the pool's coordinator).
  ShmSegment(std::string name, int rank, int world, std::size_t payloadBytes, std::chrono::milliseconds timeout,
             int lockstep = 0);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* payload() const { return m_payload; }

  /// Which ranks a barrier waits for. The pool's workers meet without their coordinator to
  /// end a step they step themselves (Note [Workers step the pool]).
  enum class Among { All, AllButRankZero };

  /// Waits until all `world` ranks (or all but rank 0) arrive. Spins briefly, then yields,
  /// then, `awake` after it arrived, sleeps, so an oversubscribed machine still progresses
  /// (Note [Barrier waits]); throws after the timeout naming the ranks that never arrived, so
  /// a dead peer never hangs a rank.
  void barrier(std::chrono::microseconds awake = kAwake, Among among = Among::All);
  /// Arrives at the barrier among all ranks and returns at once: for a rank that waits for
  /// something later instead (the pool's coordinator, in `await`). It arrives again only
  /// once that barrier has ended.
  void arrive();
  /// Sleeps until the barrier among `among`, which this rank does not take part in, has
  /// passed `target` (its generation, modulo 2^32); throws after the timeout naming the ranks
  /// that never arrived, as barrier() does.
  void await(Among among, std::uint32_t target);
  /// How long barrier() stays awake by default.
  static constexpr std::chrono::microseconds kAwake{1000};
  /// How long ranks in lock-step stay awake: 20 ms while each has a core of its own, else
  /// kAwake (Note [Lock-step waits]).
  std::chrono::microseconds lockstepAwake() const { return m_lockstepAwake; }

  /// Removes the name once every rank has mapped it; the memory lives until the last unmap,
  /// so nothing leaks in /dev/shm even if the run is killed afterwards.
  void unlink();

  /// Advances each time every rank of `among` has arrived at its barrier.
  std::uint32_t generation(Among among = Among::All) const;

  std::atomic<std::uint32_t>& stopFlag();
  /// Per-rank counters (the pool's hogwild progress).
  std::atomic<std::int64_t>& progress(int rank);
  std::atomic<std::uint32_t>& doneFlag(int rank);

 private:
  struct Header;
  struct Barrier;
  Barrier& words(Among among) const;
  /// Arrives at `b`; true if this rank was the last, which ends it.
  bool arriveAt(Barrier& b, int count);
  /// Sleeps until `b`'s generation has passed `gen`, registered as a sleeper; throws after
  /// the timeout (from `start`) naming the ranks of [first, world) that have not arrived.
  void sleepPast(Barrier& b, std::uint32_t gen, int first, std::chrono::steady_clock::time_point start);
  std::string m_name;
  int m_rank;
  int m_world;
  std::chrono::milliseconds m_timeout;
  std::chrono::microseconds m_lockstepAwake{kAwake};
  std::chrono::nanoseconds m_spinFor{0};  ///< how long barrier() spins before it yields (Note [Barrier waits])
  std::size_t m_bytes = 0;
  void* m_base = nullptr;
  Header* m_header = nullptr;
  void* m_payload = nullptr;
  bool m_unlinked = false;
};

/// A float32 tensor of `sizes` over `at`, memory of `segment`, that keeps the segment mapped
/// while it (or any tensor sharing its storage) lives, so parameters and optimizer state made
/// of segment memory may outlive the strategy that mapped it.
torch::Tensor segmentView(const std::shared_ptr<ShmSegment>& segment, float* at, c10::IntArrayRef sizes);

/// Makes every parameter's gradient a view of `slot` (parameters back to back, in order),
/// keeping its values; a gradient that is already that view is left alone, so calling this
/// each step only rebinds one that something replaced. Backward then accumulates straight
/// into the slot (zero_grad zeroes gradients in place, it never replaces them).
void bindGradients(const std::vector<torch::Tensor>& params, const std::shared_ptr<ShmSegment>& segment, float* slot);

}  // namespace ptw::engine
