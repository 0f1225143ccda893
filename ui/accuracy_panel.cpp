// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/accuracy_panel.h"

#include <QLabel>

#include <cmath>

#include "common/strategies.h"
#include "ui/metric_chart.h"

namespace ptw::ui {
namespace {

QString regressionNote() {
  return AccuracyPanel::tr(
      "No validation accuracy: this run is a regression (MSE); its validation loss is on the loss "
      "chart.");
}

}  // namespace

AccuracyPanel::AccuracyPanel(QWidget* parent)
    : QStackedWidget(parent), m_chart(new MetricChart(tr("val accuracy (%)"), this)), m_note(new QLabel(this)) {
  m_chart->setObjectName("accuracyChart");
  m_chart->setYSpan(0, 100);
  m_chart->setToolTip(
      tr("Validation accuracy of the held-out data (data.val_fraction), every run.eval_every "
         "steps and at the end; rank 0 validates, as every rank holds the same parameters"));
  m_note->setObjectName("accuracyNote");
  m_note->setAlignment(Qt::AlignCenter);
  m_note->setWordWrap(true);
  m_note->setStyleSheet("color: palette(dark)");
  addWidget(m_chart);
  addWidget(m_note);
}

void AccuracyPanel::reset(const LiveRun& run) {
  m_chart->clear();
  m_chart->addSeries(tr("validation"), Qt::black);
  const core::Profile& p = run.profile;
  // A command run's program may report validation of either kind: its first record says.
  const bool regression = !core::isClassification(p.data) && !core::strategyOf(p).runsCommand;
  m_note->setText(regression ? regressionNote()
                             : tr("No validation accuracy: data.val_fraction is 0, so no data is held out."));
  setCurrentWidget(p.data.valFraction > 0 && !regression ? static_cast<QWidget*>(m_chart) : m_note);
}

void AccuracyPanel::add(RecordSpan records) {
  for (const core::Record& rec : records) {
    if (rec.kind != core::Record::Kind::Validation) continue;
    if (rec.valAccuracy >= 0) {
      m_chart->append(0, static_cast<double>(rec.step.step), 100 * rec.valAccuracy);
    } else if (currentWidget() != m_note) {
      m_note->setText(regressionNote());
      setCurrentWidget(m_note);
    }
  }
}

void AccuracyPanel::truncateAfter(std::int64_t step) { m_chart->truncateAfter(static_cast<double>(step)); }

void AccuracyPanel::refresh() { m_chart->refresh(); }

void AccuracyPanel::finish() {
  if (m_chart->pointCount(0) > 0 || currentWidget() == m_note) return;
  m_note->setText(tr("No validation accuracy: the run reported no validation point."));
  setCurrentWidget(m_note);
}

// Validation points are few (one per run.eval_every steps): the store's are read whole.
void AccuracyPanel::readStoreFrom(LiveStore& store) {
  m_chart->setDetailProvider([&store](int series, double x0, double x1) {
    std::vector<std::pair<double, double>> out;
    if (series != 0) return out;
    for (const auto& v : store.validation())
      if (v.step >= x0 && v.step <= x1 && std::isfinite(v.valAccuracy))
        out.emplace_back(static_cast<double>(v.step), 100 * v.valAccuracy);
    return out;
  });
}

}  // namespace ptw::ui
