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
  /// (up to `timeout`) and check that they agree on its size.
  ShmSegment(std::string name, int rank, int world, std::size_t payloadBytes, std::chrono::milliseconds timeout);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* payload() const { return m_payload; }

  /// Waits until all `world` ranks arrive. Spins briefly, then yields, then, `awake` after it
  /// arrived, sleeps, so an oversubscribed machine still progresses (Note [Barrier waits]);
  /// throws after the timeout naming the ranks that never arrived, so a dead peer never hangs
  /// a rank.
  void barrier(std::chrono::microseconds awake = kAwake);
  /// How long barrier() stays awake by default.
  static constexpr std::chrono::microseconds kAwake{1000};
  /// How long ranks in lock-step stay awake: 20 ms while each has a core of its own, else
  /// kAwake (Note [Lock-step waits]).
  std::chrono::microseconds lockstepAwake() const { return m_lockstepAwake; }

  /// Removes the name once every rank has mapped it; the memory lives until the last unmap,
  /// so nothing leaks in /dev/shm even if the run is killed afterwards.
  void unlink();

  /// Advances each time every rank has arrived at the barrier.
  std::uint32_t generation() const;
  /// For a thread of this process that is not the rank (the pool coordinator's helpers):
  /// sleeps until the generation has reached `target` (modulo 2^32), woken with the ranks by
  /// the last one to arrive. False if `quit` became true first (looked at every 10 ms).
  bool awaitGeneration(std::uint32_t target, const std::atomic<bool>& quit);

  std::atomic<std::uint32_t>& stopFlag();
  /// Per-rank counters (the pool's hogwild progress).
  std::atomic<std::int64_t>& progress(int rank);
  std::atomic<std::uint32_t>& doneFlag(int rank);

 private:
  struct Header;
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
void bindGradients(const std::vector<torch::Tensor>& params, const std::shared_ptr<ShmSegment>& segment,
                   float* slot);

}  // namespace ptw::engine
