// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/metric_chart.h"

#include <qcustomplot.h>
#include <QEvent>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>

#include "ui/chart_format.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ptw::ui {

MetricChart::MetricChart(const QString& yLabel, QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_plot);
  m_plot->setPlottingHint(QCP::phFastPolylines, true);
  m_plot->setNotAntialiasedElements(QCP::aeAll);  // what keeps 32 series fast
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->yAxis->setLabel(yLabel);
  m_plot->legend->setVisible(false);  // until there is a series to name
  m_plot->legend->setFont(QFont(font().family(), 8));
  placeLegendAbove(m_plot);
  m_xTicker = readableTicker(true);
  m_plot->xAxis->setTicker(m_xTicker);
  m_plot->yAxis->setTicker(readableTicker());
  m_plot->addLayer("emphasis", m_plot->layer("main"), QCustomPlot::limAbove);
  m_plot->installEventFilter(this);
  m_plot->setMouseTracking(true);  // hovering names the line (hoverText)
  connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] { m_dirty = true; });
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] { fit(); });
  // A new layout is drawn again only when it changed the columns the series were drawn at:
  // a redraw's own layout would otherwise mark the chart changed, and every redraw would be
  // followed by another of the same data (Note [Redraw budget]).
  connect(m_plot, &QCustomPlot::afterLayout, this, [this] {
    if (std::max(16, m_plot->axisRect()->width()) != m_columns) m_dirty = true;
  });
}

bool MetricChart::eventFilter(QObject* watched, QEvent* event) {
  // The user takes the view: stop following the newest data until a double-click.
  if (watched != m_plot || (event->type() != QEvent::Wheel && event->type() != QEvent::MouseMove))
    return QWidget::eventFilter(watched, event);
  if (event->type() == QEvent::Wheel || static_cast<QMouseEvent*>(event)->buttons() != Qt::NoButton) {
    m_follow = false;
  } else {  // hovering names the line under the pointer
    const auto* move = static_cast<QMouseEvent*>(event);
    const QString text = hoverText(move->position());
    if (text.isEmpty())
      QToolTip::hideText();
    else
      QToolTip::showText(move->globalPosition().toPoint(), text, m_plot);
  }
  return QWidget::eventFilter(watched, event);
}

void MetricChart::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  m_dirty = true;
  QTimer::singleShot(0, this, &MetricChart::refresh);
}

void MetricChart::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  m_dirty = true;
  QTimer::singleShot(0, this, &MetricChart::refresh);
}

int MetricChart::addSeries(const QString& name, const QColor& color, bool dashed) {
  auto s = std::make_unique<Series>();
  s->name = name;
  s->color = color;
  s->dashed = dashed;
  s->raw = m_plot->addGraph();
  s->raw->setName(name);
  s->smooth = m_plot->addGraph();
  s->smooth->setName(name);
  m_series.push_back(std::move(s));
  m_plot->legend->setVisible(true);
  applyPens();
  m_dirty = true;
  return static_cast<int>(m_series.size()) - 1;
}

void MetricChart::append(int series, double x, double y) {
  if (series < 0 || series >= seriesCount()) return;
  m_series[static_cast<std::size_t>(series)]->data.add(x, y);
  m_dirty = true;
}

void MetricChart::appendGroup(int series, double x0, double x, double mean, double yMin, double yMax,
                              std::size_t count) {
  if (series < 0 || series >= seriesCount()) return;
  m_series[static_cast<std::size_t>(series)]->data.addGroup(x0, x, mean, yMin, yMax, count);
  m_dirty = true;
}

void MetricChart::truncateAfter(double x) {
  for (auto& s : m_series) s->data.truncateAfter(x);
  m_dirty = true;
}

void MetricChart::clear() {
  m_plot->clearGraphs();
  m_series.clear();
  m_plot->legend->setVisible(false);
  m_highlighted = -1;
  m_emphasized = -1;
  m_follow = true;
  m_dirty = true;
  m_plot->replot();
}

void MetricChart::setSmoothing(double weight) {
  m_smoothing = std::clamp(weight, 0.0, 0.999);
  applyPens();
  m_dirty = true;
}

