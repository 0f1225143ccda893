// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/step_heatmap.h"

#include <qcustomplot.h>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "ui/chart_format.h"
#include "ui/spread_series.h"

namespace ptw::ui {
namespace {

// QCustomPlot colours a map's whole image whenever its data changed; the heatmap's columns
// fill one after another, so this map colours only the columns from `changedFrom` on while
// the image, the colour range and the gradient stay as they were, and leaves anything else
// (a new range, a grid too small to be drawn one pixel a cell) to QCustomPlot.
class ColumnMap : public QCPColorMap {
 public:
  using QCPColorMap::QCPColorMap;
  int changedFrom = 0;

 protected:
  void updateMapImage() override {
    QCPColorMapData* d = data();
    const int keys = d->keySize(), values = d->valueSize();
    // QCustomPlot draws grids under 100 cells a side oversampled, on an image of its own.
    const bool same = keys >= 100 && values >= 100 && mMapImage.width() == keys && mMapImage.height() == values &&
                      mDataRange == m_coloured.first && mGradient == m_coloured.second &&
                      dataScaleType() == QCPAxis::stLinear && keyAxis() && keyAxis()->orientation() == Qt::Horizontal;
    if (!same) {
      QCPColorMap::updateMapImage();
      m_coloured = {mDataRange, mGradient};
      changedFrom = keys;
      return;
    }
    const int n = keys - changedFrom;
    if (n <= 0) return;
    m_line.resize(static_cast<std::size_t>(n));
    for (int v = 0; v < values; ++v) {
      for (int k = 0; k < n; ++k) m_line[static_cast<std::size_t>(k)] = d->cell(changedFrom + k, v);
      // The image's first line is the top one, the data's first value the bottom one.
      auto* pixels = reinterpret_cast<QRgb*>(mMapImage.scanLine(values - 1 - v)) + changedFrom;
      mGradient.colorize(m_line.data(), mDataRange, pixels, n);
    }
    changedFrom = keys;
    mMapImageInvalidated = false;
  }

 private:
  std::pair<QCPRange, QCPColorGradient> m_coloured;
  std::vector<double> m_line;
};

}  // namespace

StepHeatmap::StepHeatmap(QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("Each rank's"), this));
  m_measureBox = new QComboBox(this);
  m_measureBox->setObjectName("heatmapMeasure");
  m_measureBox->addItem(tr("step time (ms)"));
  m_measureBox->addItem(tr("communication share (%)"));
  top->addWidget(m_measureBox);
  top->addStretch(1);
  layout->addLayout(top);
  layout->addWidget(m_plot, 1);
  connect(m_measureBox, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this](int i) { setMeasure(i == 0 ? Measure::StepTime : Measure::CommShare); });
  m_map = new ColumnMap(m_plot->xAxis, m_plot->yAxis);
  m_map->setGradient(QCPColorGradient::gpThermal);
  m_map->setInterpolate(false);
  m_scale = new QCPColorScale(m_plot);
  m_plot->plotLayout()->addElement(0, 1, m_scale);
  m_map->setColorScale(m_scale);
  auto* margins = new QCPMarginGroup(m_plot);
  m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->yAxis->setLabel(tr("rank"));
  m_plot->xAxis->setTicker(readableTicker(true));
  m_plot->yAxis->setTicker(readableTicker(true));
  m_plot->yAxis->setRangeReversed(true);  // rank 0 on top, as in the table
  m_plot->installEventFilter(this);
  m_plot->setMouseTracking(true);
}

void StepHeatmap::reset(const LiveRun& run) {
  m_ranks = run.ranks;
  m_labels = rankLabels(run);
  m_width = 1;
  m_used = 0;
  m_dirtyFrom = 0;
  // Only a run that shows it holds its cells (Note [Rank spread]).
  m_cells.assign(run.ranks > kAggregateAbove ? static_cast<std::size_t>(m_ranks) * kColumns : 0, Cell{});
  m_map->data()->clear();
  m_dirty = true;
}

int StepHeatmap::columnOf(std::int64_t step) {
  std::int64_t column = std::max<std::int64_t>(0, step - 1) / m_width;
  while (column >= kColumns) {  // merge neighbours: each column covers twice the steps
    for (int r = 0; r < m_ranks; ++r) {
      Cell* row = &m_cells[static_cast<std::size_t>(r) * kColumns];
      for (int c = 0; c < kColumns / 2; ++c) {
        const Cell a = row[2 * c], b = row[2 * c + 1];
        row[c] = {a.stepMs + b.stepMs, a.commMs + b.commMs, a.steps + b.steps};
      }
      std::fill(row + kColumns / 2, row + kColumns, Cell{});
    }
    m_width *= 2;
    m_used = (m_used + 1) / 2;
    m_dirtyFrom = 0;
    column = std::max<std::int64_t>(0, step - 1) / m_width;
  }
  m_used = std::max(m_used, static_cast<int>(column) + 1);
  m_dirtyFrom = std::min(m_dirtyFrom, static_cast<int>(column));
  return static_cast<int>(column);
}

