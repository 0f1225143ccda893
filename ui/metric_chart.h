// SPDX-License-Identifier: GPL-3.0-or-later
// MetricChart: one metric against the step, one series per rank (plus aggregates), on a
// QCustomPlot. Data goes into per-series SeriesSummary objects as it arrives; refresh()
// draws what is visible at the plot's width, at a rate the caller bounds. Follows the
// newest data until the user zooms or pans; a double-click fits the data and follows
// again. Optional EMA smoothing (the raw series faint behind it, the y axis fitted to the
// smoothed curves), log axes, and a y axis fitted to all the data or to all but its outliers.
// The legend sits above the axis rect, shown once there is a series.
#pragma once

#include <QColor>
#include <QPointF>
#include <QSharedPointer>
#include <QString>
#include <QWidget>

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "ui/series_summary.h"

class QCustomPlot;
class QCPGraph;
class QCPAxisTicker;

namespace ptw::ui {

class MetricChart : public QWidget {
  Q_OBJECT
 public:
  explicit MetricChart(const QString& yLabel, QWidget* parent = nullptr);

  /// Adds a series; returns its id (0, 1, ... in order of addition).
  int addSeries(const QString& name, const QColor& color, bool dashed = false);
  void append(int series, double x, double y);
  /// Appends a group of `count` points over steps [x0, x] (Note [Step groups]).
  void appendGroup(int series, double x0, double x, double mean, double yMin, double yMax, std::size_t count);
  /// Drops every point past step `x` in every series (a restart replays from there).
  void truncateAfter(double x);
  /// Removes every series.
  void clear();

  void setSmoothing(double weight);  ///< 0 = raw only; TensorBoard-style weight in [0, 1)
  double smoothing() const { return m_smoothing; }
  void setLogX(bool on);
  /// The x axis's ticker while it is linear (readableTicker(true) until set).
  void setLinearXTicker(QSharedPointer<QCPAxisTicker> ticker);
  void setLogY(bool on);
  /// Fits the y axis to the 5th-95th percentile of what is shown (TensorBoard's "ignore
  /// outliers in chart scaling"): a loss that starts at 30 and trains to 0.01 is not drawn
  /// as a flat line. Points beyond run off the chart. Off by default (a fit shows every
  /// point); the window's live charts turn it on. A smoothed chart fits its smoothed curves
  /// whole instead.
  void setIgnoreOutliers(bool on);
  bool ignoresOutliers() const { return m_ignoreOutliers; }
  /// While the chart follows the data, its y axis spans at least [lo, hi] (0-100 for a
  /// percentage), so that a metric's scale reads the same from its first point.
  void setYSpan(double lo, double hi) { m_spanLo = lo, m_spanHi = hi; }
  /// How a series counts when the y axis is fitted: every point (Whole); only near the others
  /// (Near: at most half their span beyond them, so that a validation loss of 40 beside a
  /// training loss near 1, or the faint extremes of many ranks, do not flatten what is read);
  /// or not at all.
  enum class Fit { Whole, Near, None };
  void setFit(int series, Fit fit);
  /// Whether `series` has a legend entry (every series has until told).
  void setInLegend(int series, bool on);
  /// Fills between the lines of `low` and `high` with `brush`, a band; neither is smoothed.
  void setBand(int low, int high, const QColor& brush);
  /// Replaces `series`'s points and name (a rank named for standing out; Note [Rank spread]).
  void setPoints(int series, const QString& name, const std::vector<std::pair<double, double>>& points);
  /// What the pointer at `pos` (the plot's pixels) is over: the name of the nearest line
  /// within a few pixels, the step and its value there; empty over none. Shown as a tooltip.
  QString hoverText(const QPointF& pos) const;
  void setHighlighted(int series);  ///< -1: none
  /// The series that stands out among overlapping ones (the mean over ranks): drawn on top,
  /// thicker, and the others lighter behind it. -1: none.
  void setEmphasized(int series);
  /// Real points of `series` in [x0, x1], for zooming into the part no longer held raw.
  using DetailProvider = std::function<std::vector<std::pair<double, double>>(int series, double x0, double x1)>;
  void setDetailProvider(DetailProvider provider) { m_detail = std::move(provider); }

  /// Redraws when data arrived or the view changed since the last call.
  void refresh();
  /// Fits the view to the data and follows new data again.
  void fit();

  int seriesCount() const { return static_cast<int>(m_series.size()); }
  std::size_t pointCount(int series) const;
  /// What the chart keeps of `series`; null for no such series.
  const SeriesSummary* summary(int series) const;
  /// Points drawn for `series` at the last refresh (at most ~2 per pixel column).
  int drawnPoints(int series) const;
  /// The step of the last point drawn for `series` at the last refresh; NaN when none.
  double drawnLast(int series) const;
  std::size_t memoryBytes() const;
  QCustomPlot* plot() const { return m_plot; }
  bool following() const { return m_follow; }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;
  void showEvent(QShowEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  struct Series {
    QString name;
    QColor color;
    bool dashed = false;
    SeriesSummary data;
    QCPGraph* raw = nullptr;
    QCPGraph* smooth = nullptr;
    Fit fit = Fit::Whole;
    bool legend = true;
    bool band = false;  ///< a band's edge: never smoothed
  };
  void applyPens();
  /// Draws series `i` over steps [x0, x1] at `columns` pixel columns, telling `addBounds` the
  /// extremes of what it draws.
  void drawSeries(int i, double x0, double x1, int columns, const std::function<void(double, double)>& addBounds);

  QCustomPlot* m_plot;
  std::vector<std::unique_ptr<Series>> m_series;
  double m_smoothing = 0;
  int m_highlighted = -1;
  int m_emphasized = -1;
  bool m_dirty = false;
  int m_columns = 0;  ///< the pixel columns the last redraw drew the series at
  bool m_follow = true;
  bool m_ignoreOutliers = false;
  double m_spanLo = 0, m_spanHi = 0;  ///< setYSpan; lo == hi: none
  std::vector<double> m_ys;           ///< scratch for the y percentiles, kept between redraws
  DetailProvider m_detail;
  QSharedPointer<QCPAxisTicker> m_xTicker;  ///< the linear x axis's
};

}  // namespace ptw::ui
