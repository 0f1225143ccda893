// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/run_history.h"

#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QStackedWidget>
#include <QTableWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <cmath>
#include <map>

#include "common/error.h"
#include "common/strategies.h"
#include "launch/run_progress.h"
#include "ui/chart_format.h"
#include "ui/metric_chart.h"
#include "ui/palette.h"

namespace ptw::ui {

RunHistory::RunHistory(QWidget* parent)
    : QWidget(parent),
      m_table(new QTableWidget(this)),
      m_overlay(new MetricChart(tr("loss (mean over ranks)"), this)),
      m_diff(new QTableWidget(this)) {
  auto* layout = new QVBoxLayout(this);
  auto* split = new QSplitter(Qt::Vertical, this);
  m_table->setObjectName("runHistory");
  m_table->setColumnCount(9);
  m_table->setHorizontalHeaderLabels({tr("id"), tr("status"), tr("started (UTC)"), tr("strategy"), tr("world"),
                                      tr("final loss"), tr("samples/s"), tr("version"), tr("name")});
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->verticalHeader()->setVisible(false);
  connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, &RunHistory::showSelection);
  m_liveTimer = new QTimer(this);
  m_liveTimer->setInterval(2000);
  connect(m_liveTimer, &QTimer::timeout, this, &RunHistory::showLive);
  // A running run opens attached: its history, then live, in the Live tab.
  connect(m_table, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
    const qint64 id = m_table->item(row, 0) ? m_table->item(row, 0)->data(Qt::UserRole).toLongLong() : 0;
    for (const auto& r : m_runs)
      if (r.id == id && r.status == "running" && !core::supervisorGone(r)) emit attachRequested(r);
  });
  m_overlay->setObjectName("overlayChart");
  m_diff->setObjectName("profileDiff");
  m_diff->setEditTriggers(QAbstractItemView::NoEditTriggers);
  // The overlay is what a comparison is read from: it takes most of the tab, the list of
  // runs and the profiles' fields the rest.
  auto* bottom = new QSplitter(Qt::Horizontal, this);
  // Until a run is selected, a line that says how to fill the chart stands where empty axes would.
  m_overlayStack = new QStackedWidget(bottom);
  m_overlayHint = new QLabel(tr("Select a run in the list above to draw its loss here; select several to compare "
                                "them."),
                             m_overlayStack);
  m_overlayHint->setObjectName("overlayHint");
  m_overlayHint->setAlignment(Qt::AlignCenter);
  m_overlayHint->setWordWrap(true);
  m_overlayHint->setStyleSheet("color: palette(dark); font-size: 15pt");
  m_overlayStack->addWidget(m_overlayHint);
  m_overlayStack->addWidget(m_overlay);
  bottom->addWidget(m_overlayStack);
  bottom->addWidget(m_diff);
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 1);
  split->addWidget(m_table);
  split->addWidget(bottom);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 3);
  // The first sizes come from the panes' size hints, a chart's being tiny: give the shares
  // outright (a splitter scales them to its size).
  bottom->setSizes({3000, 1000});
  split->setSizes({1000, 3000});
  m_overlay->setMinimumSize(320, 240);
  layout->addWidget(new QLabel(tr("Select several runs to overlay their loss and compare their profiles."), this));
  layout->addWidget(split);
  auto* open = new QPushButton(tr("Open the selected run's profile"), this);
  open->setObjectName("openRunProfile");
  connect(open, &QPushButton::clicked, this, [this] {
    auto ids = selectedRuns();
    for (const auto& r : m_runs)
      if (!ids.empty() && r.id == ids.front()) emit openProfileRequested(QString::fromStdString(r.profileJson));
  });
  layout->addWidget(open);
}

RunHistory::~RunHistory() = default;

void RunHistory::showLive() {
  for (int row = 0; row < m_table->rowCount(); ++row) {
    auto* item = m_table->item(row, 1);
    if (!item) continue;
    const auto it = m_live.find(item->data(Qt::UserRole).toLongLong());
    if (it == m_live.end() || !it->second->poll() || it->second->step() < 0) continue;
    item->setText(
        tr("running: step %1, %2 steps/s").arg(it->second->step()).arg(readableNumber(it->second->stepsPerS(), 3)));
  }
  if (m_live.empty()) m_liveTimer->stop();
}

void RunHistory::setRunsDirectory(const QString& dir) {
  m_dir = dir;
  m_store.reset();
  reload();
}

