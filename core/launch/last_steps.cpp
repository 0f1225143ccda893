// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/last_steps.h"

namespace ptw::core {

bool LastSteps::add(const Record& r) {
  if (!holdsSteps(r) || r.step.rank < 0 || r.step.rank >= static_cast<int>(m_ranks.size())) return false;
  RankFinal& slot = m_ranks[static_cast<std::size_t>(r.step.rank)];
  slot.last = r.step;
  slot.seen = true;
  return true;
}

}  // namespace ptw::core
