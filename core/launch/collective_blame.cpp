// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/collective_blame.h"

#include <algorithm>

namespace ptw::core {

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string CollectiveBlame::sentence() const {
  if (empty()) return "";
  const std::string one = name + " #" + std::to_string(number);
  const std::string who =
      behind.size() == 1 ? "rank " + rankList(behind) + " has" : "ranks " + rankList(behind) + " have";
  const std::string them =
      waiting.size() == 1 ? "rank " + rankList(waiting) + " is" : "ranks " + rankList(waiting) + " are";
  return who + " not entered " + one + "; " + them + " waiting inside it";
}

CollectiveBlame blameCollectives(const std::vector<CollectiveCount>& ranks) {
  CollectiveBlame blame;
  if (ranks.size() < 2) return blame;
  std::int64_t fewest = INT64_MAX;
  for (const CollectiveCount& c : ranks) {
    if (!c.counts) return blame;
    fewest = std::min(fewest, c.entered);
  }
  const std::int64_t next = fewest + 1;
  for (const CollectiveCount& c : ranks) {
    if (c.entered == fewest)
      blame.behind.push_back(c.rank);
    else if (c.completed < next)  // entered it, not through it: waiting for the ranks behind
      blame.waiting.push_back(c.rank);
    else
      return {};  // through a collective that a rank never entered: not one we can name
    if (c.entered > fewest && blame.name.empty()) blame.name = c.last.empty() ? "collective" : c.last;
  }
  if (blame.waiting.empty()) return {};
  std::sort(blame.behind.begin(), blame.behind.end());
  std::sort(blame.waiting.begin(), blame.waiting.end());
  blame.number = next;
  return blame;
}

}  // namespace ptw::core