void RunHistory::reload() {
  try {
    if (!m_store) m_store = std::make_unique<core::RunStore>(m_dir.toStdString());
    m_runs = m_store->runs();
  } catch (const Error&) {
    m_runs.clear();  // no store yet (no run so far) or unreadable: an empty history
  }
  const auto keep = selectedRuns();
  m_table->blockSignals(true);
  m_table->setRowCount(static_cast<int>(m_runs.size()));
  for (int row = 0; row < static_cast<int>(m_runs.size()); ++row) {
    const auto& r =
        m_runs[static_cast<std::size_t>(m_runs.size()) - 1 - static_cast<std::size_t>(row)];  // newest first
    auto num = [](double v, int prec) { return readableNumber(v, prec); };
    const QStringList cells = {QString::number(r.id),
                               QString::fromStdString(r.status),
                               QString::fromStdString(r.startedAt),
                               QString::fromStdString(r.strategy),
                               QString::number(r.world),
                               num(r.finalLoss, 6),
                               num(r.samplesPerS, 6),
                               r.ptwVersion.empty() ? QStringLiteral("-") : QString::fromStdString(r.ptwVersion),
                               QString::fromStdString(r.name)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setData(Qt::UserRole, static_cast<qlonglong>(r.id));
      if (c == 1 && (r.status == "failed" || r.status == "interrupted")) item->setForeground(failureColor());
      if (c == 1 && r.status == "running") item->setToolTip(tr("Double-click to follow it in the Live tab"));
      if (!r.message.empty()) item->setToolTip(QString::fromStdString(r.message));
      m_table->setItem(row, c, item);
    }
  }
  m_table->blockSignals(false);
  selectRuns(keep);
  // Running runs show where they are, every 2 s while any runs.
  std::map<qint64, std::unique_ptr<core::RunProgress>> live;
  for (const auto& r : m_runs) {
    if (r.status != "running" || core::supervisorGone(r)) continue;
    auto it = m_live.find(r.id);
    live[r.id] =
        it != m_live.end() ? std::move(it->second) : std::make_unique<core::RunProgress>(m_dir.toStdString(), r.id);
  }
  m_live = std::move(live);
  if (!m_live.empty()) {
    showLive();
    m_liveTimer->start();
  }
}

std::vector<qint64> RunHistory::selectedRuns() const {
  std::vector<qint64> ids;
  for (const auto& index : m_table->selectionModel()->selectedRows())
    ids.push_back(index.data(Qt::UserRole).toLongLong());
  std::sort(ids.begin(), ids.end());
  return ids;
}

void RunHistory::selectRuns(const std::vector<qint64>& ids) {
  m_table->clearSelection();
  for (int row = 0; row < m_table->rowCount(); ++row) {
    const qint64 id = m_table->item(row, 0)->data(Qt::UserRole).toLongLong();
    if (std::find(ids.begin(), ids.end(), id) != ids.end())
      m_table->selectionModel()->select(m_table->model()->index(row, 0),
                                        QItemSelectionModel::Select | QItemSelectionModel::Rows);
  }
  showSelection();
}

std::vector<core::StepRecord> RunHistory::steps(qint64 runId) {
  if (!m_store) return {};
  return m_store->steps(runId);
}

void RunHistory::showSelection() {
  const auto ids = selectedRuns();
  m_overlay->clear();
  std::vector<const core::RunRow*> chosen;
  for (const auto& r : m_runs)
    if (std::find(ids.begin(), ids.end(), r.id) != ids.end()) chosen.push_back(&r);
  // Overlay: the mean loss over ranks at each step (a coordinator, the pool's, already reports the mean).
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const auto& r = *chosen[i];
    int series = m_overlay->addSeries(QStringLiteral("run %1: %2").arg(r.id).arg(QString::fromStdString(r.name)),
                                      seriesColor(static_cast<int>(i)));
    std::map<std::int64_t, std::pair<double, int>> perStep;
    const core::StrategyInfo* info = core::findStoredStrategy(r.strategy);
    const bool coordinated = info && info->coordinator;
    for (const auto& s : steps(r.id)) {
      // A command run's program may report steps without a loss (samples/s alone).
      if ((coordinated && s.rank != 0) || !std::isfinite(s.loss)) continue;
      auto& acc = perStep[s.step];
      acc.first += s.loss;
      acc.second += 1;
    }
    for (const auto& [step, acc] : perStep)
      m_overlay->append(series, static_cast<double>(step), acc.first / acc.second);
  }
  m_overlay->fit();
  m_overlayStack->setCurrentWidget(chosen.empty() ? static_cast<QWidget*>(m_overlayHint) : m_overlay);
  // Profiles side by side; rows whose values differ are highlighted.
  m_differing.clear();
  m_diff->clear();
  m_diff->setColumnCount(static_cast<int>(chosen.size()) + 1);
  QStringList headers{tr("field")};
  std::vector<std::vector<std::pair<std::string, std::string>>> fields;
  for (const auto* r : chosen) {
    headers << tr("run %1").arg(r->id);
    std::vector<core::FieldError> ignored;
    fields.push_back(core::profileFields(core::parseProfileFields(r->profileJson, ignored)));
  }
  m_diff->setHorizontalHeaderLabels(headers);
  const int rows = fields.empty() ? 0 : static_cast<int>(fields.front().size());
  m_diff->setRowCount(rows);
  for (int row = 0; row < rows; ++row) {
    const QString path = QString::fromStdString(fields.front()[static_cast<std::size_t>(row)].first);
    bool differs = false;
    for (const auto& f : fields)
      differs =
          differs || f[static_cast<std::size_t>(row)].second != fields.front()[static_cast<std::size_t>(row)].second;
    if (differs) m_differing << path;
    auto* name = new QTableWidgetItem(path);
    m_diff->setItem(row, 0, name);
    for (std::size_t c = 0; c < fields.size(); ++c) {
      auto* item = new QTableWidgetItem(QString::fromStdString(fields[c][static_cast<std::size_t>(row)].second));
      m_diff->setItem(row, static_cast<int>(c) + 1, item);
    }
    if (differs)
      for (int c = 0; c <= static_cast<int>(fields.size()); ++c) m_diff->item(row, c)->setBackground(highlightColor());
  }
  m_diff->resizeColumnsToContents();
}

}  // namespace ptw::ui
