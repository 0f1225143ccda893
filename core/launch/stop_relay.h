// SPDX-License-Identifier: GPL-3.0-or-later
// StopRelay: passes a stop request (or one for the ranks' stacks) on to whatever is running
// now (the current attempt's Launcher, the sweep's current Supervisor), from any thread or a
// signal handler, while the owner may be ending that object at the same moment.
//
// A stop counts itself in m_busy before it reads the pointer; clear() removes the pointer
// and then waits for m_busy to drop to zero, so a stop that read the pointer is done with
// it before its object goes. Every operation is a sequentially consistent lock-free atomic:
// a signal handler may stop, and never waits. A stop that finds no object is the owner's to
// remember (its own flag, looked at before the next object starts).
#pragma once

#include <atomic>
#include <thread>

namespace ptw::core {

template <class T>
class StopRelay {
 public:
  /// `target` receives stops until clear(); it must outlive that call.
  void set(T* target) { m_target.store(target); }
  /// No stop reaches the target after this returns.
  void clear() {
    m_target.store(nullptr);
    while (m_busy.load() != 0) std::this_thread::yield();
  }
  /// Calls requestStop() on the target, if there is one. Async-signal-safe when that is.
  void stop() {
    m_busy.fetch_add(1);
    if (T* t = m_target.load()) t->requestStop();
    m_busy.fetch_sub(1);
  }
  /// Calls requestStacks() on the target, if there is one; false when there is none.
  bool stacks() {
    m_busy.fetch_add(1);
    T* t = m_target.load();
    if (t) t->requestStacks();
    m_busy.fetch_sub(1);
    return t != nullptr;
  }

 private:
  std::atomic<T*> m_target{nullptr};
  std::atomic<int> m_busy{0};
};

}  // namespace ptw::core
