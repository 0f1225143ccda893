// SPDX-License-Identifier: GPL-3.0-or-later
// StepSums: the charts' mean loss over ranks and total throughput, window by window of steps
// (Note [Step groups] in common/record.h; a window is one step below step 2048). A rank's
// records come in step order, but the ranks' batches arrive in any order (each rank sends
// its own every 250 ms), so a window's sums are complete only when every rank has reported
// every step of it, in one group or in several. Windows wait until then; when one completes,
// older incomplete ones (of a rank that skipped steps) are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <vector>

#include "common/record.h"

namespace ptw::ui {

class StepSums {
 public:
  struct Done {
    std::int64_t first = 0;  ///< the window's first step
    std::int64_t step = 0;   ///< the window's last step, where its point is drawn
    double loss = 0;         ///< mean over the ranks and steps of the window
    double throughput = 0;   ///< sum over the ranks of each one's mean over the window
  };

  void reset(int ranks) {
    m_ranks = ranks;
    m_open.clear();
    m_doneFrom = -1;
  }

  /// Adds `count` records of one rank from the window of `step`, with their summed loss and
  /// summed samples per second; when that completes the window, returns true and sets `done`.
  bool add(std::int64_t step, double lossSum, double throughputSum, std::int64_t count, Done& done) {
    const std::int64_t span = core::stepGroupSpan(step), from = step - step % span;
    if (from <= m_doneFrom || count <= 0) return false;  // drawn already, or passed over
    Sums& s = m_open[from];
    s.loss += lossSum;
    s.throughput += throughputSum;
    s.count += count;
    if (s.count < m_ranks * span) {
      // A rank far ahead of another (many batches of records): the oldest windows go rather
      // than hold that many.
      if (m_open.size() > kMaxOpen) m_open.erase(m_open.begin());
      return false;
    }
    done = {from, from + span - 1, s.loss / static_cast<double>(s.count), s.throughput / static_cast<double>(span)};
    m_doneFrom = from;
    m_open.erase(m_open.begin(), std::next(m_open.find(from)));
    return true;
  }

  /// The run has ended: a window every rank reported the same number of steps of (the last,
  /// cut short by the end) completes with those steps; the others are dropped.
  std::vector<Done> finish() {
    std::vector<Done> out;
    for (const auto& [from, s] : m_open) {
      if (s.count % m_ranks != 0) continue;
      const std::int64_t steps = s.count / m_ranks;
      out.push_back(
          {from, from + steps - 1, s.loss / static_cast<double>(s.count), s.throughput / static_cast<double>(steps)});
    }
    m_open.clear();
    return out;
  }

  static constexpr std::size_t kMaxOpen = std::size_t(1) << 16;

 private:
  struct Sums {
    double loss = 0, throughput = 0;
    std::int64_t count = 0;
  };
  std::int64_t m_ranks = 1;
  std::map<std::int64_t, Sums> m_open;  ///< by the window's first step
  std::int64_t m_doneFrom = -1;         ///< the first step of the latest window completed
};

}  // namespace ptw::ui