void MetricChart::setLogX(bool on) {
  m_plot->xAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  m_plot->xAxis->setTicker(on ? readableLogTicker() : m_xTicker);
  fit();
}

void MetricChart::setLinearXTicker(QSharedPointer<QCPAxisTicker> ticker) {
  m_xTicker = std::move(ticker);
  if (m_plot->xAxis->scaleType() == QCPAxis::stLinear) m_plot->xAxis->setTicker(m_xTicker);
}

void MetricChart::setLogY(bool on) {
  m_plot->yAxis->setScaleType(on ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  m_plot->yAxis->setTicker(on ? readableLogTicker() : readableTicker());
  fit();
}

void MetricChart::setIgnoreOutliers(bool on) {
  m_ignoreOutliers = on;
  fit();
}

void MetricChart::setFit(int series, Fit fit) {
  if (series < 0 || series >= seriesCount()) return;
  m_series[static_cast<std::size_t>(series)]->fit = fit;
  m_dirty = true;
}

void MetricChart::setInLegend(int series, bool on) {
  if (series < 0 || series >= seriesCount() || m_series[static_cast<std::size_t>(series)]->legend == on) return;
  m_series[static_cast<std::size_t>(series)]->legend = on;
  applyPens();
}

void MetricChart::setBand(int low, int high, const QColor& brush) {
  if (low < 0 || low >= seriesCount() || high < 0 || high >= seriesCount()) return;
  auto& lo = *m_series[static_cast<std::size_t>(low)];
  auto& hi = *m_series[static_cast<std::size_t>(high)];
  lo.band = hi.band = true;
  lo.raw->setChannelFillGraph(hi.raw);
  lo.raw->setBrush(brush);
  applyPens();
}

void MetricChart::setPoints(int series, const QString& name, const std::vector<std::pair<double, double>>& points) {
  if (series < 0 || series >= seriesCount()) return;
  auto& s = *m_series[static_cast<std::size_t>(series)];
  s.data.clear();
  for (const auto& [x, y] : points) s.data.add(x, y);
  if (s.name != name) {
    s.name = name;
    s.raw->setName(name);
    s.smooth->setName(name);
  }
  m_dirty = true;
}

QString MetricChart::hoverText(const QPointF& pos) const {
  const QCPGraph* nearest = nullptr;
  const Series* owner = nullptr;
  double best = 6;  // pixels: near enough to mean that line
  for (const auto& s : m_series)
    for (const QCPGraph* g : {s->raw, s->smooth}) {
      if (!g->visible() || g->dataCount() == 0 || s->name.isEmpty() || !s->legend) continue;
      const double d = g->selectTest(pos, false);
      if (d >= 0 && d < best) best = d, nearest = g, owner = s.get();
    }
  if (!nearest) return QString();
  const double key = m_plot->xAxis->pixelToCoord(pos.x());
  auto it = nearest->data()->findBegin(key, true);
  if (it == nearest->data()->constEnd()) return QString();
  return tr("%1: %2 at step %3")
      .arg(owner->name, readableNumber(it->value), QString::number(static_cast<qlonglong>(std::llround(it->key))));
}

void MetricChart::setHighlighted(int series) {
  m_highlighted = series;
  applyPens();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void MetricChart::setEmphasized(int series) {
  m_emphasized = series;
  for (int i = 0; i < seriesCount(); ++i) {
    auto& s = *m_series[static_cast<std::size_t>(i)];
    const char* layer = i == series ? "emphasis" : "main";
    s.raw->setLayer(layer);
    s.smooth->setLayer(layer);
  }
  applyPens();
  m_dirty = true;
}

void MetricChart::applyPens() {
  for (int i = 0; i < seriesCount(); ++i) {
    auto& s = *m_series[static_cast<std::size_t>(i)];
    QColor c = s.color;
    const bool dim = m_highlighted >= 0 && i != m_highlighted;
    if (dim) c.setAlpha(70);
    // Behind an emphasized series (the mean) the others are lighter, so it reads first.
    else if (m_highlighted < 0 && m_emphasized >= 0 && i != m_emphasized)
      c.setAlpha(140);
    // Width 1 is a cosmetic pen, drawn on QPainter's fast path; wider pens are stroked as
    // polygons and cost far more on zigzag series, so only the highlighted series and the
    // emphasized one (a mean, itself smooth) get one.
    const bool wide = i == m_highlighted || (i == m_emphasized && m_highlighted < 0);
    QPen main(c, wide ? 2.5 : 1, s.dashed ? Qt::DashLine : Qt::SolidLine);
    // The legend names each series by the line that is read: the smoothed one when smoothing.
    s.raw->removeFromLegend();
    s.smooth->removeFromLegend();
    const bool smoothed = m_smoothing > 0 && !s.band;
    if (s.legend) (smoothed ? s.smooth : s.raw)->addToLegend();
    if (smoothed) {
      QColor faint = c;
      faint.setAlpha(std::min(c.alpha(), 40));
      s.raw->setPen(QPen(faint, 1));
      s.smooth->setPen(main);
      s.smooth->setVisible(true);
    } else {
      s.raw->setPen(main);
      s.smooth->setVisible(false);
    }
  }
}

void MetricChart::fit() {
  m_follow = true;
  m_dirty = true;
  refresh();
}

std::size_t MetricChart::pointCount(int series) const {
  return series >= 0 && series < seriesCount() ? m_series[static_cast<std::size_t>(series)]->data.count() : 0;
}

const SeriesSummary* MetricChart::summary(int series) const {
  return series >= 0 && series < seriesCount() ? &m_series[static_cast<std::size_t>(series)]->data : nullptr;
}

int MetricChart::drawnPoints(int series) const {
  return series >= 0 && series < seriesCount() ? m_series[static_cast<std::size_t>(series)]->raw->dataCount() : 0;
}

double MetricChart::drawnLast(int series) const {
  if (series < 0 || series >= seriesCount()) return std::nan("");
  const auto& data = *m_series[static_cast<std::size_t>(series)]->raw->data();
  return data.isEmpty() ? std::nan("") : (data.constEnd() - 1)->key;
}

std::size_t MetricChart::memoryBytes() const {
  std::size_t total = 0;
  for (const auto& s : m_series) total += s->data.memoryBytes() + sizeof(Series);
  return total;
}

void MetricChart::refresh() {
  if (!m_dirty) return;
  if (m_plot->width() <= 0 || m_plot->height() <= 0 || !m_plot->isVisible()) return;  // drawn when shown
  m_dirty = false;
  double xFirst = std::numeric_limits<double>::max(), xLast = std::numeric_limits<double>::lowest();
  for (const auto& s : m_series) {
    if (s->data.empty()) continue;
    xFirst = std::min(xFirst, s->data.xFirst());
    xLast = std::max(xLast, s->data.xLast());
  }
  m_columns = std::max(16, m_plot->axisRect()->width());
  if (xFirst > xLast) {
    m_plot->replot();  // drawn now, so the redraw budget counts the drawing
    return;
  }
  if (m_follow) {
    const bool logX = m_plot->xAxis->scaleType() == QCPAxis::stLogarithmic;
    // A single step (validation at the end alone) is shown from step 0, not as a span of one
    // step whose ticks would all read the same.
    const double lo = logX ? std::max(xFirst, 1.0) : (xLast - xFirst < 1 ? std::min(0.0, xFirst) : xFirst);
    m_plot->xAxis->blockSignals(true);
    m_plot->xAxis->setRange(lo, std::max(xLast, lo + 1));
    m_plot->xAxis->blockSignals(false);
  }
  const QCPRange range = m_plot->xAxis->range();
  const int columns = m_columns;
  const bool logY = m_plot->yAxis->scaleType() == QCPAxis::stLogarithmic;
  // Only a fitted axis uses them, and only on raw series: a smoothed curve has no outliers,
  // and cutting its top 5% would cut the descent of a loss that converged early.
  const bool percentiles = m_follow && m_ignoreOutliers && m_smoothing == 0;
  m_ys.clear();
  double yMin = std::numeric_limits<double>::max(), yMax = std::numeric_limits<double>::lowest();
  double nearMin = yMin, nearMax = yMax;
  for (int i = 0; i < seriesCount(); ++i) {
    const Fit fit = m_series[static_cast<std::size_t>(i)]->fit;
    drawSeries(i, range.lower, range.upper, columns, [&](double lo, double hi) {
      if (fit == Fit::None) return;
      const bool usable = !logY || lo > 0;
      if (fit == Fit::Near) {
        if (usable) nearMin = std::min(nearMin, lo);
        nearMax = std::max(nearMax, hi);
        return;
      }
      if (usable) yMin = std::min(yMin, lo);
      yMax = std::max(yMax, hi);
      if (percentiles) {
        if (usable) m_ys.push_back(lo);
        if (hi != lo && (!logY || hi > 0)) m_ys.push_back(hi);
      }
    });
  }
  // With a few points every one counts; past them, the 5th-95th percentile of the columns'
  // extremes, as TensorBoard fits its charts.
  if (percentiles && m_ys.size() >= 40) {
    const auto at = [this](double q) {
      auto nth = m_ys.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(m_ys.size() - 1));
      std::nth_element(m_ys.begin(), nth, m_ys.end());
      return *nth;
    };
    yMin = at(0.05);
    yMax = at(0.95);
  }
  // Series fitted Near widen the axis by at most half the span of the others.
  if (yMin > yMax) {
    yMin = nearMin, yMax = nearMax;
  } else if (nearMin <= nearMax) {
    const double span = yMax > yMin ? yMax - yMin : std::abs(yMax) * 0.1 + 1e-9;
    yMin = std::min(yMin, std::max(nearMin, yMin - 0.5 * span));
    yMax = std::max(yMax, std::min(nearMax, yMax + 0.5 * span));
  }
  if (m_spanLo < m_spanHi && yMin <= yMax) yMin = std::min(yMin, m_spanLo), yMax = std::max(yMax, m_spanHi);
  wrapLegendToWidth(m_plot);
  if (m_follow && yMin <= yMax) {
    const double pad = (yMax - yMin) * 0.05 + (yMax == yMin ? std::abs(yMax) * 0.1 + 1e-9 : 0);
    m_plot->yAxis->setRange(logY ? yMin / 1.2 : yMin - pad, logY ? yMax * 1.2 : yMax + pad);
  }
  m_plot->replot();  // drawn now, so the redraw budget counts the drawing
}

void MetricChart::drawSeries(int i, double x0, double x1, int columns,
                             const std::function<void(double, double)>& addBounds) {
  auto& s = *m_series[static_cast<std::size_t>(i)];
  auto cols = s.data.render(x0, x1, columns);
  // Zoomed in where what is held is summaries (the part no longer held raw, or groups of
  // steps): read the real points back.
  std::size_t inView = 0;
  for (const auto& c : cols) inView += c.count;
  if (m_detail && inView > cols.size() && inView <= static_cast<std::size_t>(2 * columns)) {
    auto real = m_detail(i, x0, x1);
    if (!real.empty()) {
      cols.clear();
      for (const auto& [x, y] : real) cols.push_back({x, y, y, x, x, y, 1});
    }
  }
  QVector<QCPGraphData> raw, smooth;
  raw.reserve(static_cast<int>(cols.size() * 2));
  for (const auto& c : cols) {
    if (c.count == 1) {
      raw.push_back({c.x, c.yMin});
    } else if (c.xAtMin <= c.xAtMax) {
      raw.push_back({c.xAtMin, c.yMin});
      raw.push_back({c.xAtMax, c.yMax});
    } else {
      raw.push_back({c.xAtMax, c.yMax});
      raw.push_back({c.xAtMin, c.yMin});
    }
  }
  s.raw->data()->set(raw, true);
  if (m_smoothing > 0 && !s.band) {
    auto ema = smoothedMeans(cols, m_smoothing);
    smooth.reserve(static_cast<int>(cols.size()));
    for (std::size_t k = 0; k < cols.size(); ++k) smooth.push_back({cols[k].x, ema[k]});
    s.smooth->data()->set(smooth, true);
    // Smoothed, the curves are what is read: the axis fits them, and the raw noise
    // behind may run off the chart.
    for (double y : ema) addBounds(y, y);
  } else {
    s.smooth->data()->clear();
    for (const auto& c : cols) addBounds(c.yMin, c.yMax);
  }
}

}  // namespace ptw::ui
