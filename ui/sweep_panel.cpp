// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/sweep_panel.h"

#include <qcustomplot.h>
#include <QCheckBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cmath>
#include <map>

#include "common/error.h"
#include "common/strategies.h"
#include "ui/chart_format.h"
#include "ui/palette.h"

namespace ptw::ui {
namespace {
QColor strategyColor(const std::string& s) {
  const core::SweepVariant* v = core::findSweepVariant(s);
  if (!v) return Qt::gray;
  return v->color < 0 ? QColor(Qt::black) : seriesColor(v->color);
}

QCustomPlot* makePlot(QWidget* parent, const QString& y) {
  auto* plot = new QCustomPlot(parent);
  plot->xAxis->setLabel(QObject::tr("workers"));
  plot->yAxis->setLabel(y);
  plot->legend->setVisible(true);
  plot->legend->setFont(QFont(parent->font().family(), 8));
  placeLegendAbove(plot);
  plot->xAxis->setTicker(readableTicker(true));  // workers come whole
  plot->yAxis->setTicker(readableTicker());
  plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  return plot;
}
}  // namespace

SweepPanel::SweepPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  m_form = form;
  m_strategyRow = new QWidget(this);
  m_strategyRow->setObjectName("sweep.strategies");
  auto* boxes = new QHBoxLayout(m_strategyRow);
  boxes->setContentsMargins(0, 0, 0, 0);
  for (const auto& variant : core::sweepVariants()) {
    if (variant.baseline) continue;  // always run
    const std::string& name = variant.name;
    auto* box = new QCheckBox(QString::fromStdString(name), m_strategyRow);
    box->setObjectName(QString::fromStdString("sweep." + name));
    box->setToolTip(QString::fromStdString(variant.label));
    box->setChecked(variant.byDefault);
    m_strategies.push_back(box);
    boxes->addWidget(box);
  }
  form->addRow(tr("Strategies (Single is the baseline)"), m_strategyRow);
  m_workers = new QLineEdit("1, 2", this);
  m_workers->setObjectName("sweep.workers");
  form->addRow(tr("Worker counts"), m_workers);
  m_steps = new QSpinBox(this);
  m_steps->setObjectName("sweep.steps");
  m_steps->setRange(1, 1'000'000);
  m_steps->setValue(200);
  form->addRow(tr("Steps per configuration"), m_steps);
  layout->addLayout(form);
  auto* buttons = new QHBoxLayout;
  m_run = new QPushButton(tr("Run Sweep"), this);
  m_run->setObjectName("sweep.run");
  m_stop = new QPushButton(tr("Stop"), this);
  m_stop->setEnabled(false);
  m_open = new QPushButton(tr("Open Fastest as Profile"), this);
  m_open->setObjectName("sweep.openFastest");
  m_open->setEnabled(false);
  m_status = new QLabel(this);
  m_status->setObjectName("sweep.status");
  buttons->addWidget(m_run);
  buttons->addWidget(m_stop);
  buttons->addWidget(m_open);
  buttons->addWidget(m_status, 1);
  layout->addLayout(buttons);
  auto* split = new QSplitter(Qt::Vertical, this);
  auto* charts = new QSplitter(Qt::Horizontal, split);
  m_throughput = makePlot(charts, tr("samples/s"));
  m_efficiency = makePlot(charts, tr("scaling efficiency"));
  m_table = new QTableWidget(0, 8, split);
  m_table->setObjectName("sweep.table");
  m_table->setHorizontalHeaderLabels({tr("strategy"), tr("workers"), tr("samples/s"), tr("efficiency"), tr("steps/s"),
                                      tr("step ms"), tr("comm %"), tr("status")});
  m_table->horizontalHeaderItem(6)->setToolTip(
      tr("Share of the step spent waiting for the other ranks and reducing gradients, after warm-up"));
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->verticalHeader()->setVisible(false);
  m_table->horizontalHeader()->setStretchLastSection(true);
  layout->addWidget(split, 1);
  connect(m_run, &QPushButton::clicked, this, &SweepPanel::start);
  connect(m_stop, &QPushButton::clicked, this, &SweepPanel::stop);
  connect(m_open, &QPushButton::clicked, this, &SweepPanel::openFastest);
}

