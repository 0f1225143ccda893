// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/loss_panel.h"

#include <qcustomplot.h>

#include "common/strategies.h"
#include "ui/palette.h"

namespace ptw::ui {

LossPanel::LossPanel(QWidget* parent) : MetricChart(tr("loss"), parent) { setLinearXTicker(stepTicker(m_stretches)); }

void LossPanel::reset(const LiveRun& run) {
  m_ranks = run.ranks;
  clear();
  for (int r = 0; r < run.ranks; ++r) addSeries(run.names.value(r), seriesColor(r));
  m_mean = run.ranks > 1 && !core::hasCoordinator(run.profile) ? addSeries(tr("mean"), Qt::black) : -1;
  m_validation = addSeries(tr("validation"), Qt::black, true);
  setEmphasized(m_mean);
  m_sums.reset(run.ranks);
  m_stretches->clear();
  m_offset = 0;
  plot()->xAxis->setLabel(tr("step"));
}

void LossPanel::add(RecordSpan records) {
  for (const core::Record& rec : records) {
    const auto& s = rec.step;
    if (rec.kind == core::Record::Kind::Validation) {
      append(m_validation, static_cast<double>(s.step), rec.valLoss);
      continue;
    }
    if (!core::holdsSteps(rec) || s.rank < 0 || s.rank >= m_ranks) continue;
    const core::StepGroup g = core::asGroup(rec);
    if (s.rank == 0 && s.stepOffset != m_offset) {  // a new stretch began within the group's steps
      m_offset = s.stepOffset;
      (*m_stretches)[g.first] = m_offset;
      plot()->xAxis->setLabel(tr("step (beneath: the script's own counter)"));
    }
    const double n = static_cast<double>(g.count);
    appendGroup(s.rank, static_cast<double>(g.first), static_cast<double>(s.step), g.lossSum / n, g.lossMin, g.lossMax,
                static_cast<std::size_t>(g.count));
    // The mean of a window of steps, once every rank has reported all of it.
    if (StepSums::Done d; m_mean >= 0 && m_sums.add(g.first, g.lossSum, 0, g.count, d)) appendMean(d);
  }
}

void LossPanel::truncateAfter(std::int64_t step) {
  MetricChart::truncateAfter(static_cast<double>(step));
  m_sums.reset(m_ranks);
}

void LossPanel::finish() {
  if (m_mean >= 0)
    for (const auto& d : m_sums.finish()) appendMean(d);
}

void LossPanel::appendMean(const StepSums::Done& d) {
  appendGroup(m_mean, static_cast<double>(d.first), static_cast<double>(d.step), d.loss, d.loss, d.loss,
              static_cast<std::size_t>(d.step - d.first + 1));
}

void LossPanel::readStoreFrom(LiveStore& store) {
  setDetailProvider([&store](int series, double x0, double x1) { return store.series(series, "loss", x0, x1); });
}

}  // namespace ptw::ui
