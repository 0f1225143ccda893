// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/scalar_charts.h"

#include <QGridLayout>
#include <QScrollArea>
#include <QVBoxLayout>

#include <algorithm>
#include <iterator>

#include "ui/palette.h"

namespace ptw::ui {
namespace {
constexpr int kColumns = 2;
constexpr int kChartHeight = 260;
/// Steps one rank may be ahead of another before the oldest await their mean no longer.
constexpr std::size_t kMaxOpenSteps = std::size_t(1) << 16;
}  // namespace

ScalarCharts::ScalarCharts(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea(this);
  scroll->setObjectName("scalarScroll");
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* inside = new QWidget(scroll);
  auto* column = new QVBoxLayout(inside);
  m_grid = new QGridLayout;
  column->addLayout(m_grid);
  column->addStretch(1);  // charts keep their height; the space is left below them
  scroll->setWidget(inside);
  layout->addWidget(scroll);
}

void ScalarCharts::reset(const QStringList& series) {
  for (auto& [name, c] : m_charts) delete c.chart;
  m_charts.clear();
  m_series = series;
  m_tooManySaid = false;
  m_highlighted = -1;
}

ScalarCharts::Chart* ScalarCharts::make(const QString& name) {
  if (count() >= kMaxCharts) {
    if (!m_tooManySaid) emit tooMany(name);
    m_tooManySaid = true;
    return nullptr;
  }
  Chart& c = m_charts[name];
  c.chart = new MetricChart(name, m_grid->parentWidget());
  c.chart->setObjectName("scalar:" + name);
  c.chart->setFixedHeight(kChartHeight);
  for (int r = 0; r < m_series.size(); ++r) c.chart->addSeries(m_series[r], seriesColor(r));
  // The mean over ranks stands out, as on the loss chart.
  c.mean = m_series.size() > 1 ? c.chart->addSeries(tr("mean"), Qt::black) : -1;
  c.chart->setEmphasized(c.mean);
  c.chart->setSmoothing(m_smoothing);
  c.chart->setIgnoreOutliers(m_ignoreOutliers);
  c.chart->setHighlighted(m_highlighted);
  if (m_providers) {
    auto provider = m_providers(name.toStdString());
    const int ranks = static_cast<int>(m_series.size());
    // The store has each rank's values; the mean is only drawn.
    c.chart->setDetailProvider([provider, ranks](int series, double x0, double x1) {
      return series < ranks && provider ? provider(series, x0, x1) : std::vector<std::pair<double, double>>{};
    });
  }
  relayout();
  emit chartAdded(name);
  return &c;
}

void ScalarCharts::relayout() {
  int i = 0;
  for (auto& [name, c] : m_charts) {
    m_grid->removeWidget(c.chart);
    m_grid->addWidget(c.chart, i / kColumns, i % kColumns);
    ++i;
  }
}

void ScalarCharts::add(std::string_view name, int rank, std::int64_t step, double value) {
  if (rank < 0 || rank >= m_series.size()) return;
  const QString key = QString::fromUtf8(name.data(), static_cast<int>(name.size()));
  auto it = m_charts.find(key);
  Chart* c = it != m_charts.end() ? &it->second : make(key);
  if (!c) return;
  const double x = static_cast<double>(step);
  c->chart->append(rank, x, value);
  if (c->mean < 0 || step <= c->doneStep) return;
  // A step's mean is drawn once every rank has reported it; the ranks' records come in
  // step order each, so steps complete in order.
  auto& [sum, n] = c->open[step];
  sum += value;
  if (++n < m_series.size()) {
    if (c->open.size() > kMaxOpenSteps) c->open.erase(c->open.begin());  // a rank that does not report it
    return;
  }
  c->chart->append(c->mean, x, sum / n);
  c->doneStep = step;
  c->open.erase(c->open.begin(), std::next(c->open.find(step)));
}

void ScalarCharts::add(RecordSpan records) {
  for (const core::Record& rec : records)
    if (rec.kind == core::Record::Kind::Scalar) add(rec.scalarName(), rec.step.rank, rec.step.step, rec.value);
}

void ScalarCharts::truncateAfter(std::int64_t step) {
  for (auto& [name, c] : m_charts) {
    c.chart->truncateAfter(static_cast<double>(step));
    c.open.clear();
    c.doneStep = std::min(c.doneStep, step);
  }
}

void ScalarCharts::refresh() {
  for (auto& [name, c] : m_charts) c.chart->refresh();
}

void ScalarCharts::fit() {
  for (auto& [name, c] : m_charts) c.chart->fit();
}

void ScalarCharts::setSmoothing(double weight) {
  m_smoothing = weight;
  for (auto& [name, c] : m_charts) {
    c.chart->setSmoothing(weight);
    c.chart->refresh();
  }
}

void ScalarCharts::setIgnoreOutliers(bool on) {
  m_ignoreOutliers = on;
  for (auto& [name, c] : m_charts) c.chart->setIgnoreOutliers(on);
}

void ScalarCharts::setHighlighted(int series) {
  m_highlighted = series;
  for (auto& [name, c] : m_charts) c.chart->setHighlighted(series);
}

MetricChart* ScalarCharts::chart(const QString& name) const {
  const auto it = m_charts.find(name);
  return it == m_charts.end() ? nullptr : it->second.chart;
}

void ScalarCharts::readStoreFrom(LiveStore& store) {
  setDetailProviders([&store](const std::string& name) -> MetricChart::DetailProvider {
    return [&store, name](int series, double x0, double x1) { return store.series(series, "scalar:" + name, x0, x1); };
  });
}

}  // namespace ptw::ui
