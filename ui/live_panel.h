// SPDX-License-Identifier: GPL-3.0-or-later
// LivePanel: one part of the window's live view (a chart, the rank table) as the window
// feeds it: a new run, the run's records as they come, a restart, and a redraw at the
// window's bounded rate (Note [Redraw budget] in main_window.cpp). The window holds a list
// of them and loops over it, so a new chart is a class of its own and a line where the
// window lays it out.
#pragma once

#include <QStringList>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/profile.h"
#include "common/record.h"
#include "launch/metric_rows.h"

namespace ptw::ui {

/// What a panel is told of a new run.
struct LiveRun {
  core::Profile profile;  ///< as the window's editor holds it
  int ranks = 0;          ///< reporting ranks (core::reportingRanks)
  QStringList names;      ///< each reporting rank's series name: "rank 0", or the pool's "coordinator", "worker 1"
};

/// Consecutive records of a run in arrival order, borrowed for one call (C++17 has no std::span).
class RecordSpan {
 public:
  RecordSpan(const core::Record* first, const core::Record* last) : m_first(first), m_last(last) {}
  const core::Record* begin() const { return m_first; }
  const core::Record* end() const { return m_last; }
  bool empty() const { return m_first == m_last; }

 private:
  const core::Record* m_first;
  const core::Record* m_last;
};

/// The current run's records as the store holds them, every one, for a panel to draw a
/// zoomed-in range in full (charts show a bounded summary live). Nothing when there is no run.
class LiveStore {
 public:
  virtual ~LiveStore() = default;
  /// (step, value) of `column` (core::RunStore::series) of reporting rank `series`, steps x0 to x1.
  virtual std::vector<std::pair<double, double>> series(int series, const std::string& column, double x0,
                                                        double x1) = 0;
  /// The run's validation rows.
  virtual std::vector<core::ValidationRow> validation() = 0;
};

class LivePanel {
 public:
  virtual ~LivePanel() = default;
  /// A new run starts: what the last one showed goes.
  virtual void reset(const LiveRun& run) = 0;
  /// Records of the run, of every kind: each panel takes those it shows, and draws them at
  /// the next refresh().
  virtual void add(RecordSpan records) = 0;
  /// The run restarts from a checkpoint at `step`: what was shown past it is replayed, so it
  /// goes (Note [Restarts] in core/launch/supervisor.h).
  virtual void truncateAfter(std::int64_t step) = 0;
  /// Draws what came since the last call.
  virtual void refresh() = 0;
  /// The run has ended and every record has been added: what waited for more (a window of
  /// steps cut short by the end, Note [Step groups]) is shown with what it has.
  virtual void finish() {}
  /// View > Fit Charts: the axes show all that was drawn. Panels without axes ignore it.
  virtual void fit() {}
  /// Reads zoomed-in ranges from `store`, which outlives the panel. Panels that draw
  /// everything they are given ignore it.
  virtual void readStoreFrom(LiveStore& store) { (void)store; }
};

}  // namespace ptw::ui