void SweepPanel::showProfile(const core::Profile& profile) {
  m_command = core::Sweep::sweepsCommand(profile);
  m_form->setRowVisible(m_strategyRow, !m_command);
  if (auto* label = qobject_cast<QLabel*>(m_form->labelForField(m_workers)))
    label->setText(m_command ? tr("Process counts (strategy.ranks)") : tr("Worker counts"));
  m_workers->setToolTip(m_command ? tr("Your program runs once with each number of processes; 1 is the baseline")
                                  : QString());
}

SweepPanel::~SweepPanel() {
  if (m_sweep) m_sweep->requestStop();
  if (m_thread.joinable()) m_thread.join();
}

bool SweepPanel::start() {
  if (m_running) return false;
  if (const QString busy = m_busyReason ? m_busyReason() : QString(); !busy.isEmpty()) {
    m_status->setText(busy);
    return false;
  }
  if (m_thread.joinable()) m_thread.join();
  // The last sweep's points keep their profile (Open Fastest) until this one starts.
  const core::Profile base = m_source ? m_source() : core::defaultProfile();
  showProfile(base);
  std::vector<std::string> strategies;  // a command profile's sweep runs its own strategy alone
  for (auto* box : m_strategies)
    if (box->isChecked() && !m_command) strategies.push_back(box->text().toStdString());
  std::vector<int> workers;
  for (const auto& part : m_workers->text().split(',')) {
    const QString text = part.trimmed();
    if (text.isEmpty()) continue;  // "1, 2," and blanks between commas
    bool ok = false;
    const int w = text.toInt(&ok);
    if (!ok || w < 1 || w > core::Sweep::kMaxWorkers) {
      m_status->setText(tr("Worker counts: expected integers from 1 to %1 like \"1, 2, 4\", got \"%2\"")
                            .arg(core::Sweep::kMaxWorkers)
                            .arg(text));
      return false;
    }
    workers.push_back(w);
  }
  if (workers.empty()) {
    m_status->setText(tr("Worker counts: give at least one, like \"1, 2, 4\""));
    return false;
  }
  core::SweepOptions options(base, strategies, workers);
  options.setSteps(m_steps->value()).setRunsDir(m_runsDir.toStdString());
  try {
    core::Sweep(options).check();  // say what cannot run, now
  } catch (const Error& e) {
    m_status->setText(QString::fromStdString(e.what()));
    return false;
  }
  m_base = base;
  m_points.clear();
  m_table->setRowCount(0);
  redraw();
  m_sweep = std::make_unique<core::Sweep>(options);
  m_running = true;
  m_run->setEnabled(false);
  m_stop->setEnabled(true);
  m_open->setEnabled(false);
  m_status->setText(m_command ? tr("Running your program…") : tr("Running Single (the baseline)…"));
  m_thread = std::thread([this] {
    QString error;
    try {
      m_sweep->run([this](const core::SweepPoint& p, int done, int total) {
        QMetaObject::invokeMethod(
            this, [this, p, done, total] { addPoint(p, done, total); }, Qt::QueuedConnection);
      });
    } catch (const std::exception& e) {
      error = QString::fromStdString(e.what());
    }
    QMetaObject::invokeMethod(
        this,
        [this, error] {
          m_running = false;
          m_run->setEnabled(true);
          m_stop->setEnabled(false);
          const int best = core::Sweep::fastest(m_points);
          m_open->setEnabled(best >= 0);
          if (!error.isEmpty())
            m_status->setText(error);
          else if (best >= 0)
            m_status->setText(tr("Fastest: %1 with %2 worker(s), %3 samples/s")
                                  .arg(QString::fromStdString(m_points[static_cast<std::size_t>(best)].strategy))
                                  .arg(m_points[static_cast<std::size_t>(best)].workers)
                                  .arg(readableNumber(m_points[static_cast<std::size_t>(best)].samplesPerS)));
          else if (stepsOnly())
            m_status->setText(
                tr("Your program reported no samples: the table and the chart give its steps/s; "
                   "report \"samples\" for samples/s and efficiency"));
          emit finished();
        },
        Qt::QueuedConnection);
  });
  emit started();
  return true;
}

