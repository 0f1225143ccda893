// SPDX-License-Identifier: GPL-3.0-or-later
// LossPanel: the live loss chart. A line per reporting rank, their mean over ranks
// (emphasized, for several ranks but the pool's, whose coordinator speaks for the run) and
// the validation loss, dashed. Above kAggregateAbove ranks, the spread over the ranks in
// place of their lines (Note [Rank spread]).
#pragma once

#include <memory>

#include "ui/chart_format.h"
#include "ui/live_panel.h"
#include "ui/metric_chart.h"
#include "ui/spread_series.h"
#include "ui/step_sums.h"

namespace ptw::ui {

class LossPanel : public MetricChart, public LivePanel {
  Q_OBJECT
 public:
  explicit LossPanel(QWidget* parent = nullptr);

  void reset(const LiveRun& run) override;
  void add(RecordSpan records) override;
  void truncateAfter(std::int64_t step) override;
  void refresh() override {
    m_spread.refresh();
    MetricChart::refresh();
  }
  void finish() override;
  void fit() override { MetricChart::fit(); }
  void readStoreFrom(LiveStore& store) override;
  /// The ranks named for standing out (Note [Rank spread]); none up to kAggregateAbove ranks.
  const std::vector<int>& standouts() const { return m_spread.named(); }

 private:
  void appendMean(const StepSums::Done& done);

  int m_ranks = 0;
  int m_mean = -1;        ///< the mean's series, or -1
  int m_validation = -1;  ///< the validation loss's series
  StepSums m_sums;        ///< the mean loss of each window of steps
  SpreadSeries m_spread;  ///< above kAggregateAbove ranks
  /// A script's own step counter where it is not ptw's step (Note [Stretches of steps]),
  /// as rank 0 reported it: the x axis names both.
  std::shared_ptr<StepStretches> m_stretches = std::make_shared<StepStretches>();
  std::int64_t m_offset = 0;  ///< rank 0's latest
};

}  // namespace ptw::ui
