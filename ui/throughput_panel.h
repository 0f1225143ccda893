// SPDX-License-Identifier: GPL-3.0-or-later
// ThroughputPanel: the live throughput chart, samples per second. A line per reporting
// rank and, for several ranks but the pool's, their total. Above kAggregateAbove ranks, the
// spread of the ranks' samples per second in place of their lines and the total (Note [Rank
// spread]); the rank table has each rank's.
#pragma once

#include "ui/live_panel.h"
#include "ui/metric_chart.h"
#include "ui/spread_series.h"
#include "ui/step_sums.h"

namespace ptw::ui {

class ThroughputPanel : public MetricChart, public LivePanel {
  Q_OBJECT
 public:
  explicit ThroughputPanel(QWidget* parent = nullptr);

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
  void appendTotal(const StepSums::Done& done);

  int m_ranks = 0;
  int m_total = -1;       ///< the total's series, or -1
  StepSums m_sums;        ///< the total throughput of each window of steps
  SpreadSeries m_spread;  ///< above kAggregateAbove ranks
};

}  // namespace ptw::ui
