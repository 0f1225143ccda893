// SPDX-License-Identifier: GPL-3.0-or-later
// How far this rank has gone through its collectives, as its heartbeats tell the launcher
// (Note [Collective positions]).
//
// Note [Collective positions]
// Each rank counts the collectives it has entered (launched: an all-reduce Gloo or NCCL runs
// on while the backward pass goes on counts from its launch) and those it has completed (its
// wait returned), every collective of its DDP in the one order all ranks issue them: the
// broadcasts at the start, each bucket's all-reduce, the barriers of shared memory. Collective
// #n is the n-th a rank entered. The heartbeat carries both counts and the name of the last
// one entered; the collectives a rank has entered and not completed are always of that one
// kind (a broadcast is waited for before the all-reduces of the step are launched). So when
// a run stalls, the rank that entered fewest is behind: "rank 3 has not entered all-reduce
// #1043; ranks 0-2 are waiting inside it" (launch/launcher.cpp, Note [Who stalled]). The
// counters are process-wide relaxed atomics, one writer at a time for each: no lock, no
// allocation, a few nanoseconds a collective.
#pragma once

#include <atomic>
#include <cstdint>

namespace ptw::engine {

/// This process's position in its collectives (Note [Collective positions]).
struct CollectivePosition {
  std::atomic<std::int64_t> entered{0};
  std::atomic<std::int64_t> completed{0};
  std::atomic<const char*> last{nullptr};  ///< the name of the last one entered: a string literal
  std::atomic<bool> counting{false};       ///< set by a strategy that counts: its heartbeats carry them
};

inline CollectivePosition& collectivePosition() {
  static CollectivePosition position;
  return position;
}

/// Notes that this rank entered a collective named `name` (a string literal: "all-reduce").
inline void enterCollective(const char* name) {
  auto& p = collectivePosition();
  p.last.store(name, std::memory_order_relaxed);
  p.entered.fetch_add(1, std::memory_order_relaxed);
}
/// Notes that the oldest collective this rank entered has completed.
inline void completeCollective() { collectivePosition().completed.fetch_add(1, std::memory_order_relaxed); }

}  // namespace ptw::engine
