// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/spread_series.h"

#include "ui/metric_chart.h"
#include "ui/palette.h"

namespace ptw::ui {

QStringList rankLabels(const LiveRun& run) {
  std::vector<std::string> hosts;
  try {
    hosts = core::rankHosts(run.profile);
  } catch (const std::exception&) {  // an invalid hosts list: the profile editor says so
  }
  QStringList out;
  for (int r = 0; r < run.ranks; ++r)
    out << (static_cast<std::size_t>(r) < hosts.size()
                ? QStringLiteral("%1 (%2)").arg(run.names.value(r), QString::fromStdString(hosts[std::size_t(r)]))
                : run.names.value(r));
  return out;
}

void SpreadSeries::attach(MetricChart& chart, const QStringList& names, const QString& meanName) {
  m_chart = &chart;
  m_names = names;
  m_spread.reset(static_cast<int>(names.size()));
  m_shown.clear();
  // The range faintly, the band over it, the mean on top; each band's legend entry is its
  // lower edge, the one that holds the fill.
  m_min = chart.addSeries(MetricChart::tr("min–max"), QColor(150, 150, 150, 90));
  m_max = chart.addSeries(QString(), QColor(150, 150, 150, 90));
  m_p10 = chart.addSeries(MetricChart::tr("p10–p90"), QColor(31, 119, 180, 150));
  m_p90 = chart.addSeries(QString(), QColor(31, 119, 180, 150));
  chart.setBand(m_min, m_max, QColor(150, 150, 150, 40));
  chart.setBand(m_p10, m_p90, QColor(31, 119, 180, 70));
  chart.setInLegend(m_max, false);
  chart.setInLegend(m_p90, false);
  // A rank far off shows in the range, and must not flatten the band and the mean.
  chart.setFit(m_min, MetricChart::Fit::Near);
  chart.setFit(m_max, MetricChart::Fit::Near);
  m_mean = chart.addSeries(meanName, Qt::black);
  chart.setEmphasized(m_mean);
  const QColor named[kNamed] = {QColor(214, 39, 40), QColor(255, 127, 14), QColor(148, 103, 189)};
  for (int i = 0; i < kNamed; ++i) {
    m_namedSeries[static_cast<std::size_t>(i)] = chart.addSeries(QString(), named[i]);
    chart.setInLegend(m_namedSeries[static_cast<std::size_t>(i)], false);
  }
}

void SpreadSeries::add(int rank, std::int64_t first, std::int64_t step, double value, std::int64_t count) {
  if (!m_chart) return;
  m_done.clear();
  m_spread.add(rank, first, step, value, count, m_done);
  for (const auto& d : m_done) draw(d);
}

void SpreadSeries::finish() {
  if (!m_chart) return;
  for (const auto& d : m_spread.finish()) draw(d);
  refresh();
}

void SpreadSeries::restart() {
  if (m_chart) m_spread.reset(static_cast<int>(m_names.size()));
}

void SpreadSeries::draw(const RankSpread::Done& d) {
  if (d.ranks == 0) return;
  const double x0 = static_cast<double>(d.first), x = static_cast<double>(std::max(d.step, d.first));
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(1, d.step - d.first + 1));
  m_chart->appendGroup(m_min, x0, x, d.min, d.min, d.min, n);
  m_chart->appendGroup(m_max, x0, x, d.max, d.max, d.max, n);
  m_chart->appendGroup(m_p10, x0, x, d.p10, d.p10, d.p10, n);
  m_chart->appendGroup(m_p90, x0, x, d.p90, d.p90, d.p90, n);
  m_chart->appendGroup(m_mean, x0, x, d.mean, d.mean, d.mean, n);
}

void SpreadSeries::refresh() {
  if (!m_chart) return;
  m_shown = m_spread.standouts(kNamed);
  for (int i = 0; i < kNamed; ++i) {
    const int series = m_namedSeries[static_cast<std::size_t>(i)];
    if (static_cast<std::size_t>(i) < m_shown.size()) {
      const int rank = m_shown[static_cast<std::size_t>(i)];
      m_chart->setPoints(series, m_names.value(rank), m_spread.recent(rank));
      m_chart->setInLegend(series, true);
    } else if (m_chart->pointCount(series) > 0) {
      m_chart->setPoints(series, QString(), {});
      m_chart->setInLegend(series, false);
    }
  }
}

}  // namespace ptw::ui
