// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/step_heatmap.h"

#include <qcustomplot.h>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QTimer>
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

  // The image drawn whole over the rows of pixels the ranks take (Note [Heatmap rows]): with a
  // row a pixel row it is copied, not scaled, down the axis; QCustomPlot's own drawing places
  // it half a pixel lower, its last row under the x axis's line. The layer restores the painter.
  void draw(QCPPainter* painter) override {
    QCPColorMapData* d = data();
    if (d->isEmpty() || !keyAxis() || !valueAxis()) return;
    if (mMapImageInvalidated || changedFrom < d->keySize() || mMapImage.isNull()) updateMapImage();
    const QRect area = keyAxis()->axisRect()->rect();
    const double halfCell = d->keySize() > 1 ? 0.5 * d->keyRange().size() / (d->keySize() - 1) : 0.5;
    const int left = static_cast<int>(std::lround(keyAxis()->coordToPixel(d->keyRange().lower - halfCell)));
    const int right = static_cast<int>(std::lround(keyAxis()->coordToPixel(d->keyRange().upper + halfCell)));
    // The image's first line is the highest value; rank 0 is on top when the axis is reversed.
    const QImage image = valueAxis()->rangeReversed() ? mMapImage.mirrored(false, true) : mMapImage;
    // Antialiased, QCPPainter shifts by half a pixel, which moves every row one down.
    painter->setAntialiasing(false);
    painter->setRenderHint(QPainter::SmoothPixmapTransform, false);
    painter->drawImage(QRect(left, area.top(), right - left, area.height() - 1), image);
  }

 private:
  std::pair<QCPRange, QCPColorGradient> m_coloured;
  std::vector<double> m_line;
};

// Note [Heatmap rows]
// A run of thousands of ranks has more ranks than the map has pixel rows. Drawn a row a rank,
// the image would be scaled down at every redraw, nearest-neighbour, which shows one rank of
// every few, so that a single slow rank could vanish, and costs the scaling each time. So the
// grid has a row a pixel (at most), and each row holds the hottest of the ranks it covers, the
// maximum over them, so that a straggler is never lost; hovering names that rank. Rank r is in
// row floor((r + ½) × rows ÷ ranks): rows cover equal spans of the rank axis, as drawn.
int rowOf(int rank, int ranks, int rows) {
  return static_cast<int>((2 * static_cast<std::int64_t>(rank) + 1) * rows / (2 * static_cast<std::int64_t>(ranks)));
}

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
  if (c.steps == 0) return std::numeric_limits<double>::quiet_NaN();
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
// x axis's range. Each column keeps its least and most value over every rank, so the colour
// range is found from the columns, not from every cell. Rows: Note [Heatmap rows].
void StepHeatmap::refresh() {
  if (!m_dirty || m_cells.empty() || !isVisible()) return;
  m_dirty = false;
  const int columns = std::max(1, m_used);
  auto* data = m_map->data();
  const int rows = pixelRows();
  if (data->keySize() != kColumns || data->valueSize() != rows) {
    data->setSize(kColumns, rows);
    m_dirtyFrom = 0;
  }
  // Cell centres: a column's middle step, the middle of each row's span of ranks.
  const double w = static_cast<double>(m_width), perRow = static_cast<double>(m_ranks) / rows;
  data->setRange(QCPRange(0.5 + 0.5 * w, 0.5 + (kColumns - 0.5) * w),
                 QCPRange(0.5 * perRow - 0.5, std::max(1.0, (rows - 0.5) * perRow - 0.5)));
  const int from = std::max(0, m_dirtyFrom);
  writeRows(from, columns, rows);
  auto* map = static_cast<ColumnMap*>(m_map);
  map->changedFrom = std::min(map->changedFrom, from);
  m_dirtyFrom = kColumns;
  constexpr double inf = std::numeric_limits<double>::infinity();
  double low = inf, high = -inf;
  for (int c = 0; c < columns; ++c)
    low = std::min(low, m_columnRange[std::size_t(c)].first),
    high = std::max(high, m_columnRange[std::size_t(c)].second);
  if (low <= high) m_map->setDataRange(QCPRange(low, high));
  m_plot->xAxis->setRange(0.5, 0.5 + columns * w);
  // The ranks take the axis rect's pixel rows but the last, which the x axis's line covers
  // (ColumnMap::draw); the axis's range spans one row more, above them.
  const double rowsDrawn = std::max(1, m_plot->axisRect()->height() - 1);
  m_plot->yAxis->setRange(-0.5 - m_ranks / rowsDrawn, m_ranks - 0.5);
  m_scale->axis()->setLabel(m_measure == Measure::StepTime ? tr("ms a step") : tr("% in communication"));
  m_plot->replot();  // drawn now, so the redraw budget counts the drawing
}

