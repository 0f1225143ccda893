// SPDX-License-Identifier: GPL-3.0-or-later
// LanePool: runs one job on N lanes at once, lane 0 on the calling thread and the others on
// threads of their own started once: DataParallel's lanes. No LibTorch.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ptw::engine {

/// The least share of an elementwise pass (floats) worth handing to another lane.
constexpr std::size_t kLaneSplitFloats = 8192;

/// How many of `lanes` lanes to split a pass over `floats` elements between: one for a
/// small model, whose step is over before another lane could be woken.
inline int lanesFor(std::size_t floats, int lanes) {
  return static_cast<int>(std::clamp<std::size_t>(floats / kLaneSplitFloats, 1, static_cast<std::size_t>(lanes)));
}

class LanePool {
 public:
  /// `lanes` - 1 threads. Between jobs a lane waits for the next by spinning, then yielding,
  /// for up to kSpinFor, then sleeps (Note [Lane waits]); so does run() for the lanes.
  explicit LanePool(int lanes);
  ~LanePool();
  LanePool(const LanePool&) = delete;
  LanePool& operator=(const LanePool&) = delete;

  int lanes() const { return static_cast<int>(m_threads.size()) + 1; }

  /// Runs job(0) .. job(activeLanes - 1), each on its lane, and returns when all have; the
  /// first exception a lane threw is rethrown then.
  void run(int activeLanes, const std::function<void(int)>& job);

 private:
  void loop(int lane);
  void runLane(int lane);
  template <typename Ready>
  void await(const Ready& ready, std::condition_variable& cv);
  void wake(std::condition_variable& cv);

  static constexpr std::chrono::milliseconds kSpinFor{1};
  std::vector<std::thread> m_threads;
  std::mutex m_mutex;
  std::condition_variable m_wake, m_done;
  // Written by run() before it bumps m_generation, read by a lane after it sees the bump;
  // run() returns only when every lane has counted itself off m_remaining.
  const std::function<void(int)>* m_job = nullptr;
  int m_active = 0;
  std::exception_ptr m_error;
  std::atomic<int> m_remaining{0};
  std::atomic<std::uint64_t> m_generation{0};
  std::atomic<bool> m_quit{false};
};

}  // namespace ptw::engine
