// SPDX-License-Identifier: GPL-3.0-or-later
// AccuracyPanel: the live validation accuracy in percent (rank 0's, which every rank's
// parameters equal), or, for a run that has none, a note that says why: no held-out data,
// or a regression, whose validation has a loss (on the loss chart) and no accuracy.
#pragma once

#include <QStackedWidget>

#include "ui/live_panel.h"

class QLabel;

namespace ptw::ui {

class MetricChart;

class AccuracyPanel : public QStackedWidget, public LivePanel {
  Q_OBJECT
 public:
  explicit AccuracyPanel(QWidget* parent = nullptr);

  void reset(const LiveRun& run) override;
  void add(RecordSpan records) override;
  void truncateAfter(std::int64_t step) override;
  void refresh() override;
  /// A run that ended without a validation point shows the note, not an empty chart.
  void finish() override;
  void readStoreFrom(LiveStore& store) override;

  MetricChart* chart() const { return m_chart; }
  QLabel* note() const { return m_note; }

 private:
  MetricChart* m_chart;
  QLabel* m_note;
};

}  // namespace ptw::ui
