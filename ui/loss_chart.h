// LossChart: one live loss series per rank on a QCustomPlot. Records are appended in
// batches and the plot is redrawn by the caller at a bounded rate (see MainWindow).
#pragma once

#include <QWidget>

#include <vector>

#include "common/record.h"

class QCustomPlot;

namespace ptw::ui {

class LossChart : public QWidget {
  Q_OBJECT
 public:
  explicit LossChart(QWidget* parent = nullptr);

  void reset(int ranks);
  void addRecords(const std::vector<core::Record>& batch);
  /// Redraws if data arrived since the last redraw; rescales to fit.
  void refresh();

  int rankCount() const;
  int pointCount(int rank) const;
  QCustomPlot* plot() const { return m_plot; }

 private:
  QCustomPlot* m_plot;
  bool m_dirty = false;
};

}  // namespace ptw::ui
