// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/step_split_chart.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <qcustomplot.h>
#include <QVBoxLayout>

#include "ui/chart_format.h"
#include "ui/rank_spread.h"

namespace ptw::ui {

StepSplitChart::StepSplitChart(QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_plot);
  m_plot->setPlottingHint(QCP::phFastPolylines, true);
  const char* names[] = {"data", "compute", "communication", "optimizer"};
  const QColor colors[] = {QColor(120, 120, 120), QColor(31, 119, 180), QColor(214, 39, 40), QColor(44, 160, 44)};
  for (int i = 0; i < 4; ++i) {
    m_bars[i] = new QCPBars(m_plot->xAxis, m_plot->yAxis);
    m_bars[i]->setName(tr(names[i]));
    m_bars[i]->setBrush(colors[i]);
    m_bars[i]->setPen(Qt::NoPen);
    m_bars[i]->setWidth(0.6);
    if (i > 0) m_bars[i]->moveAbove(m_bars[i - 1]);
  }
  m_plot->yAxis->setLabel(tr("ms per step (recent average)"));
  m_plot->legend->setVisible(true);
  m_plot->legend->setFont(QFont(font().family(), 8));
  placeLegendAbove(m_plot);  // inside the axis rect it covered rank 1's bar
  m_plot->yAxis->setTicker(readableTicker());
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_plot->axisRect()->setRangeDrag(Qt::Vertical);
  m_plot->axisRect()->setRangeZoom(Qt::Vertical);
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] {
    m_plot->yAxis->rescale();
    m_plot->yAxis->setRangeLower(0);
    m_plot->replot();
  });
}

void StepSplitChart::reset(int ranks) {
  m_average.assign(static_cast<std::size_t>(ranks), {0, 0, 0, 0});
  m_seen.assign(static_cast<std::size_t>(ranks), false);
  m_shown.resize(static_cast<std::size_t>(ranks));
  std::iota(m_shown.begin(), m_shown.end(), 0);
  if (ranks > kAggregateAbove) m_shown.assign(5, 0);
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  for (int r = 0; r < ranks && ranks <= kAggregateAbove; ++r) ticker->addTick(r, tr("rank %1").arg(r));
  m_plot->xAxis->setTicker(ticker);
  m_plot->xAxis->setRange(-0.6, static_cast<double>(m_shown.size()) - 0.4);
  for (auto* b : m_bars) b->data()->clear();
  m_dirty = true;
  refresh();
}

void StepSplitChart::add(const core::StepRecord& r) { add(r.rank, {r.dataMs, r.computeMs, r.commMs, r.optMs}, 1); }

void StepSplitChart::add(int rank, const std::array<double, 4>& meanMs, std::int64_t steps) {
  if (rank < 0 || rank >= static_cast<int>(m_average.size()) || steps <= 0) return;
  auto& a = m_average[static_cast<std::size_t>(rank)];
  // ~50-step window: each step moves the average 2% of the way; `steps` of them at their mean
  // move it as far as those steps would at that mean.
  const double alpha = m_seen[static_cast<std::size_t>(rank)] ? 1.0 - std::pow(0.98, static_cast<double>(steps)) : 1.0;
  for (std::size_t i = 0; i < 4; ++i) a[i] += alpha * (meanMs[i] - a[i]);
  m_seen[static_cast<std::size_t>(rank)] = true;
  m_dirty = true;
}

void StepSplitChart::add(RecordSpan records) {
  for (const core::Record& rec : records) {
    if (!core::holdsSteps(rec)) continue;
    const core::StepGroup g = core::asGroup(rec);
    const double n = static_cast<double>(g.count);
    add(rec.step.rank, {g.dataMs / n, g.computeMs / n, g.commMs / n, g.optMs / n}, g.count);
  }
}

std::array<double, 4> StepSplitChart::split(int rank) const {
  return rank >= 0 && rank < static_cast<int>(m_average.size()) ? m_average[static_cast<std::size_t>(rank)]
                                                                : std::array<double, 4>{0, 0, 0, 0};
}

void StepSplitChart::refresh() {
  if (!m_dirty) return;
  m_dirty = false;
  if (m_average.size() > static_cast<std::size_t>(kAggregateAbove)) pickRanks();
  double top = 0;
  for (int i = 0; i < 4; ++i) {
    QVector<double> keys, values;
    for (std::size_t k = 0; k < m_shown.size(); ++k) {
      keys << static_cast<double>(k);
      values << m_average[static_cast<std::size_t>(m_shown[k])][static_cast<std::size_t>(i)];
    }
    m_bars[i]->setData(keys, values, true);
  }
  for (int r : m_shown) {
    const auto& a = m_average[static_cast<std::size_t>(r)];
    top = std::max(top, a[0] + a[1] + a[2] + a[3]);
  }
  m_plot->yAxis->setRange(0, top > 0 ? top * 1.15 : 1);
  m_plot->replot();  // drawn now, so the redraw budget counts the drawing
}

// The ranks at the fastest, the 10th, 50th and 90th percentile and the slowest of the step
// time (the ranks that reported; rank 0 until one has), each bar named by what it stands for
// and its rank.
void StepSplitChart::pickRanks() {
  std::vector<std::pair<double, int>> totals;
  totals.reserve(m_average.size());
  for (std::size_t r = 0; r < m_average.size(); ++r)
    if (m_seen[r]) totals.emplace_back(m_average[r][0] + m_average[r][1] + m_average[r][2] + m_average[r][3], int(r));
  if (totals.empty()) return;
  std::sort(totals.begin(), totals.end());
  const double at[] = {0, 0.1, 0.5, 0.9, 1};
  const QString what[] = {tr("fastest"), tr("p10"), tr("median"), tr("p90"), tr("slowest")};
  QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
  for (std::size_t k = 0; k < 5; ++k) {
    const auto& [ms, rank] = totals[static_cast<std::size_t>(at[k] * static_cast<double>(totals.size() - 1))];
    m_shown[k] = rank;
    ticker->addTick(static_cast<double>(k), tr("%1\nrank %2").arg(what[k]).arg(rank));
  }
  m_plot->xAxis->setTicker(ticker);
}

}  // namespace ptw::ui
