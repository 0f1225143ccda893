// SPDX-License-Identifier: GPL-3.0-or-later
// LrPanel: the live learning rate of each step, rank 0's (the schedule is the same on
// every rank), at the last step of each of its records.
#pragma once

#include "ui/live_panel.h"
#include "ui/metric_chart.h"

namespace ptw::ui {

class LrPanel : public MetricChart, public LivePanel {
  Q_OBJECT
 public:
  explicit LrPanel(QWidget* parent = nullptr);

  void reset(const LiveRun& run) override;
  void add(RecordSpan records) override;
  void truncateAfter(std::int64_t step) override { MetricChart::truncateAfter(static_cast<double>(step)); }
  void refresh() override { MetricChart::refresh(); }
  void readStoreFrom(LiveStore& store) override;

 private:
  int m_ranks = 0;
};

}  // namespace ptw::ui
