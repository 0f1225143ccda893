// SPDX-License-Identifier: GPL-3.0-or-later
// StragglerDetector: names the ranks whose steps take longer than the others', while the
// run goes on, and says where their time goes.
//
// Note [Stragglers]
// A rank is a straggler when its own time a step stays above the median over the ranks by
// a factor (1.3) for a window (the last 50 steps, or 30 s for a rank slower than that): its
// median over the window, above the factor times the median of the ranks' medians. A median,
// not a mean: a rank descheduled for one step (ranks sharing cores) is not slow. Its own
// time is data + compute + opt, never comm: ranks in lock-step (DDP) wait for the slowest
// in the all-reduce, so every rank's step time grows alike, and the waiting ones' comm time
// with it; what grew in the slow one is its own time. A rank that reported no split is
// judged on its step time; fields not reported (NaN, Note [Not reported]) are passed over.
// A step group (Note [Step groups]) counts as its steps, each at the group's mean. A rank
// is named once as it becomes a straggler, and again only after it has caught up.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "common/record.h"

namespace ptw::core {

/// Example: StragglerOptions().setFactor(1.5).setWindowSteps(20)
struct StragglerOptions {
  double factor = 1.3;            ///< a straggler's own step over the ranks' median, at least
  std::int64_t windowSteps = 50;  ///< the steps judged, at most
  double windowS = 30;            ///< the seconds judged, at most
  int firstRank = 0;              ///< ranks below it are not judged (a pool's coordinator)
  StragglerOptions& setFactor(double v) {
    factor = v;
    return *this;
  }
  StragglerOptions& setWindowSteps(std::int64_t v) {
    windowSteps = v;
    return *this;
  }
  StragglerOptions& setWindowS(double v) {
    windowS = v;
    return *this;
  }
  StragglerOptions& setFirstRank(int v) {
    firstRank = v;
    return *this;
  }
};

/// A rank named a straggler.
struct Straggler {
  int rank = -1;
  std::string host = "";   ///< "" where not known (this machine)
  double factor = 0;       ///< its own step time over the ranks' median (the most it reached)
  double forS = 0;         ///< the time its slow steps in the window took when it was named
  std::string phase = "";  ///< data | compute | opt: where most of its own time goes
  double phaseShare = 0;   ///< that phase's share of its own time, 0..1
  std::int64_t step = 0;   ///< its step when named
};

/// "rank 37 on node5: 1.8× the median step for 40 s, data 70%" (no host part without a host).
std::string stragglerMessage(const Straggler& s);

class StragglerDetector {
 public:
  /// `ranks` reporting ranks; `hosts`, where known, the host of each (may be shorter).
  explicit StragglerDetector(int ranks, StragglerOptions options = {}, std::vector<std::string> hosts = {});

  /// Takes the steps `r` holds (a Step or Group record; others are passed over), arrived at
  /// `atS` seconds (any clock, the same for every call).
  void add(const Record& r, double atS);
  /// Judges every rank as of `nowS`; returns those that became stragglers since the last call.
  std::vector<Straggler> check(double nowS);
  /// Records between two checks that keep checking's cost to a few comparisons a record:
  /// a quarter of the ranks' windows of steps.
  std::size_t checkEvery() const {
    return m_ranks.size() * static_cast<std::size_t>(m_options.windowSteps > 0 ? m_options.windowSteps : 1) / 4;
  }
  /// Every rank named so far, in the order named, each once.
  const std::vector<Straggler>& named() const { return m_named; }
  /// Forgets every window (a restart: the ranks start again).
  void restart();

 private:
  struct Entry {
    double steps, ownMs, dataMs, computeMs, optMs, stepMs, at;  ///< the times: a step's, the entry's mean
  };
  struct RankWindow {
    std::deque<Entry> entries;
    double steps = 0;     ///< in entries
    double firstAt = -1;  ///< its first entry since the start or restart
    std::int64_t step = 0;
    bool straggling = false;
    int named = -1;  ///< its index in m_named
  };
  bool judged(const RankWindow& w, double nowS) const;
  static double medianOwnMs(const RankWindow& w);
  Straggler describe(int rank, const RankWindow& w, double median) const;

  StragglerOptions m_options;
  std::vector<std::string> m_hosts;
  std::vector<RankWindow> m_ranks;
  std::vector<Straggler> m_named;
};

}  // namespace ptw::core
