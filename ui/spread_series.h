// SPDX-License-Identifier: GPL-3.0-or-later
// SpreadSeries: a MetricChart's lines for one metric over many ranks (Note [Rank spread]):
// the mean, the p10-p90 band, the min-max range faintly, and the few ranks that stand out,
// named, in place of a line per rank.
#pragma once

#include <QColor>
#include <QStringList>

#include <array>
#include <cstdint>
#include <vector>

#include "ui/live_panel.h"
#include "ui/rank_spread.h"

namespace ptw::ui {

class MetricChart;

/// Each reporting rank's name, with its host for a run across hosts: "rank 37 (node5)".
QStringList rankLabels(const LiveRun& run);

class SpreadSeries {
 public:
  static constexpr int kNamed = 3;  ///< ranks named on the chart at most

  /// Adds the spread's series to `chart`, for ranks named `names` (the table's words).
  void attach(MetricChart& chart, const QStringList& names, const QString& meanName);
  /// Adds `count` steps of `rank` (steps `first` to `step`) of mean value `value`.
  void add(int rank, std::int64_t first, std::int64_t step, double value, std::int64_t count);
  /// The run has ended: the windows still open are drawn with the ranks they have.
  void finish();
  /// A restart: the spread starts over (the chart's own truncateAfter drops its points).
  void restart();
  /// Names on the chart the ranks that stand out now, with their recent values.
  void refresh();

  bool attached() const { return m_chart != nullptr; }
  void detach() { m_chart = nullptr; }
  int meanSeries() const { return m_mean; }
  /// The ranks named on the chart at the last refresh.
  const std::vector<int>& named() const { return m_shown; }
  const RankSpread& spread() const { return m_spread; }

 private:
  void draw(const RankSpread::Done& d);

  MetricChart* m_chart = nullptr;
  RankSpread m_spread;
  QStringList m_names;
  int m_min = -1, m_max = -1, m_p10 = -1, m_p90 = -1, m_mean = -1;
  std::array<int, kNamed> m_namedSeries{};
  std::vector<int> m_shown;
  std::vector<RankSpread::Done> m_done;  ///< scratch, kept for its capacity
};

}  // namespace ptw::ui