int StepHeatmap::pixelRows() const {
  // The axis rect's last pixel row lies under the x axis's line (refresh).
  const int pixels = static_cast<int>(std::ceil((m_plot->axisRect()->height() - 1) * m_plot->devicePixelRatioF()));
  // Not laid out yet: a row a rank until it is.
  return pixels <= 0 ? m_ranks : std::clamp(pixels, std::min(m_ranks, 2), m_ranks);
}

// Writes columns [from, columns) of the grid's `rows` rows, each the hottest of its ranks
// (Note [Heatmap rows]), and those columns' least and most value over every rank.
void StepHeatmap::writeRows(int from, int columns, int rows) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::fill(m_columnRange.begin() + from, m_columnRange.end(), std::pair{inf, -inf});
  if (columns <= from) return;
  auto* data = m_map->data();
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  m_hottest.assign(static_cast<std::size_t>(columns - from), nan);
  auto flush = [&](int row) {
    for (int c = from; c < columns; ++c) data->setCell(c, row, m_hottest[static_cast<std::size_t>(c - from)]);
    std::fill(m_hottest.begin(), m_hottest.end(), nan);
  };
  int row = 0;
  for (int r = 0; r < m_ranks; ++r) {
    if (const int at = rowOf(r, m_ranks, rows); at != row) flush(row), row = at;
    const Cell* cells = &m_cells[static_cast<std::size_t>(r) * kColumns];
    for (int c = from; c < columns; ++c) {
      const double v = value(cells[c]);
      if (!std::isfinite(v)) continue;
      auto& [low, high] = m_columnRange[static_cast<std::size_t>(c)];
      low = std::min(low, v), high = std::max(high, v);
      double& hottest = m_hottest[static_cast<std::size_t>(c - from)];
      if (!(hottest >= v)) hottest = v;  // NaN until the row's first value
    }
  }
  flush(row);
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
  const double y = m_plot->yAxis->pixelToCoord(std::floor(pos.y()) + 0.5);  // the pixel row's middle
  const auto column = static_cast<std::int64_t>(std::floor((step - 0.5) / static_cast<double>(m_width)));
  if (y < -0.5 || y >= m_ranks - 0.5 || column < 0 || column >= m_used) return QString();
  const int rank = hottestAt(y, static_cast<int>(column));
  if (rank < 0) return QString();
  const Cell& c = m_cells[static_cast<std::size_t>(rank) * kColumns + static_cast<std::size_t>(column)];
  const std::int64_t from = column * m_width + 1, to = from + m_width - 1;
  const QString steps = m_width == 1 ? tr("step %1").arg(from) : tr("steps %1–%2").arg(from).arg(to);
  const QString what = m_measure == Measure::StepTime ? tr("%1 ms a step").arg(readableNumber(value(c), 3))
                                                      : tr("%1% in communication").arg(readableNumber(value(c), 3));
  return tr("%1, %2: %3").arg(m_labels.value(rank), steps, what);
}

int StepHeatmap::hottestAt(double y, int column) const {
  const int rows = std::max(1, m_map->data()->valueSize());
  const int row = std::clamp(static_cast<int>(std::floor((y + 0.5) * rows / m_ranks)), 0, rows - 1);
  int best = -1;
  double hottest = -std::numeric_limits<double>::infinity();
  // The row's ranks: from just before its span's start while rowOf says they are its.
  for (int r = std::max(0, static_cast<int>(static_cast<double>(row) * m_ranks / rows) - 1);
       r < m_ranks && rowOf(r, m_ranks, rows) <= row; ++r) {
    if (rowOf(r, m_ranks, rows) < row) continue;
    const double v = value(m_cells[static_cast<std::size_t>(r) * kColumns + static_cast<std::size_t>(column)]);
    if (std::isfinite(v) && v > hottest) hottest = v, best = r;
  }
  return best;
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
  // A new height is a new number of pixel rows (Note [Heatmap rows]): the grid is written
  // again once the plot has laid itself out at it, or an image scaled down could lose a rank.
  if (watched == m_plot && event->type() == QEvent::Resize && !m_cells.empty()) {
    m_dirty = true;
    QTimer::singleShot(0, this, [this] { refresh(); });
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace ptw::ui
