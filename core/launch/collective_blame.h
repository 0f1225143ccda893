// SPDX-License-Identifier: GPL-3.0-or-later
// Which rank a stalled DDP run waits for, from the collective counts its ranks' heartbeats
// carry (Note [Collective positions] in engine/collective_position.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptw::core {

/// One live rank's position in its collectives, as its last heartbeat told it.
struct CollectiveCount {
  int rank = 0;
  bool counts = false;  ///< false: the rank does not count (not DDP, an older worker)
  std::int64_t entered = 0;
  std::int64_t completed = 0;
  std::string last = "";  ///< the name of the last collective it entered
};

/// The ranks that are behind and the collective the others wait in for them.
struct CollectiveBlame {
  std::vector<int> behind;   ///< the ranks that have not entered it, lowest first
  std::vector<int> waiting;  ///< the ranks inside it
  std::int64_t number = 0;   ///< its number: the n-th collective of every rank
  std::string name = "";     ///< "all-reduce", "broadcast", "barrier"

  bool empty() const { return behind.empty(); }
  /// "rank 3 has not entered all-reduce #1043; ranks 0-2 are waiting inside it".
  std::string sentence() const;
};

/// The blame when every rank counts, some entered fewer collectives than the others, and
/// every other rank is inside the first collective those have not entered; empty otherwise
/// (a rank that does not count, or no rank waiting inside a collective for another).
/// Example: blameCollectives({{0, true, 5, 4, "all-reduce"}, {1, true, 4, 4, "all-reduce"}})
CollectiveBlame blameCollectives(const std::vector<CollectiveCount>& ranks);

/// "0-2, 5": ranks in ascending order, runs of consecutive ones as ranges.
std::string rankList(const std::vector<int>& ranks);

}  // namespace ptw::core
