// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/throughput_panel.h"

#include "common/strategies.h"
#include "ui/palette.h"

namespace ptw::ui {

ThroughputPanel::ThroughputPanel(QWidget* parent) : MetricChart(tr("samples/s"), parent) {}

void ThroughputPanel::reset(const LiveRun& run) {
  m_ranks = run.ranks;
  clear();
  for (int r = 0; r < run.ranks; ++r) addSeries(run.names.value(r), seriesColor(r));
  m_total = run.ranks > 1 && !core::hasCoordinator(run.profile) ? addSeries(tr("total"), Qt::black) : -1;
  m_sums.reset(run.ranks);
}

void ThroughputPanel::add(RecordSpan records) {
  for (const core::Record& rec : records) {
    const auto& s = rec.step;
    if (!core::holdsSteps(rec) || s.rank < 0 || s.rank >= m_ranks) continue;
    const core::StepGroup g = core::asGroup(rec);
    const double rate = core::samplesPerS(rec);
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
}

void ThroughputPanel::finish() {
  if (m_total >= 0)
    for (const auto& d : m_sums.finish()) appendTotal(d);
}

void ThroughputPanel::appendTotal(const StepSums::Done& d) {
  appendGroup(m_total, static_cast<double>(d.first), static_cast<double>(d.step), d.throughput, d.throughput,
              d.throughput, static_cast<std::size_t>(d.step - d.first + 1));
}

void ThroughputPanel::readStoreFrom(LiveStore& store) {
  setDetailProvider(
      [&store](int series, double x0, double x1) { return store.series(series, "samples_per_s", x0, x1); });
}

}  // namespace ptw::ui
