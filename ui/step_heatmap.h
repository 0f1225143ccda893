// SPDX-License-Identifier: GPL-3.0-or-later
// StepHeatmap: step time as a rank × step heatmap (a QCPColorMap), for runs of more ranks
// than lines can show: a rank that is slow from some step on is a hot horizontal line from
// there, a slow step of every rank a vertical one. Shows each rank's step time, or the share
// of it spent waiting in communication. A fixed number of columns covers the whole run:
// when the steps outgrow them, neighbouring columns merge and each covers twice the steps,
// so memory is ranks × columns whatever the run's length. Hovering names the rank. Above one
// rank a pixel row, a row shows the hottest of its ranks (Note [Heatmap rows]).
#pragma once

#include <QWidget>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ui/live_panel.h"

class QComboBox;
class QCustomPlot;
class QCPColorMap;
class QCPColorScale;

namespace ptw::ui {

class StepHeatmap : public QWidget, public LivePanel {
  Q_OBJECT
 public:
  static constexpr int kColumns = 120;
  enum class Measure { StepTime, CommShare };

  explicit StepHeatmap(QWidget* parent = nullptr);

  void reset(const LiveRun& run) override;
  void add(RecordSpan records) override;
  void truncateAfter(std::int64_t) override {}
  void refresh() override;

  void setMeasure(Measure measure);
  /// What the cell under `pos` (the plot's pixels) holds: its rank, host, steps and value.
  QString hoverText(const QPointF& pos) const;
  /// The mean over the run so far of `rank`'s step time (ms), or of its communication share.
  double rowMean(int rank) const;
  QCustomPlot* plot() const { return m_plot; }
  QCPColorMap* map() const { return m_map; }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  struct Cell {
    float stepMs = 0, commMs = 0;
    std::uint32_t steps = 0;
  };
  /// The column of `step`, merging columns until it fits.
  int columnOf(std::int64_t step);
  double value(const Cell& c) const;
  /// The grid's rows: one a rank, or one a pixel row when the ranks are more (Note [Heatmap rows]).
  int pixelRows() const;
  void writeRows(int from, int columns, int rows);
  /// The hottest rank in `column` of the grid's row at rank coordinate `y`; -1 for none.
  int hottestAt(double y, int column) const;

  QCustomPlot* m_plot;
  QCPColorMap* m_map;
  QCPColorScale* m_scale;
  QComboBox* m_measureBox;
  Measure m_measure = Measure::StepTime;
  int m_ranks = 0;
  std::int64_t m_width = 1;   ///< steps per column
  int m_used = 0;             ///< columns holding steps
  std::vector<Cell> m_cells;  ///< rank-major: m_cells[rank * kColumns + column]
  QStringList m_labels;       ///< each rank's name and host
  bool m_dirty = false;
  int m_dirtyFrom = 0;  ///< the first column that changed since the last redraw
  std::array<std::pair<double, double>, kColumns> m_columnRange{};  ///< each column's least and most value
  std::vector<double> m_hottest;  ///< scratch: a row's hottest value in each column written
};

}  // namespace ptw::ui
