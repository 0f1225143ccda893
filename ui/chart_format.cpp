// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/chart_format.h"

#include <qcustomplot.h>
#include <QLocale>

#include <algorithm>
#include <vector>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

namespace ptw::ui {
namespace {

// k/M/G with up to three significant digits, trailing zeros dropped ("1.5M", "250k").
QString withSuffix(double value) {
  static const struct {
    double scale;
    const char* suffix;
  } units[] = {{1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& u : units)
    if (std::abs(value) >= u.scale) return QString::number(value / u.scale, 'g', 3) + QLatin1String(u.suffix);
  return QString::number(value, 'g', 3);
}

// Ticks as QCPAxisTicker places them, labelled compactly; whole-number axes never step
// below 1, so no tick falls between two ranks.
class ReadableTicker : public QCPAxisTicker {
 public:
  explicit ReadableTicker(bool wholeNumbers) : m_whole(wholeNumbers) {}

 protected:
  double getTickStep(const QCPRange& range) override {
    const double step = QCPAxisTicker::getTickStep(range);
    return m_whole ? std::max(1.0, std::ceil(step - 1e-9)) : step;
  }
  int getSubTickCount(double tickStep) override {
    return m_whole && tickStep <= 1 ? 0 : QCPAxisTicker::getSubTickCount(tickStep);
  }
  QString getTickLabel(double tick, const QLocale&, QChar, int) override { return compactNumber(tick); }

 private:
  bool m_whole;
};

// A step axis: ptw's step, and beneath it the script's own counter where a stretch moved it.
class StepTicker : public ReadableTicker {
 public:
  explicit StepTicker(std::shared_ptr<const StepStretches> stretches)
      : ReadableTicker(true), m_stretches(std::move(stretches)) {}

 protected:
  QString getTickLabel(double tick, const QLocale& locale, QChar symbol, int precision) override {
    const QString step = ReadableTicker::getTickLabel(tick, locale, symbol, precision);
    const auto after = m_stretches->upper_bound(static_cast<std::int64_t>(std::floor(tick)));
    if (after == m_stretches->begin()) return step;
    const std::int64_t offset = std::prev(after)->second;
    return offset == 0 ? step : step + QLatin1Char('\n') + compactNumber(tick - static_cast<double>(offset));
  }

 private:
  std::shared_ptr<const StepStretches> m_stretches;
};

class ReadableLogTicker : public QCPAxisTickerLog {
 protected:
  QString getTickLabel(double tick, const QLocale&, QChar, int) override { return compactNumber(tick); }
};

// `significant` digits without an exponent: 0.0000123, not 1.23e-05.
QString plain(double value, int significant) {
  if (value == 0) return QStringLiteral("0");
  QString text = QString::number(value, 'g', significant);
  if (!text.contains('e')) return text;
  const int decimals = significant - 1 - static_cast<int>(std::floor(std::log10(std::abs(value))));
  text = QString::number(value, 'f', std::clamp(decimals, 0, 30));
  if (text.contains('.')) {
    while (text.endsWith('0')) text.chop(1);
    if (text.endsWith('.')) text.chop(1);
  }
  return text;
}

}  // namespace

QString readableNumber(double value, int significant) {
  if (!std::isfinite(value)) return QStringLiteral("–");
  const double magnitude = std::abs(value);
  if (magnitude >= 1e6) return withSuffix(value);
  if (magnitude >= 1000) return QLocale(QLocale::English).toString(static_cast<qlonglong>(std::llround(value)));
  return plain(value, significant);
}

QString compactNumber(double value) {
  if (!std::isfinite(value)) return QStringLiteral("–");
  if (std::abs(value) < 1e-12) return QStringLiteral("0");  // a tick at 0 computed as 1e-17
  if (std::abs(value) >= 1000) return withSuffix(value);
  return plain(value, 4);
}

QSharedPointer<QCPAxisTicker> readableTicker(bool wholeNumbers) {
  return QSharedPointer<QCPAxisTicker>(new ReadableTicker(wholeNumbers));
}

QSharedPointer<QCPAxisTicker> stepTicker(std::shared_ptr<const StepStretches> stretches) {
  return QSharedPointer<QCPAxisTicker>(new StepTicker(std::move(stretches)));
}

QSharedPointer<QCPAxisTicker> readableLogTicker() { return QSharedPointer<QCPAxisTicker>(new ReadableLogTicker); }

void placeLegendAbove(QCustomPlot* plot) {
  QCPLegend* legend = plot->legend;
  if (auto* inset = plot->axisRect()->insetLayout(); inset->elements(false).contains(legend)) inset->take(legend);
  auto* layout = plot->plotLayout();
  layout->insertRow(0);
  layout->addElement(0, 0, legend);
  layout->setRowStretchFactor(0, 0.001);  // as tall as its entries, no more
  legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  legend->setWrap(6);
  legend->setBorderPen(Qt::NoPen);
  legend->setBrush(Qt::NoBrush);
  legend->setMargins(QMargins(4, 2, 4, 0));
  // A grid is as wide at most as its narrowest element allows, and an empty legend's own
  // limit is its margins: a set limit (any below QWIDGETSIZE_MAX counts) keeps the axis rect
  // full width before the first series.
  legend->setMaximumSize(1 << 20, QWIDGETSIZE_MAX);
}

void wrapLegendToWidth(QCustomPlot* plot) {
  QCPLegend* legend = plot->legend;
  std::vector<int> widths;
  for (int i = 0; i < legend->itemCount(); ++i)  // a grid's empty cells count as items, and are null
    if (const QCPAbstractLegendItem* item = legend->item(i)) widths.push_back(item->minimumOuterSizeHint().width());
  const int available = plot->width() - legend->margins().left() - legend->margins().right();
  int wrap = 1;
  // The most entries a row whose columns (each as wide as its widest entry) fit.
  for (int k = std::min<int>(6, static_cast<int>(widths.size())); k > 1 && wrap == 1; --k) {
    std::vector<int> column(static_cast<std::size_t>(k), 0);
    for (std::size_t i = 0; i < widths.size(); ++i)
      column[i % std::size_t(k)] = std::max(column[i % std::size_t(k)], widths[i]);
    int total = legend->columnSpacing() * (k - 1);
    for (int w : column) total += w;
    if (total <= available) wrap = k;
  }
  if (legend->wrap() != wrap) {
    legend->setWrap(wrap);
    legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  }
}

}  // namespace ptw::ui
