// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/lane_pool.h"

namespace ptw::engine {

LanePool::LanePool(int lanes) {
  for (int i = 1; i < lanes; ++i) m_threads.emplace_back([this, i] { loop(i); });
}

LanePool::~LanePool() {
  m_quit.store(true);
  wake(m_wake);
  for (auto& t : m_threads) t.join();
}

void LanePool::run(int activeLanes, const std::function<void(int)>& job) {
  m_job = &job;
  m_active = activeLanes;
  m_error = nullptr;
  // Every lane, active or not, counts itself off, so none can still be reading m_job or
  // m_active when the next run() writes them.
  m_remaining.store(lanes() - 1);
  m_generation.fetch_add(1);  // publishes the job to the lanes
  wake(m_wake);
  runLane(0);
  await([&] { return m_remaining.load() == 0; }, m_done);
  m_job = nullptr;
  if (m_error) std::rethrow_exception(m_error);
}

void LanePool::loop(int lane) {
  std::uint64_t seen = 0;
  for (;;) {
    await([&] { return m_quit.load() || m_generation.load() != seen; }, m_wake);
    if (m_quit.load()) return;
    seen = m_generation.load();  // run() publishes no other until every lane has counted itself off
    if (lane < m_active) runLane(lane);
    if (m_remaining.fetch_sub(1) == 1) wake(m_done);
  }
}

void LanePool::runLane(int lane) {
  try {
    (*m_job)(lane);
  } catch (...) {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_error) m_error = std::current_exception();
  }
}

// Note [Lane waits]
// A lane waits for `ready()` as the shared-memory barrier does (Note [Barrier waits]): it
// spins, then yields, then sleeps on a condition variable once it has waited kSpinFor. A
// lane that slept through the microseconds between two of DataParallel's jobs would start
// each a wake-up late, and on a virtual machine waking an idle core can take longer than
// the job. Whoever makes `ready()` true then calls wake(), which takes the mutex, so that a
// waiter between its last check and its sleep cannot miss the notification.
template <typename Ready>
void LanePool::await(const Ready& ready, std::condition_variable& cv) {
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t spins = 0; !ready(); ++spins) {
    if (spins < 2000) continue;
    if (spins % 16 != 0 || std::chrono::steady_clock::now() - start < kSpinFor) {
      std::this_thread::yield();
      continue;
    }
    std::unique_lock<std::mutex> lock(m_mutex);
    cv.wait(lock, ready);
    return;
  }
}

void LanePool::wake(std::condition_variable& cv) {
  { std::lock_guard<std::mutex> lock(m_mutex); }
  cv.notify_all();
}

}  // namespace ptw::engine
