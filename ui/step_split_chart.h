// StepSplitChart: where each rank's step time goes, as one stacked bar per rank (data,
// compute, communication wait, optimizer; a moving average of the recent steps), so a
// straggler or a communication-bound run is visible at a glance.
#pragma once

#include <QWidget>

#include <array>
#include <vector>

#include "common/record.h"

class QCustomPlot;
class QCPBars;

namespace ptw::ui {

class StepSplitChart : public QWidget {
  Q_OBJECT
 public:
  explicit StepSplitChart(QWidget* parent = nullptr);

  void reset(int ranks);
  void add(const core::StepRecord& r);
  /// Adds `steps` steps of `rank` whose data, compute, communication and optimizer times
  /// (ms) have these means (a group of steps, Note [Step groups]).
  void add(int rank, const std::array<double, 4>& meanMs, std::int64_t steps);
  void refresh();

  /// Moving averages (ms) of data, compute, communication and optimizer time of `rank`.
  std::array<double, 4> split(int rank) const;
  QCustomPlot* plot() const { return m_plot; }

 private:
  QCustomPlot* m_plot;
  std::array<QCPBars*, 4> m_bars{};
  std::vector<std::array<double, 4>> m_average;
  std::vector<bool> m_seen;
  bool m_dirty = false;
};

}  // namespace ptw::ui
