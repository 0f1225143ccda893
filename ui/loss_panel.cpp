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
  m_spread.detach();
  m_mean = -1;
  if (run.ranks > kAggregateAbove) {
    m_spread.attach(*this, rankLabels(run), tr("mean of %1 ranks").arg(run.ranks));
  } else {
    for (int r = 0; r < run.ranks; ++r) addSeries(run.names.value(r), seriesColor(r));
    m_mean = run.ranks > 1 && !core::hasCoordinator(run.profile) ? addSeries(tr("mean"), Qt::black) : -1;
    setEmphasized(m_mean);
  }
  m_validation = addSeries(tr("validation"), Qt::black, true);
  // A few validation losses far above the training loss (a model that overfits, or the
  // first evaluations) must not flatten the training curve.
  setFit(m_validation, Fit::Near);
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
    if (m_spread.attached()) {
      if (core::isReportedLoss(g.lossSum)) m_spread.add(s.rank, g.first, s.step, g.lossSum / n, g.count);
      continue;
    }
    appendGroup(s.rank, static_cast<double>(g.first), static_cast<double>(s.step), g.lossSum / n, g.lossMin, g.lossMax,
                static_cast<std::size_t>(g.count));
    // The mean of a window of steps, once every rank has reported all of it.
    if (StepSums::Done d; m_mean >= 0 && m_sums.add(g.first, g.lossSum, 0, g.count, d)) appendMean(d);
  }
}

void LossPanel::truncateAfter(std::int64_t step) {
  MetricChart::truncateAfter(static_cast<double>(step));
  m_sums.reset(m_ranks);
  m_spread.restart();
}

void LossPanel::finish() {
  m_spread.finish();
  if (m_mean >= 0)
    for (const auto& d : m_sums.finish()) appendMean(d);
}

void LossPanel::appendMean(const StepSums::Done& d) {
  appendGroup(m_mean, static_cast<double>(d.first), static_cast<double>(d.step), d.loss, d.loss, d.loss,
              static_cast<std::size_t>(d.step - d.first + 1));
}

void LossPanel::readStoreFrom(LiveStore& store) {
  // The spread's series are no rank's: what they hold is all there is.
  setDetailProvider([this, &store](int series, double x0, double x1) {
    return m_spread.attached() ? std::vector<std::pair<double, double>>{} : store.series(series, "loss", x0, x1);
  });
}

}  // namespace ptw::ui
