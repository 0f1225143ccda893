// SPDX-License-Identifier: GPL-3.0-or-later
// Whether this rank is waiting for other ranks (a barrier, a collective) or working on its
// own, as its heartbeats tell the launcher (Note [Who stalled] in launch/launcher.cpp).
#pragma once

#include <atomic>
#include <chrono>

#include "common/profile.h"

namespace ptw::engine {

/// True while a thread of this rank's training waits for the other ranks.
inline std::atomic<bool>& waitingForPeers() {
  static std::atomic<bool> waiting{false};
  return waiting;
}

/// Marks a wait for the other ranks for its lifetime. Example: { PeerWait w; work->wait(); }
class PeerWait {
 public:
  PeerWait() { waitingForPeers().store(true, std::memory_order_relaxed); }
  ~PeerWait() { waitingForPeers().store(false, std::memory_order_relaxed); }
  PeerWait(const PeerWait&) = delete;
  PeerWait& operator=(const PeerWait&) = delete;
};

/// How long a rank waits for the others before it gives up: run.timeout_s and 5 s more,
/// so that the launcher, which hears every rank, finds a stall first and names the rank
/// that caused it (Note [Who stalled]); the ranks' own limit is the backstop.
inline std::chrono::milliseconds peerTimeout(const core::Profile& p) {
  return std::chrono::milliseconds(static_cast<long long>(p.run.timeoutS * 1000) + 5000);
}

}  // namespace ptw::engine
