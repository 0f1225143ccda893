// SPDX-License-Identifier: GPL-3.0-or-later
// LastSteps: each reporting rank's last step record, from the records a run sends (a
// group's last step, Note [Step groups]): what the final metrics and the headless progress
// lines read.
#pragma once

#include <cstddef>
#include <vector>

#include "common/record.h"

namespace ptw::core {

/// A reporting rank's last step record (a group's last step).
struct RankFinal {
  StepRecord last;
  bool seen = false;
};

/// Example: LastSteps last(reportingRanks(profile)); for each record last.add(r); last[0].last.loss
class LastSteps {
 public:
  explicit LastSteps(int ranks) : m_ranks(static_cast<std::size_t>(ranks > 0 ? ranks : 0)) {}

  /// Takes `r` when it holds steps (holdsSteps) of one of the ranks; returns whether it did.
  bool add(const Record& r);

  std::size_t size() const { return m_ranks.size(); }
  const RankFinal& operator[](std::size_t rank) const { return m_ranks[rank]; }
  const std::vector<RankFinal>& ranks() const { return m_ranks; }

 private:
  std::vector<RankFinal> m_ranks;
};

}  // namespace ptw::core