void SweepPanel::stop() {
  if (m_sweep) m_sweep->requestStop();
}

void SweepPanel::openFastest() {
  const int best = core::Sweep::fastest(m_points);
  if (best < 0) return;
  const auto& p = m_points[static_cast<std::size_t>(best)];
  emit openProfile(core::Sweep::profileFor(m_base, p.strategy, p.workers, m_base.hyper.maxSteps));
}

void SweepPanel::addPoint(const core::SweepPoint& p, int done, int total) {
  m_points.push_back(p);
  m_status->setText(tr("%1 of %2 configurations done").arg(done).arg(total));
  redraw();
}

bool SweepPanel::stepsOnly() const {
  bool finished = false;
  for (const auto& p : m_points) {
    if (p.status != "finished") continue;
    if (p.samplesReported) return false;
    finished = true;
  }
  return finished;
}

void SweepPanel::redraw() {
  const int best = core::Sweep::fastest(m_points);
  m_table->setRowCount(static_cast<int>(m_points.size()));
  for (int row = 0; row < static_cast<int>(m_points.size()); ++row) {
    const auto& p = m_points[static_cast<std::size_t>(row)];
    const QString rate = !p.measured          ? tr("too short")
                         : !p.samplesReported ? tr("not reported")
                                              : readableNumber(p.samplesPerS);
    const QStringList cells = {QString::fromStdString(p.strategy),
                               QString::number(p.workers),
                               rate,
                               std::isnan(p.efficiency) ? tr("n/a") : QString::number(p.efficiency, 'f', 2),
                               p.measured ? readableNumber(p.stepsPerS) : tr("too short"),
                               QString::number(p.stepMs.stepMs, 'f', 3),
                               QString::number(p.stepMs.commPercent(), 'f', 1),
                               QString::fromStdString(p.status == "finished" ? p.status : p.status + ": " + p.message)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (row == best) {
        QFont f = item->font();
        f.setBold(true);
        item->setFont(f);
        item->setBackground(highlightColor());
      }
      m_table->setItem(row, c, item);
    }
  }
  for (auto* plot : {m_throughput, m_efficiency}) plot->clearGraphs();
  std::map<std::string, std::pair<QVector<double>, QVector<double>>> tput, eff;
  // A program that reports no samples is charted by its steps/s (Note [Sweeping a command]).
  const bool steps = stepsOnly();
  m_throughput->yAxis->setLabel(steps ? tr("steps/s (no samples reported)") : tr("samples/s"));
  for (const auto& p : m_points) {
    if (p.status != "finished") continue;
    const double rate = steps ? p.stepsPerS : p.samplesPerS;
    if (std::isfinite(rate)) {
      tput[p.strategy].first << p.workers;
      tput[p.strategy].second << rate;
    }
    if (std::isfinite(p.efficiency)) {
      eff[p.strategy].first << p.workers;
      eff[p.strategy].second << p.efficiency;
    }
  }
  for (auto [plot, data] : {std::make_pair(m_throughput, &tput), std::make_pair(m_efficiency, &eff)}) {
    for (const auto& [name, xy] : *data) {
      auto* g = plot->addGraph();
      g->setName(QString::fromStdString(name));
      g->setPen(QPen(strategyColor(name), 1.5));
      g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
      g->setData(xy.first, xy.second);
    }
    if (best >= 0 && plot == m_throughput) {  // the fastest configuration, ringed
      auto* mark = plot->addGraph();
      mark->setName(tr("fastest"));
      mark->setLineStyle(QCPGraph::lsNone);
      mark->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssStar, QPen(Qt::black, 2), Qt::NoBrush, 16));
      mark->setData({static_cast<double>(m_points[static_cast<std::size_t>(best)].workers)},
                    {m_points[static_cast<std::size_t>(best)].samplesPerS});
    }
    plot->rescaleAxes();
    plot->xAxis->setRange(plot->xAxis->range().lower - 0.5, plot->xAxis->range().upper + 0.5);
    plot->yAxis->setRangeLower(0);
    plot->yAxis->setRangeUpper(plot->yAxis->range().upper * 1.15 + 1e-9);
    plot->replot(QCustomPlot::rpQueuedReplot);
  }
}

}  // namespace ptw::ui
