// SPDX-License-Identifier: GPL-3.0-or-later
// StepFolder: an attached run's step records folded into the groups its ranks would have sent
// its own window (Note [Step groups] in common/record.h), so that the live panels take a
// run's stored history as they take a run's own records: a record per window of steps, not
// per step, every step counted in its group.
//
// Note [Attached history in groups]
// A follower hands over every stored step record (a million of them for a long run), where
// a run of the window's own sends one Group per window of steps. Fed one by one, each of the
// live panels would take each record; folded here, on the follower's thread, they take
// about a thousandth of them at step 10^6, and draw the same columns as for a run of their
// own. A rank's group ends where a rank's would: at its window's end, at a step that is not
// past the group's (a restart's replay), at its first loss that is not finite (Note
// [Diverged runs]), and where a batch of the follower's ends, so that what came is shown at
// once. Other records (validation, scalars) end every group first: the order of what is
// taken is the order it came in.
#pragma once

#include <vector>

#include "common/record.h"

namespace ptw::ui {

class StepFolder {
 public:
  /// Replaces the step records of `batch` by their groups, in place; the other records keep
  /// their order among them.
  void fold(std::vector<core::Record>& batch);
  /// A new run: nothing is open.
  void reset() { m_open.clear(); }

 private:
  struct Open {
    core::Record record;         ///< kind Group: the group so far, and its last step record
    std::int64_t windowEnd = 0;  ///< the first step past the group's window
    bool diverged = false;       ///< a loss that is not finite came
  };
  Open& openOf(int rank);
  void closeAll(std::vector<core::Record>& out);

  std::vector<Open> m_open;  ///< by rank
  std::vector<core::Record> m_out;
};

}  // namespace ptw::ui
