// SPDX-License-Identifier: GPL-3.0-or-later
// StepSplitChart: where each rank's step time goes, as one stacked bar per rank (data,
// compute, communication wait, optimizer; a moving average of the recent steps), so a
// straggler or a communication-bound run is visible at a glance. Above kAggregateAbove ranks,
// whose bars would not fit, five bars stand for them all: the fastest rank, the ranks at the
// 10th, 50th and 90th percentile of the step time, and the slowest, each named.
#pragma once

#include <QWidget>

#include <array>
#include <vector>

#include "common/record.h"
#include "ui/live_panel.h"

class QCustomPlot;
class QCPBars;

namespace ptw::ui {

class StepSplitChart : public QWidget, public LivePanel {
  Q_OBJECT
 public:
  explicit StepSplitChart(QWidget* parent = nullptr);

  void reset(int ranks);
  void reset(const LiveRun& run) override { reset(run.ranks); }
  void add(const core::StepRecord& r);
  /// Adds `steps` steps of `rank` whose data, compute, communication and optimizer times
  /// (ms) have these means (a group of steps, Note [Step groups]).
  void add(int rank, const std::array<double, 4>& meanMs, std::int64_t steps);
  /// Adds the steps the records hold.
  void add(RecordSpan records) override;
  /// Keeps the averages: the replayed steps move them as the next steps would.
  void truncateAfter(std::int64_t) override {}
  void refresh() override;

  /// Moving averages (ms) of data, compute, communication and optimizer time of `rank`.
  std::array<double, 4> split(int rank) const;
  QCustomPlot* plot() const { return m_plot; }
  /// The ranks the bars stand for, left to right (every rank up to kAggregateAbove).
  const std::vector<int>& shownRanks() const { return m_shown; }

 private:
  void pickRanks();

  QCustomPlot* m_plot;
  std::array<QCPBars*, 4> m_bars{};
  std::vector<std::array<double, 4>> m_average;
  std::vector<bool> m_seen;
  bool m_dirty = false;
  std::vector<int> m_shown;
};

}  // namespace ptw::ui
