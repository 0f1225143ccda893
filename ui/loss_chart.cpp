#include "ui/loss_chart.h"

#include <QVBoxLayout>
#include <qcustomplot.h>

namespace ptw::ui {

namespace {
QColor rankColor(int rank) {
  static const QColor palette[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
                                   QColor(214, 39, 40),  QColor(148, 103, 189), QColor(140, 86, 75),
                                   QColor(227, 119, 194), QColor(127, 127, 127)};
  return palette[rank % 8];
}
}  // namespace

LossChart::LossChart(QWidget* parent) : QWidget(parent), m_plot(new QCustomPlot(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(m_plot);
  m_plot->setObjectName(QStringLiteral("lossPlot"));
  m_plot->xAxis->setLabel(tr("step"));
  m_plot->yAxis->setLabel(tr("training loss"));
  m_plot->legend->setVisible(true);
  m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  m_plot->setNoAntialiasingOnDrag(true);
  connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] {
    m_plot->rescaleAxes();
    m_plot->replot();
  });
}

void LossChart::reset(int ranks) {
  m_plot->clearGraphs();
  for (int r = 0; r < ranks; ++r) {
    QCPGraph* g = m_plot->addGraph();
    g->setName(tr("rank %1").arg(r));
    g->setPen(QPen(rankColor(r), 1.5));
    g->setAdaptiveSampling(true);
  }
  m_dirty = true;
  refresh();
}

void LossChart::addRecords(const std::vector<core::Record>& batch) {
  for (const auto& r : batch) {
    if (r.kind != core::Record::Kind::Step || r.step.rank >= m_plot->graphCount()) continue;
    // Steps only grow, so addData with alreadySorted keeps each append O(1).
    m_plot->graph(r.step.rank)->addData(static_cast<double>(r.step.step), r.step.loss);
    m_dirty = true;
  }
}

void LossChart::refresh() {
  if (!m_dirty) return;
  m_dirty = false;
  m_plot->rescaleAxes();
  m_plot->replot(QCustomPlot::rpQueuedReplot);
}

int LossChart::rankCount() const { return m_plot->graphCount(); }

int LossChart::pointCount(int rank) const {
  return rank < m_plot->graphCount() ? m_plot->graph(rank)->dataCount() : 0;
}

}  // namespace ptw::ui