void StepHeatmap::add(RecordSpan records) {
  if (m_cells.empty()) return;
  for (const core::Record& rec : records) {
    if (!core::holdsSteps(rec) || rec.step.rank < 0 || rec.step.rank >= m_ranks) continue;
    const core::StepGroup g = core::asGroup(rec);
    if (!std::isfinite(g.stepMs) || g.count <= 0) continue;
    const int column = columnOf(g.first);
    Cell& c = m_cells[static_cast<std::size_t>(rec.step.rank) * kColumns + static_cast<std::size_t>(column)];
    c.stepMs += static_cast<float>(g.stepMs);
    c.commMs += std::isfinite(g.commMs) ? static_cast<float>(g.commMs) : 0.f;
    c.steps += static_cast<std::uint32_t>(g.count);
    m_dirty = true;
  }
}

double StepHeatmap::value(const Cell& c) const {
  if (c.steps == 0) return std::nan("");
  return m_measure == Measure::StepTime ? c.stepMs / static_cast<double>(c.steps)
                                        : (c.stepMs > 0 ? 100.0 * c.commMs / c.stepMs : 0.0);
}

void StepHeatmap::setMeasure(Measure measure) {
  m_measure = measure;
  m_dirtyFrom = 0;
  m_dirty = true;
  refresh();
}

// The map's grid is sized once for every column a run can have, and a redraw writes only the
// columns that took steps since the last one: the columns that hold nothing lie past the
// x axis's range. Each column keeps its least and most value, so the colour range is found
// from the columns, not from every cell.
void StepHeatmap::refresh() {
  if (!m_dirty || m_cells.empty() || !isVisible()) return;
  m_dirty = false;
  const int columns = std::max(1, m_used);
  auto* data = m_map->data();
  if (data->keySize() != kColumns || data->valueSize() != m_ranks) {
    data->setSize(kColumns, m_ranks);
    m_dirtyFrom = 0;
  }
  // Cell centres: a column's middle step, each rank's row.
  const double w = static_cast<double>(m_width);
  data->setRange(QCPRange(0.5 + 0.5 * w, 0.5 + (kColumns - 0.5) * w), QCPRange(0, std::max(1, m_ranks - 1)));
  const int from = std::max(0, m_dirtyFrom);
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::fill(m_columnRange.begin() + from, m_columnRange.end(), std::pair{inf, -inf});
  for (int r = 0; r < m_ranks; ++r) {
    const Cell* row = &m_cells[static_cast<std::size_t>(r) * kColumns];
    for (int c = from; c < columns; ++c) {
      const double v = value(row[c]);
      data->setCell(c, r, v);
      auto& [low, high] = m_columnRange[static_cast<std::size_t>(c)];
      if (std::isfinite(v)) low = std::min(low, v), high = std::max(high, v);
    }
  }
  auto* map = static_cast<ColumnMap*>(m_map);
  map->changedFrom = std::min(map->changedFrom, from);
  m_dirtyFrom = kColumns;
  double low = inf, high = -inf;
  for (int c = 0; c < columns; ++c)
    low = std::min(low, m_columnRange[std::size_t(c)].first),
    high = std::max(high, m_columnRange[std::size_t(c)].second);
  if (low <= high) m_map->setDataRange(QCPRange(low, high));
  m_plot->xAxis->setRange(0.5, 0.5 + columns * w);
  m_plot->yAxis->setRange(-0.5, m_ranks - 0.5);
  m_scale->axis()->setLabel(m_measure == Measure::StepTime ? tr("ms a step") : tr("% in communication"));
  m_plot->replot();  // drawn now, so the redraw budget counts the drawing
}

double StepHeatmap::rowMean(int rank) const {
  if (rank < 0 || rank >= m_ranks || m_cells.empty()) return std::nan("");
  Cell sum;
  for (int c = 0; c < kColumns; ++c) {
    const Cell& x = m_cells[static_cast<std::size_t>(rank) * kColumns + static_cast<std::size_t>(c)];
    sum = {sum.stepMs + x.stepMs, sum.commMs + x.commMs, sum.steps + x.steps};
  }
  return value(sum);
}

QString StepHeatmap::hoverText(const QPointF& pos) const {
  if (m_cells.empty() || !m_plot->axisRect()->rect().contains(pos.toPoint())) return QString();
  const double step = m_plot->xAxis->pixelToCoord(pos.x());
  const int rank = static_cast<int>(std::lround(m_plot->yAxis->pixelToCoord(pos.y())));
  const auto column = static_cast<std::int64_t>(std::floor((step - 0.5) / static_cast<double>(m_width)));
  if (rank < 0 || rank >= m_ranks || column < 0 || column >= m_used) return QString();
  const Cell& c = m_cells[static_cast<std::size_t>(rank) * kColumns + static_cast<std::size_t>(column)];
  if (c.steps == 0) return QString();
  const std::int64_t from = column * m_width + 1, to = from + m_width - 1;
  const QString steps = m_width == 1 ? tr("step %1").arg(from) : tr("steps %1–%2").arg(from).arg(to);
  const QString what = m_measure == Measure::StepTime ? tr("%1 ms a step").arg(readableNumber(value(c), 3))
                                                      : tr("%1% in communication").arg(readableNumber(value(c), 3));
  return tr("%1, %2: %3").arg(m_labels.value(rank), steps, what);
}

bool StepHeatmap::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_plot && event->type() == QEvent::MouseMove) {
    const auto* move = static_cast<QMouseEvent*>(event);
    const QString text = hoverText(move->position());
    if (text.isEmpty())
      QToolTip::hideText();
    else
      QToolTip::showText(move->globalPosition().toPoint(), text, m_plot);
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace ptw::ui
