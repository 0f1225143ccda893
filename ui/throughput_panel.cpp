// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/throughput_panel.h"

#include <qcustomplot.h>

#include "common/strategies.h"
#include "ui/palette.h"

namespace ptw::ui {

ThroughputPanel::ThroughputPanel(QWidget* parent) : MetricChart(tr("samples/s"), parent) {}

void ThroughputPanel::reset(const LiveRun& run) {
  m_ranks = run.ranks;
  clear();
  m_spread.detach();
  m_total = -1;
  if (run.ranks > kAggregateAbove) {
    m_spread.attach(*this, rankLabels(run), tr("mean of %1 ranks").arg(run.ranks));
  } else {
    for (int r = 0; r < run.ranks; ++r) addSeries(run.names.value(r), seriesColor(r));
    m_total = run.ranks > 1 && !core::hasCoordinator(run.profile) ? addSeries(tr("total"), Qt::black) : -1;
  }
  plot()->yAxis->setLabel(run.ranks > kAggregateAbove ? tr("samples/s per rank") : tr("samples/s"));
  m_sums.reset(run.ranks);
}

void ThroughputPanel::add(RecordSpan records) {
  for (const core::Record& rec : records) {
    const auto& s = rec.step;
    if (!core::holdsSteps(rec) || s.rank < 0 || s.rank >= m_ranks) continue;
    const core::StepGroup g = core::asGroup(rec);
    const double rate = core::samplesPerS(rec);
    if (m_spread.attached()) {
      m_spread.add(s.rank, g.first, s.step, rate, g.count);
      continue;
    }
    appendGroup(s.rank, static_cast<double>(g.first), static_cast<double>(s.step), rate, rate, rate,
                static_cast<std::size_t>(g.count));
    // The total of a window of steps, once every rank has reported all of it.
    if (StepSums::Done d; m_total >= 0 && m_sums.add(g.first, 0, rate * static_cast<double>(g.count), g.count, d))
      appendTotal(d);
  }
}

void ThroughputPanel::truncateAfter(std::int64_t step) {
  MetricChart::truncateAfter(static_cast<double>(step));
  m_sums.reset(m_ranks);
  m_spread.restart();
}

void ThroughputPanel::finish() {
  m_spread.finish();
  if (m_total >= 0)
    for (const auto& d : m_sums.finish()) appendTotal(d);
}

void ThroughputPanel::appendTotal(const StepSums::Done& d) {
  appendGroup(m_total, static_cast<double>(d.first), static_cast<double>(d.step), d.throughput, d.throughput,
              d.throughput, static_cast<std::size_t>(d.step - d.first + 1));
}

void ThroughputPanel::readStoreFrom(LiveStore& store) {
  // The spread's series are no rank's: what they hold is all there is.
  setDetailProvider([this, &store](int series, double x0, double x1) {
    return m_spread.attached() ? std::vector<std::pair<double, double>>{}
                               : store.series(series, "samples_per_s", x0, x1);
  });
}

}  // namespace ptw::ui
