// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/lr_panel.h"

#include "ui/palette.h"

namespace ptw::ui {

LrPanel::LrPanel(QWidget* parent) : MetricChart(tr("learning rate"), parent) {
  setToolTip(tr("The learning rate of each step (hyper.lr with its schedule and warm-up), the same on every rank"));
}

void LrPanel::reset(const LiveRun& run) {
  m_ranks = run.ranks;
  clear();
  addSeries(tr("learning rate"), seriesColor(0));
}

void LrPanel::add(RecordSpan records) {
  for (const core::Record& rec : records)
    if (core::holdsSteps(rec) && rec.step.rank == 0 && m_ranks > 0)
      append(0, static_cast<double>(rec.step.step), rec.step.lr);
}

void LrPanel::readStoreFrom(LiveStore& store) {
  setDetailProvider([&store](int series, double x0, double x1) { return store.series(series, "lr", x0, x1); });
}

}  // namespace ptw::ui
