// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/main_window.h"

#include <qcustomplot.h>
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSlider>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableWidget>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <thread>

#include "common/command.h"
#include "common/error.h"
#include "common/strategies.h"
#include "common/version.h"
#include "launch/follow_source.h"
#include "launch/preflight.h"
#include "launch/run_directory.h"
#include "launch/run_store.h"
#include "launch/slurm_job.h"
#include "launch/stacks_file.h"
#include "ui/accuracy_panel.h"
#include "ui/attach_dialog.h"
#include "ui/chart_format.h"
#include "ui/device_picker.h"
#include "ui/loss_panel.h"
#include "ui/lr_panel.h"
#include "ui/metric_chart.h"
#include "ui/palette.h"
#include "ui/profile_editor.h"
#include "ui/rank_spread.h"
#include "ui/rank_table.h"
#include "ui/run_controller.h"
#include "ui/run_history.h"
#include "ui/scalar_charts.h"
#include "ui/stacks_pane.h"
#include "ui/step_heatmap.h"
#include "ui/step_split_chart.h"
#include "ui/sweep_panel.h"
#include "ui/throughput_panel.h"

namespace ptw::ui {
namespace {

constexpr std::size_t kMaxLogLines = 20000;
constexpr std::size_t kCatchUpRecords = 20000;  ///< a take of an attached run's history (Note [Redraw budget])
constexpr int kFirstPointMs = 50;               ///< how often records are taken until a rank's first point is drawn
constexpr int kDefaultSmoothing = 60;           ///< the loss chart's EMA weight in percent, TensorBoard's default
// How long Show Stacks waits for a running run's stacks: as long as `ptw stacks` does
// (core::requestRunStacks), above the supervisor's budget for taking them.
constexpr int kStacksWaitS = 20;

// What Start will run, in a line: "2 ranks of DDP on the CPU", from the strategy's description.
QString describeRun(const core::Profile& p) {
  const auto& s = p.strategy;
  const core::StrategyInfo* info = core::findStrategy(s.kind);
  if (!info) return QString::fromStdString(s.kind);
  const int gpus = core::trainingRanks(p);
  const QString where = s.device != "cuda" ? QObject::tr("on the CPU")
                        : gpus == 1        ? QObject::tr("on a GPU")
                                           : QObject::tr("on %1 GPUs").arg(gpus);
  const QString processes = s.ranks == 1 ? QObject::tr("one process") : QObject::tr("%1 processes").arg(s.ranks);
  return QString::fromStdString(info->description)
      .replace(QStringLiteral("{ranks}"), QString::number(s.ranks))
      .replace(QStringLiteral("{processes}"), processes)
      .replace(QStringLiteral("{pool_mode}"), QString::fromStdString(s.poolMode))
      .replace(QStringLiteral("{where}"), where);
}

// Whether the stacks file at `path` was taken for a rank that is behind (a stall, a timeout).
bool namesARank(const QString& path) {
  if (path.isEmpty()) return false;
  try {
    return core::readStacksFile(path.toStdString()).behind >= 0;
  } catch (const Error&) {
    return false;
  }
}

// The calling thread's CPU time in milliseconds.
double threadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

}  // namespace

// Note [Live panels]
// Each part of the live view (the loss, throughput, step-split, accuracy and learning-rate
// charts, the named scalars and the rank table) is a LivePanel, in m_panels: the window
// hands each of them the run, the records, a restart, a redraw and View > Fit Charts, and
// none of it knows what a panel draws. Each reads the store for zoomed-in ranges through the
// window (a LiveStore), which knows the current run. A new chart is a LivePanel class and the
// line that lays it out with addPanel(). The window keeps typed pointers only where it sets a
// panel's options (the smoothing) or reads it (the rank table's progress, the loss chart's PNG).

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), m_controller(new RunController(this)) {
  buildUi();
  buildMenus();
  m_drainTimer = new QTimer(this);
  m_drainTimer->setTimerType(Qt::PreciseTimer);  // a coarse timer fires up to 5% early
  m_drainTimer->setInterval(kFirstPointMs);      // then as often as the charts are redrawn (Note [Redraw budget])
  connect(m_drainTimer, &QTimer::timeout, this, &MainWindow::drainRun);
  m_redrawSoon = new QTimer(this);
  m_redrawSoon->setSingleShot(true);
  m_redrawSoon->setTimerType(Qt::PreciseTimer);
  connect(m_redrawSoon, &QTimer::timeout, this, [this] {
    if (m_controller->isRunning() && !m_chartsPaused) drainRun();
  });
  connect(m_controller, &RunController::recordsArrived, this, &MainWindow::takeArrived);
  connect(m_controller, &RunController::started, this,
          [this](int) { m_status->setText(tr("Running %1 series…").arg(m_reportingRanks)); });
  connect(m_controller, &RunController::storing, this, [this](qint64 done, qint64 total) {
    m_status->setText(tr("All processes ended; storing step records in chunks: %L1 of %L2 (%3%)…")
                          .arg(done)
                          .arg(total)
                          .arg(total > 0 ? 100 * done / total : 100));
  });
  connect(m_controller, &RunController::finished, this, &MainWindow::onFinished);
  connect(m_controller, &RunController::connection, this, &MainWindow::onConnection);
  connect(m_controller, &RunController::attachFailed, this, [this](const QString& message) {
    m_drainTimer->stop();
    m_editor->devicePicker()->setProbeHeld(m_sweep->isRunning());
    m_lastStatus = QStringLiteral("not attached");
    revalidate();
    showProblem(message);
  });
  connect(m_controller, &RunController::stopFailed, this, &MainWindow::showProblem);
  connect(m_editor, &ProfileEditor::edited, this, [this] {
    revalidate();
    updateTitle();
  });
  setRunsDirectory(QString());
  m_savedProfile = m_editor->profile();
  revalidate();
  updateTitle();
  QSettings settings;
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
  m_stacksPane->hide();  // its place is kept; it shows a run's stacks only when asked or stalled
  restoreView(settings);
  m_stacksTimer = new QTimer(this);
  m_stacksTimer->setInterval(100);
  connect(m_stacksTimer, &QTimer::timeout, this, &MainWindow::pollStacks);
}

namespace {
// What the user sets up in the window and expects back next time, by object name: the loss
// chart's options, the splitters, the tab, the sweep's choices (window/ holds the geometry
// and the docks). The profile's own fields are the profile's, not the view's.
// The property that holds a widget's state, or nullptr (a splitter's is its saveState()).
const char* stateProperty(const QWidget* w) {
  if (qobject_cast<const QSlider*>(w) || qobject_cast<const QSpinBox*>(w)) return "value";
  if (qobject_cast<const QCheckBox*>(w)) return "checked";
  if (qobject_cast<const QLineEdit*>(w)) return "text";
  if (qobject_cast<const QTabWidget*>(w)) return "currentIndex";
  return nullptr;
}

bool keptInView(const QWidget* w) {
  static const QStringList names = {"smoothing", "logX", "logY", "outliers", "tabs", "liveSplit", "bottomSplit"};
  const QString name = w->objectName();
  return names.contains(name) || (name.startsWith("sweep.") && stateProperty(w));
}
}  // namespace

void MainWindow::saveView(QSettings& settings) const {
  for (auto* w : findChildren<QWidget*>()) {
    if (!keptInView(w)) continue;
    const QString key = "view/" + w->objectName();
    if (auto* split = qobject_cast<QSplitter*>(w))
      settings.setValue(key, split->saveState());
    else
      settings.setValue(key, w->property(stateProperty(w)));
  }
}

void MainWindow::restoreView(const QSettings& settings) {
  for (auto* w : findChildren<QWidget*>()) {
    const QString key = "view/" + w->objectName();
    if (!keptInView(w) || !settings.contains(key)) continue;
    if (auto* split = qobject_cast<QSplitter*>(w))
      split->restoreState(settings.value(key).toByteArray());
    else
      w->setProperty(stateProperty(w), settings.value(key));
  }
  if (!m_tabs->isTabVisible(m_tabs->currentIndex())) m_tabs->setCurrentIndex(0);  // Scalars, before a run has any
}

MainWindow::~MainWindow() = default;

void MainWindow::fitProfileWidth() {
  m_profileScroll->setMinimumWidth(m_editor->minimumSizeHint().width() +
                                   m_profileScroll->verticalScrollBar()->sizeHint().width() +
                                   2 * m_profileScroll->frameWidth());
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_editor && event->type() == QEvent::LayoutRequest)
    QTimer::singleShot(0, this, &MainWindow::fitProfileWidth);
  return QMainWindow::eventFilter(watched, event);
}

void MainWindow::buildUi() {
  buildProfileDock();
  auto* tabs = new QTabWidget(this);
  tabs->setObjectName("tabs");
  m_tabs = tabs;
  tabs->addTab(buildLiveTab(tabs), tr("&Live"));
  // A run's named scalars get a tab of their own beside Live, shown once one arrives, so
  // that a run without them (every run of ptw's own engine) has nothing more to look at.
  m_scalars = addPanel(new ScalarCharts(tabs));
  m_scalars->setObjectName("scalarCharts");
  tabs->addTab(m_scalars, tr("S&calars"));
  tabs->setTabVisible(tabs->indexOf(m_scalars), false);
  connect(m_scalars, &ScalarCharts::chartAdded, this, [this] {
    m_tabs->setTabText(m_tabs->indexOf(m_scalars), tr("S&calars (%1)").arg(m_scalars->count()));
    m_tabs->setTabVisible(m_tabs->indexOf(m_scalars), true);
    m_forceRedraw = true;
  });
  connect(m_scalars, &ScalarCharts::tooMany, this, [this](const QString& name) {
    appendLog(-1, tr("ptw: more than %1 named scalars; \"%2\" and later ones are stored but not charted")
                      .arg(ScalarCharts::kMaxCharts)
                      .arg(name));
  });
  buildHistoryTabs(tabs);
  setCentralWidget(tabs);
  m_stacksPane = new StacksPane(this);
  addDockWidget(Qt::BottomDockWidgetArea, m_stacksPane);
  statusBar();
  resize(1400, 900);
}

// Left: the profile, Start/Stop and the status.
void MainWindow::buildProfileDock() {
  auto* dock = new QDockWidget(tr("Profile"), this);
  dock->setObjectName("profileDock");
  auto* side = new QWidget(dock);
  auto* sideLayout = new QVBoxLayout(side);
  auto* buttons = new QHBoxLayout;
  m_start = new QPushButton(tr("Start"), side);
  m_start->setObjectName("start");
  m_stop = new QPushButton(tr("Stop"), side);
  m_stop->setObjectName("stop");
  m_stop->setEnabled(false);
  m_stop->setToolTip(tr("Stop gracefully: ranks finish their step and checkpoint (Shift+F5)"));
  buttons->addWidget(m_start);
  buttons->addWidget(m_stop);
  sideLayout->addLayout(buttons);
  m_status = new QLabel(side);
  m_status->setObjectName("status");
  m_status->setWordWrap(true);
  sideLayout->addWidget(m_status);
  m_editor = new ProfileEditor(side);
  auto* scroll = new QScrollArea(side);
  scroll->setWidget(m_editor);
  scroll->setWidgetResizable(true);
  // The fields fit across: the panel is as wide as the form needs and only scrolls down,
  // also once the devices are listed or a field is shown (eventFilter).
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_profileScroll = scroll;
  m_editor->installEventFilter(this);
  fitProfileWidth();
  sideLayout->addWidget(scroll, 1);
  dock->setWidget(side);
  dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
  addDockWidget(Qt::LeftDockWidgetArea, dock);
  connect(m_start, &QPushButton::clicked, this, &MainWindow::startRun);
  connect(m_stop, &QPushButton::clicked, this, &MainWindow::stopRun);
}

// The live view: the charts above, the rank table and the log below.
QWidget* MainWindow::buildLiveTab(QWidget* parent) {
  auto* live = new QSplitter(Qt::Vertical, parent);
  live->setObjectName("liveSplit");
  // Before the first run the chart area says what Start will do instead of showing empty axes.
  m_chartStack = new QStackedWidget(live);
  m_chartStack->setObjectName("chartStack");
  m_firstRunHint = new QLabel(m_chartStack);
  m_firstRunHint->setObjectName("firstRunHint");
  m_firstRunHint->setAlignment(Qt::AlignCenter);
  m_firstRunHint->setWordWrap(true);
  m_firstRunHint->setStyleSheet("color: palette(dark); font-size: 15pt");
  m_chartStack->addWidget(m_firstRunHint);
  auto* chartPage = new QWidget(m_chartStack);
  m_chartStack->addWidget(chartPage);
  auto* pageLayout = new QVBoxLayout(chartPage);
  pageLayout->setContentsMargins(0, 0, 0, 0);
  // Note [Stragglers]: the ranks named slow, above the charts, for as long as the run lasts.
  m_stragglerBanner = new QLabel(chartPage);
  m_stragglerBanner->setObjectName("stragglerBanner");
  m_stragglerBanner->setWordWrap(true);
  m_stragglerBanner->setStyleSheet(
      QStringLiteral("background: %1; padding: 4px; border-radius: 3px").arg(highlightColor().name()));
  m_stragglerBanner->hide();
  pageLayout->addWidget(m_stragglerBanner);
  auto* charts = new QWidget(chartPage);
  pageLayout->addWidget(charts, 1);
  auto* grid = m_chartGrid = new QGridLayout(charts);
  grid->addWidget(buildLossBox(charts), 0, 0, 2, 1);
  grid->addWidget(m_throughput = addPanel(new ThroughputPanel(charts)), 0, 1);
  grid->addWidget(m_split = addPanel(new StepSplitChart(charts)), 1, 1);
  // Validation accuracy and the learning rate, smaller, below: what an image model's user
  // watches besides the loss.
  grid->addWidget(m_accuracy = addPanel(new AccuracyPanel(charts)), 2, 0);
  grid->addWidget(m_lr = addPanel(new LrPanel(charts)), 2, 1);
  m_throughput->setObjectName("throughputChart");
  m_split->setObjectName("splitChart");
  m_accuracy->setObjectName("accuracyStack");
  m_lr->setObjectName("lrChart");
  // Above kAggregateAbove ranks, a line per rank gives way to step time by rank and step.
  grid->addWidget(m_heatmap = addPanel(new StepHeatmap(charts)), 3, 0, 1, 2);
  m_heatmap->setObjectName("heatmap");
  m_heatmap->hide();
  grid->setColumnStretch(0, 3);
  grid->setColumnStretch(1, 2);
  grid->setRowStretch(0, 3);
  grid->setRowStretch(1, 3);
  grid->setRowStretch(2, 2);  // row 3, the heatmap's, takes room only when shown (resetLive)
  // Set once both charts they apply to exist: the live charts' defaults (a saved value,
  // restored later, wins).
  charts->findChild<QCheckBox*>("outliers")->setChecked(true);
  m_smoothing->setValue(kDefaultSmoothing);
  auto* bottom = new QSplitter(Qt::Horizontal, live);
  bottom->setObjectName("bottomSplit");
  buildRankPane(bottom);
  buildLogPane(bottom);
  // The table's columns take twice the width of the log.
  bottom->setStretchFactor(0, 2);
  bottom->setStretchFactor(1, 1);
  live->addWidget(m_chartStack);
  live->addWidget(bottom);
  live->setStretchFactor(0, 3);
  live->setStretchFactor(1, 1);
  return live;
}

// The rank table, with its filter and grouping above it.
QWidget* MainWindow::buildRankPane(QWidget* parent) {
  auto* pane = new QWidget(parent);
  auto* layout = new QVBoxLayout(pane);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* tools = new QHBoxLayout;
  auto* filter = new QLineEdit(pane);
  filter->setObjectName("rankFilter");
  filter->setPlaceholderText(tr("Filter ranks: a rank, a host, a status, \"straggler\", \"outlier\"…"));
  filter->setClearButtonEnabled(true);
  auto* grouped = new QCheckBox(tr("group by host"), pane);
  grouped->setObjectName("groupByHost");
  tools->addWidget(filter, 1);
  tools->addWidget(grouped);
  layout->addLayout(tools);
  m_rankTable = addPanel(new RankTable(pane));
  m_rankTable->setObjectName("rankTable");
  layout->addWidget(m_rankTable, 1);
  connect(filter, &QLineEdit::textChanged, m_rankTable, &RankTable::setFilter);
  connect(grouped, &QCheckBox::toggled, m_rankTable, &RankTable::setGroupedByHost);
  // A rank's first point is drawn at once (Note [Redraw budget]); above kAggregateAbove ranks
  // no line is a rank's, so only the run's first step is.
  connect(m_controller, &RunController::hosts, m_rankTable, &RankTable::setHosts);
  connect(m_rankTable, &RankTable::firstStep, this, [this] {
    if (m_reportingRanks <= kAggregateAbove || !m_firstStepDrawn) m_forceRedraw = true;
    m_firstStepDrawn = true;
  });
  connect(m_rankTable, &QTableWidget::itemSelectionChanged, this, [this] {
    auto rows = m_rankTable->selectionModel()->selectedRows();
    const int rank = rows.isEmpty() ? -1 : m_rankTable->rankAt(rows.front().row());
    // Above kAggregateAbove ranks the charts' series are no rank's.
    const int series = m_reportingRanks > kAggregateAbove ? -1 : rank;
    for (MetricChart* chart : optionCharts()) chart->setHighlighted(series);
    m_scalars->setHighlighted(series);
  });
  return pane;
}

void MainWindow::markOutliers() {
  std::map<int, QString> outliers;
  for (int r : m_throughput->standouts()) outliers[r] = tr("samples/s");
  for (int r : m_loss->standouts()) outliers[r] = outliers.count(r) ? outliers[r] + tr(", loss") : tr("loss");
  m_rankTable->setOutliers(outliers);
}

// The loss chart with its options: smoothing, log axes, outliers, pause.
QWidget* MainWindow::buildLossBox(QWidget* charts) {
  auto* lossBox = new QWidget(charts);
  auto* lossLayout = new QVBoxLayout(lossBox);
  lossLayout->setContentsMargins(0, 0, 0, 0);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Smoothing"), lossBox));
  m_smoothing = new QSlider(Qt::Horizontal, lossBox);
  m_smoothing->setObjectName("smoothing");
  m_smoothing->setRange(0, 99);
  m_smoothing->setToolTip(
      tr("Exponential moving average weight (bias-corrected) of the loss, the throughput and the named "
         "scalars; the raw series stays faint behind"));
  controls->addWidget(m_smoothing, 1);
  m_logX = new QCheckBox(tr("log x"), lossBox);
  m_logX->setObjectName("logX");
  m_logY = new QCheckBox(tr("log y"), lossBox);
  m_logY->setObjectName("logY");
  auto* outliers = new QCheckBox(tr("ignore outliers"), lossBox);
  outliers->setObjectName("outliers");
  outliers->setToolTip(
      tr("Fit the y axes to the 5th-95th percentile of what is shown, so that a few early or "
         "stray values do not flatten the rest; they run off the chart. Smoothed, the axes fit "
         "the smoothed curves"));
  controls->addWidget(m_logX);
  controls->addWidget(m_logY);
  controls->addWidget(outliers);
  m_pauseButton = new QToolButton(lossBox);  // its action comes with the menus
  m_pauseButton->setObjectName("pauseCharts");
  controls->addWidget(m_pauseButton);
  lossLayout->addLayout(controls);
  lossLayout->addWidget(m_loss = addPanel(new LossPanel(lossBox)), 1);
  m_loss->setObjectName("lossChart");
  connect(m_smoothing, &QSlider::valueChanged, this, [this](int v) {
    for (MetricChart* chart : optionCharts()) {
      chart->setSmoothing(v / 100.0);
      chart->refresh();
    }
    if (m_scalars) m_scalars->setSmoothing(v / 100.0);
  });
  connect(m_logX, &QCheckBox::toggled, this, [this](bool on) { m_loss->setLogX(on); });
  connect(m_logY, &QCheckBox::toggled, this, [this](bool on) { m_loss->setLogY(on); });
  connect(outliers, &QCheckBox::toggled, this, [this](bool on) {
    for (MetricChart* chart : optionCharts()) chart->setIgnoreOutliers(on);
    if (m_scalars) m_scalars->setIgnoreOutliers(on);
  });
  return lossBox;
}

MetricChart* MainWindow::lossChart() const { return m_loss; }
MetricChart* MainWindow::throughputChart() const { return m_throughput; }
MetricChart* MainWindow::accuracyChart() const { return m_accuracy->chart(); }
QLabel* MainWindow::accuracyNote() const { return m_accuracy->note(); }
MetricChart* MainWindow::lrChart() const { return m_lr; }
QTableWidget* MainWindow::rankTable() const { return m_rankTable; }
std::array<MetricChart*, 2> MainWindow::optionCharts() const { return {m_loss, m_throughput}; }

void MainWindow::buildLogPane(QWidget* parent) {
  auto* logBox = new QWidget(parent);
  auto* logLayout = new QVBoxLayout(logBox);
  logLayout->setContentsMargins(0, 0, 0, 0);
  auto* filters = new QHBoxLayout;
  m_logRank = new QComboBox(logBox);
  m_logRank->setObjectName("logRank");
  m_logLevel = new QComboBox(logBox);
  m_logLevel->setObjectName("logLevel");
  m_logLevel->addItem(tr("all lines"), 0);
  m_logLevel->addItem(tr("warnings and errors"), 1);
  m_logLevel->addItem(tr("errors"), 2);
  filters->addWidget(new QLabel(tr("Log:"), logBox));
  filters->addWidget(m_logRank);
  filters->addWidget(m_logLevel);
  filters->addStretch(1);
  logLayout->addLayout(filters);
  // The ranks' warnings and errors first, above the log, whatever its filter says.
  m_problems = new QPlainTextEdit(logBox);
  m_problems->setObjectName("logProblems");
  m_problems->setReadOnly(true);
  m_problems->setMaximumBlockCount(200);
  m_problems->setMaximumHeight(5 * fontMetrics().lineSpacing() + 8);
  m_problems->setStyleSheet(QStringLiteral("color: %1").arg(failureColor().name()));
  m_problems->setToolTip(tr("The ranks' warnings and errors; the log below has every line"));
  m_problems->hide();
  logLayout->addWidget(m_problems);
  m_log = new QPlainTextEdit(logBox);
  m_log->setObjectName("log");
  m_log->setPlaceholderText(tr("The ranks' log appears here during a run; their warnings and errors above it."));
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(static_cast<int>(kMaxLogLines));
  logLayout->addWidget(m_log);
  connect(m_logRank, qOverload<int>(&QComboBox::currentIndexChanged), this, &MainWindow::refilterLog);
  connect(m_logLevel, qOverload<int>(&QComboBox::currentIndexChanged), this, &MainWindow::refilterLog);
}

// The run history and the scaling sweep.
void MainWindow::buildHistoryTabs(QTabWidget* tabs) {
  m_history = new RunHistory(tabs);
  m_history->setObjectName("history");
  tabs->addTab(m_history, tr("&Runs"));
  connect(m_history, &RunHistory::attachRequested, this, [this](const core::RunRow& run) {
    attachRun(m_runsDir.isEmpty() ? QString::fromStdString(core::defaultRunsDirectory()) : m_runsDir, run);
    m_tabs->setCurrentIndex(0);  // the Live tab
  });
  connect(m_history, &RunHistory::openProfileRequested, this, [this](const QString& json) {
    try {
      replaceProfile(core::parseProfile(json.toStdString(), "run profile"), tr("Opened the run's profile"));
    } catch (const Error& e) {
      warn(tr("Cannot open the run's profile"), QString::fromStdString(e.what()));
    }
  });
  m_sweep = new SweepPanel(tabs);
  m_sweep->setObjectName("sweep");
  m_sweep->setProfileSource([this] { return profile(); });
  tabs->addTab(m_sweep, tr("&Scaling Sweep"));
  connect(m_sweep, &SweepPanel::openProfile, this, [this](const core::Profile& p) {
    replaceProfile(p, tr("Opened the sweep's fastest configuration as the profile"));
  });
  // A run and a sweep would share the cores and skew each other's figures: one at a time.
  m_sweep->setBusyReason(
      [this] { return m_controller->isRunning() ? tr("A run is in progress; stop it before sweeping.") : QString(); });
  connect(m_sweep, &SweepPanel::started, this, [this] {
    m_editor->devicePicker()->setProbeHeld(true);  // Note [Device probe waits for runs]
    revalidate();
  });
  connect(m_sweep, &SweepPanel::finished, this, [this] {
    m_editor->devicePicker()->setProbeHeld(m_controller->isRunning());
    m_history->reload();
    revalidate();
    if (m_closeAfterRun) QTimer::singleShot(0, this, &QWidget::close);
  });
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&New Profile"), QKeySequence::New, this, &MainWindow::newProfile);
  file->addAction(tr("&Open Profile…"), QKeySequence::Open, this, [this] {
    if (!changesMayBeDiscarded()) return;
    QString path = QFileDialog::getOpenFileName(this, tr("Open profile"), QFileInfo(m_path).absolutePath(),
                                                tr("ptw profiles (*.json);;All files (*)"));
    QString error;
    if (!path.isEmpty() && !openProfile(path, &error)) warn(tr("Cannot open profile"), error);
  });
  m_recentMenu = file->addMenu(tr("Open &Recent"));
  updateRecentMenu();
  auto saveAs = [this] {
    QString path = QFileDialog::getSaveFileName(this, tr("Save profile"), m_path, tr("ptw profiles (*.json)"));
    QString error;
    if (!path.isEmpty() && !saveProfile(path, &error)) warn(tr("Cannot save profile"), error);
  };
  file->addAction(tr("&Save Profile"), QKeySequence::Save, this, [this, saveAs] {
    QString error;
    if (m_path.isEmpty())
      saveAs();
    else if (!saveProfile(m_path, &error))
      warn(tr("Cannot save profile"), error);
  });
  file->addAction(tr("Save Profile &As…"), QKeySequence::SaveAs, this, saveAs);
  file->addSeparator();
  // Ctrl+Shift+E: Ctrl+E is a text field's end of line, and the profile's fields have the focus.
  file->addAction(tr("Export Loss Chart as &PNG…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E), this, [this] {
    QString path = QFileDialog::getSaveFileName(this, tr("Export chart"), QString(), tr("PNG images (*.png)"));
    if (!path.isEmpty() && !m_loss->plot()->savePng(path, 0, 0, 2.0))
      warn(tr("Cannot export"), tr("Could not write %1").arg(path));
  });
  file->addAction(tr("Export Run as &CSV…"), this, [this] {
    auto ids = m_history->selectedRuns();
    const qint64 id = !ids.empty() ? ids.front() : m_controller->runId();
    if (id <= 0) {
      ask(QMessageBox::Information, tr("Export run"), tr("Select a run in the Runs tab, or start one."),
          QMessageBox::Ok);
      return;
    }
    QString path = QFileDialog::getSaveFileName(this, tr("Export run %1").arg(id), QStringLiteral("run%1.csv").arg(id),
                                                tr("CSV files (*.csv)"));
    if (path.isEmpty()) return;
    try {
      core::RunStore store(m_runsDir.isEmpty() ? core::defaultRunsDirectory() : m_runsDir.toStdString());
      store.exportCsv(id, path.toStdString());
      statusBar()->showMessage(tr("Exported run %1 to %2").arg(id).arg(path), 5000);
    } catch (const Error& e) {
      warn(tr("Cannot export"), QString::fromStdString(e.what()));
    }
  });
  file->addSeparator();
  file->addAction(tr("A&ttach to Run…"), this, &MainWindow::showAttachDialog)->setObjectName("attachAction");
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  QMenu* run = menuBar()->addMenu(tr("&Run"));
  m_startAction = run->addAction(tr("&Start"), QKeySequence(Qt::Key_F5), this, &MainWindow::startRun);
  m_submitAction = run->addAction(tr("Su&bmit to SLURM"), this, &MainWindow::submitRun);
  m_submitAction->setObjectName("submitAction");
  m_stopAction = run->addAction(tr("S&top"), QKeySequence(Qt::SHIFT | Qt::Key_F5), this, &MainWindow::stopRun);
  m_stopAction->setEnabled(false);
  run->addAction(tr("&Check Workload"), QKeySequence(Qt::CTRL | Qt::Key_K), m_editor, &ProfileEditor::runPreflight);
  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Fit Charts"), QKeySequence(Qt::CTRL | Qt::Key_0), this, [this] {
    for (LivePanel* panel : m_panels) panel->fit();
  });
  m_pauseAction = view->addAction(tr("&Pause Live Charts"));
  m_pauseAction->setCheckable(true);
  m_pauseAction->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
  m_pauseAction->setEnabled(false);
  m_pauseAction->setIconText(tr("Pause charts"));
  m_pauseAction->setToolTip(
      tr("Freeze the charts, the rank table and the log while the run goes on; every record is "
         "still stored (Ctrl+Shift+P)"));
  connect(m_pauseAction, &QAction::toggled, this, &MainWindow::setChartsPaused);
  m_pauseButton->setDefaultAction(m_pauseAction);
  // Ctrl+Shift+K: Ctrl+K checks the workload.
  m_stacksAction = view->addAction(tr("Show &Stacks"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_K), this,
                                   &MainWindow::showStacks);
  m_stacksAction->setObjectName("showStacksAction");
  m_stacksAction->setToolTip(
      tr("Every rank's frames: taken now from a running run, or those the last run took when a rank stalled "
         "(Ctrl+Shift+K)"));
  m_rankTable->addAction(m_stacksAction);
  m_rankTable->setContextMenuPolicy(Qt::ActionsContextMenu);
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About ptw"), this, &MainWindow::showAbout)->setObjectName("aboutAction");
}

void MainWindow::showAbout() {
  // Not modal to the application (open(), not exec()), so a run's charts go on drawing behind it.
  auto* box = new QMessageBox(QMessageBox::NoIcon, tr("About ptw"), QString(), QMessageBox::Ok, this);
  box->setObjectName("aboutBox");
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setIconPixmap(windowIcon().pixmap(64, 64));
  box->setTextFormat(Qt::RichText);
  box->setText(tr("<h3>ptw %1</h3><p>Parallel Training Workbench: configure, launch and watch data-parallel "
                  "training on the machine in front of you.</p><p>Built with Qt %2 (running on Qt %3).</p>"
                  "<p>Free software under the GNU General Public License, version 3 or later.</p>")
                   .arg(QString::fromUtf8(kVersion), QStringLiteral(QT_VERSION_STR), QString::fromUtf8(qVersion())));
  box->open();
}

core::Profile MainWindow::profile() const { return m_editor->profile(); }

void MainWindow::setProfile(const core::Profile& profile) {
  m_editor->setProfile(profile);
  revalidate();
  updateTitle();
}

QMessageBox::StandardButton MainWindow::ask(QMessageBox::Icon icon, const QString& title, const QString& text,
                                            QMessageBox::StandardButtons buttons) {
  if (m_ask) return m_ask(icon, title, text, buttons);
  QMessageBox box(icon, title, text, buttons, this);
  return static_cast<QMessageBox::StandardButton>(box.exec());
}

bool MainWindow::changesMayBeDiscarded() {
  return !m_confirm || profile() == m_savedProfile ||
         ask(QMessageBox::Question, tr("Discard changes?"), tr("The profile has unsaved changes. Discard them?"),
             QMessageBox::Yes | QMessageBox::No) == QMessageBox::Yes;
}

bool MainWindow::replaceProfile(const core::Profile& p, const QString& message) {
  if (!changesMayBeDiscarded()) return false;
  setProfile(p);
  m_path.clear();
  updateTitle();
  statusBar()->showMessage(message, 5000);
  return true;
}

void MainWindow::newProfile() {
  if (!changesMayBeDiscarded()) return;
  m_path.clear();
  setProfile(core::defaultProfile());
  m_savedProfile = profile();
  updateTitle();
}

void MainWindow::setRunsDirectory(const QString& dir) {
  m_runsDir = dir;
  m_reader.reset();
  m_sweep->setRunsDirectory(dir);
  m_history->setRunsDirectory(dir.isEmpty() ? QString::fromStdString(core::defaultRunsDirectory()) : dir);
}

// Zoomed into the past of a live run: real points come back from the store.
core::RunStore* MainWindow::reader() {
  if (m_controller->runId() <= 0) return nullptr;
  if (!m_reader)
    m_reader =
        std::make_unique<core::RunStore>(m_runsDir.isEmpty() ? core::defaultRunsDirectory() : m_runsDir.toStdString());
  return m_reader.get();
}

std::vector<std::pair<double, double>> MainWindow::series(int series, const std::string& column, double x0, double x1) {
  if (series >= m_reportingRanks) return {};
  try {
    core::RunStore* store = reader();
    return store ? store->series(m_controller->runId(), series, column, x0, x1)
                 : std::vector<std::pair<double, double>>{};
  } catch (const Error&) {
    return {};
  }
}

std::vector<core::ValidationRow> MainWindow::validation() {
  try {
    core::RunStore* store = reader();
    return store ? store->validation(m_controller->runId()) : std::vector<core::ValidationRow>{};
  } catch (const Error&) {
    return {};
  }
}

void MainWindow::revalidate() {
  const auto& errors = m_editor->errors();
  m_blockingReason.clear();
  for (const auto& e : errors)
    m_blockingReason += (m_blockingReason.isEmpty() ? "" : "\n") + QString::fromStdString(e.text());
  const bool running = m_controller->isRunning(), sweeping = m_sweep->isRunning();
  m_start->setEnabled(errors.empty() && !running && !sweeping);
  m_start->setToolTip(!m_blockingReason.isEmpty() ? m_blockingReason
                      : sweeping                  ? tr("A scaling sweep is running; stop it before starting a run.")
                                                  : tr("Start the run (F5)"));
  m_stop->setEnabled(running);
  if (m_startAction) m_startAction->setEnabled(m_start->isEnabled());
  if (m_stopAction) m_stopAction->setEnabled(running);
  if (m_submitAction) m_submitAction->setEnabled(m_start->isEnabled() && m_editor->profile().hosts.launcher == "slurm");
  if (m_pauseAction) m_pauseAction->setEnabled(running);
  // Too many ranks for the cores is said before Start, where the ranks are set; the run may go on.
  const core::Profile p = profile();
  m_sweep->showProfile(p);  // a command profile's sweep offers its process counts alone
  const QString cores = errors.empty() ? QString::fromStdString(core::coresWarning(p)) : QString();
  if (!running && !m_closeAfterRun)
    m_status->setText(sweeping ? m_start->toolTip() : !m_blockingReason.isEmpty() ? m_blockingReason : cores);
  if (m_chartStack->currentIndex() == 0) {
    const QString steps = p.hyper.maxSteps > 0 ? tr("%1 steps").arg(readableNumber(double(p.hyper.maxSteps)))
                                               : tr("%1 epochs").arg(p.hyper.epochs);
    QString what = tr("%1 model on %2 data, %3")
                       .arg(QString::fromStdString(p.model.kind), QString::fromStdString(p.data.kind), steps);
    if (errors.empty() && core::strategyOf(p).runsCommand) {
      // The command line as each process gets it, templates replaced.
      QStringList line;
      for (const auto& arg : core::commandLine(p)) line << QString::fromStdString(arg);
      what = line.join(' ');
    }
    m_firstRunHint->setText(errors.empty() ? tr("Start (F5) runs this profile: %1\n%2").arg(describeRun(p), what) +
                                                 (cores.isEmpty() ? QString() : QStringLiteral("\n") + cores)
                                           : tr("Fix the marked fields of the profile, then Start (F5) runs it."));
  }
}

void MainWindow::updateTitle() {
  const QString name = m_path.isEmpty() ? tr("untitled") : QFileInfo(m_path).fileName();
  setWindowTitle(QStringLiteral("%1[*] — ptw").arg(name));
  setWindowModified(profile() != m_savedProfile);
}

void MainWindow::markSaved(const QString& path) {
  m_path = path;
  m_savedProfile = profile();
  addRecent(path);
  updateTitle();
}

QStringList MainWindow::recentFiles() const { return QSettings().value("recentFiles").toStringList(); }

void MainWindow::addRecent(const QString& path) {
  QStringList recent = recentFiles();
  const QString abs = QFileInfo(path).absoluteFilePath();
  recent.removeAll(abs);
  recent.prepend(abs);
  while (recent.size() > 10) recent.removeLast();
  setRecentFiles(recent);
}

void MainWindow::setRecentFiles(const QStringList& recent) {
  QSettings().setValue("recentFiles", recent);
  updateRecentMenu();
}

void MainWindow::updateRecentMenu() {
  // The list changes from inside one of its own actions (opening a recent file moves it to
  // the top): the old actions go once that has returned, not under it.
  for (QAction* a : m_recentMenu->actions()) {
    m_recentMenu->removeAction(a);
    a->deleteLater();
  }
  const QStringList recent = recentFiles();
  for (const QString& path : recent) {
    m_recentMenu->addAction(path, this, [this, path] {
      if (!changesMayBeDiscarded()) return;
      QString error;
      if (openProfile(path, &error)) return;
      if (!QFileInfo::exists(path)) {  // moved or deleted since: it leaves the list
        QStringList recent = recentFiles();
        recent.removeAll(path);
        setRecentFiles(recent);
        error += tr("\n\nIt is no longer listed under Open Recent.");
      }
      warn(tr("Cannot open profile"), error);
    });
  }
  m_recentMenu->setEnabled(!recent.isEmpty());
}

bool MainWindow::openProfile(const QString& path, QString* error) {
  try {
    setProfile(core::loadProfile(path.toStdString()));
    markSaved(path);
    statusBar()->showMessage(tr("Opened %1").arg(path), 5000);
    return true;
  } catch (const Error& e) {
    showProblem(QString::fromStdString(e.what()));
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void MainWindow::showProblem(const QString& line) {
  m_status->setText(line);
  m_problems->appendPlainText(line);
  m_problems->show();
}

bool MainWindow::saveProfile(const QString& path, QString* error) {
  if (!m_editor->errors().empty()) {
    if (error) *error = tr("The profile has invalid fields:\n%1").arg(m_blockingReason);
    return false;
  }
  try {
    core::saveProfile(profile(), path.toStdString());
    markSaved(path);
    statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
    return true;
  } catch (const Error& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void MainWindow::resetLive(int ranks) { resetLive(profile(), ranks); }

void MainWindow::resetLive(const core::Profile& p, int ranks) {
  m_reportingRanks = ranks;
  m_firstStepDrawn = false;
  LiveRun run{p, ranks, {}};
  const bool pool = core::hasCoordinator(run.profile);  // its rank 0 speaks for the run
  for (int r = 0; r < ranks; ++r)
    run.names << (pool ? (r == 0 ? tr("coordinator") : tr("worker %1").arg(r)) : tr("rank %1").arg(r));
  for (LivePanel* panel : m_panels) panel->reset(run);
  m_heatmap->setVisible(ranks > kAggregateAbove);
  m_chartGrid->setRowStretch(3, ranks > kAggregateAbove ? 3 : 0);
  m_stragglers.clear();
  m_stragglerBanner->hide();
  for (MetricChart* chart : optionCharts()) chart->setSmoothing(m_smoothing->value() / 100.0);
  m_scalars->setSmoothing(m_smoothing->value() / 100.0);
  if (m_tabs->currentWidget() == m_scalars) m_tabs->setCurrentIndex(0);  // the new run's, live
  m_tabs->setTabVisible(m_tabs->indexOf(m_scalars), false);
  m_tabs->setTabText(m_tabs->indexOf(m_scalars), tr("S&calars"));
  m_chartStack->setCurrentIndex(1);
  m_logLines.clear();
  m_sharedLines.clear();
  m_log->clear();
  m_problems->clear();
  m_problems->hide();
  m_logRank->blockSignals(true);
  m_logRank->clear();
  m_logRank->addItem(tr("all ranks"), -2);
  m_logRank->addItem(tr("ptw"), -1);
  for (int r = 0; r < ranks; ++r) m_logRank->addItem(tr("rank %1").arg(r), r);
  m_logRank->blockSignals(false);
  // Note [Redraw budget]: the new run's empty charts are laid out and drawn now, while its
  // ranks start and before they train, not by the first redraws of their steps.
  const auto start = std::chrono::steady_clock::now();
  m_chartGrid->activate();
  for (LivePanel* panel : m_panels) panel->refresh();
  m_resetMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void MainWindow::showAttachDialog() {
  if (m_controller->isRunning() || m_sweep->isRunning()) return;
  AttachDialog dialog(m_runsDir.isEmpty() ? QString::fromStdString(core::defaultRunsDirectory()) : m_runsDir,
                      profile().hosts, this);
  dialog.list();
  if (dialog.exec() != QDialog::Accepted || dialog.chosen().id <= 0) return;
  attachRun(dialog.runsDir(), dialog.chosen());
}

// Note [Reattaching]: the window draws what the source gives as it draws a run of its own.
void MainWindow::attachRun(const QString& runsDir, const core::RunRow& run) {
  if (m_controller->isRunning() || m_sweep->isRunning()) return;
  core::Profile p = profile();
  int ranks = run.world;
  if (!run.profileJson.empty()) {  // a run of this machine: its own profile says what it reports
    try {
      p = core::parseProfile(run.profileJson, "run " + std::to_string(run.id));
      ranks = core::reportingRanks(p);
    } catch (const Error&) {
    }
  }
  m_lastStatus = QStringLiteral("running");
  // Note [Device probe waits for runs]: a run of this machine trains here, and its history
  // is taken while the probe would load LibTorch.
  try {
    std::string host, dir;
    if (!core::splitRemoteRunsDir(runsDir.toStdString(), host, dir)) m_editor->devicePicker()->setProbeHeld(true);
  } catch (const Error&) {  // not a HOST:DIR: the attach below says so
  }
  resetLive(p, std::max(1, ranks));
  appendLog(-1, tr("attaching to run %1 of %2").arg(run.id).arg(runsDir));
  m_status->setText(tr("Attaching to run %1…").arg(run.id));
  m_redrawShare = 0.05;  // Note [Attached records drawn as they come]
  m_redrawDebtMs = 0, m_redrawCostMs = 0, m_runOver = false;
  m_runStarted = std::chrono::steady_clock::now();
  // A submitted run has a folder and no id until its job starts: it is waited for.
  m_controller->attach(core::FollowSourceOptions(runsDir.toStdString(), run.id > 0 ? std::to_string(run.id) : run.dir)
                           .setHosts(p.hosts)
                           .setWaitForStart(run.id <= 0));
  revalidate();
  m_drainTimer->start(kFirstPointMs);
}

// Note [Submitted runs]: the job runs the run; the window only follows it, by its folder.
void MainWindow::submitRun() {
  if (m_controller->isRunning() || m_sweep->isRunning()) return;
  core::Profile p = profile();
  if (!m_path.isEmpty()) core::resolvePaths(p, QFileInfo(m_path).absolutePath().toStdString());
  const QString runsDir =
      QFileInfo(m_runsDir.isEmpty() ? QString::fromStdString(core::defaultRunsDirectory()) : m_runsDir)
          .absoluteFilePath();
  core::SubmittedJob job;
  try {
    job = core::submitRun(p, runsDir.toStdString(), core::thisPtwProgram());
  } catch (const Error& e) {
    showProblem(QString::fromStdString(e.what()));
    return;
  }
  core::RunRow run;
  run.dir = job.runDir;
  run.world = core::processCount(p);
  attachRun(runsDir, run);
  appendLog(-1, tr("submitted SLURM job %1 for the run in %2; waiting for it to start")
                    .arg(QString::fromStdString(job.id), QString::fromStdString(job.runDir)));
}

void MainWindow::onConnection(const QString& state, const QString& message) {
  if (state == QLatin1String("attached")) {
    m_status->setText(tr("Attached to run %1: its history, then live; closing the window leaves it going")
                          .arg(m_controller->runId()));
    appendLog(-1, tr("attached to run %1").arg(m_controller->runId()));
  } else {
    m_status->setText(tr("Run %1 detached: %2").arg(m_controller->runId()).arg(message));
    appendLog(-1, message);
  }
}

void MainWindow::startRun() {
  if (m_controller->isRunning() || !m_blockingReason.isEmpty() || m_sweep->isRunning()) return;
  core::Profile p = profile();
  // Paths typed relative in a profile that has a file are relative to its folder, as in a
  // profile opened from the file (the ranks would take them from the run's folder).
  if (!m_path.isEmpty()) core::resolvePaths(p, QFileInfo(m_path).absolutePath().toStdString());
  QString error;
  if (!m_controller->start(p, m_runsDir, &error)) {
    showProblem(error);  // the line headless prints for it (core::RunSession::begin)
    return;
  }
  m_lastStatus = QStringLiteral("running");
  m_editor->devicePicker()->setProbeHeld(true);  // Note [Device probe waits for runs]
  resetLive(core::reportingRanks(p));
  appendLog(-1, tr("run %1 in %2").arg(m_controller->runId()).arg(m_controller->runDirectory()));
  const std::string runsDir = m_runsDir.isEmpty() ? core::defaultRunsDirectory() : m_runsDir.toStdString();
  if (const std::string w = core::storeSpaceWarning(p, runsDir); !w.empty()) appendLog(-1, QString::fromStdString(w));
  if (const std::string w = core::coresWarning(p); !w.empty())
    appendLog(-1, tr("warning: %1").arg(QString::fromStdString(w)));
  revalidate();
  m_status->setText(tr("Starting %1 process(es)…").arg(core::processCount(p)));
  // Note [Redraw budget]: a run with a training thread on every core leaves drawing 0.25%.
  const int training = core::trainingThreads(p);
  m_redrawShare = training >= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) ? 0.0025 : 0.02;
  m_redrawDebtMs = 0, m_redrawCostMs = 0, m_runOver = false;
  m_runStarted = std::chrono::steady_clock::now();
  m_drainTimer->start(kFirstPointMs);
  m_history->reload();
}

void MainWindow::setChartsPaused(bool paused) {
  if (!m_controller->isRunning()) paused = false;
  if (m_pauseAction->isChecked() != paused) m_pauseAction->setChecked(paused);  // comes back here
  if (paused == m_chartsPaused) return;
  m_forceRedraw = true;
  drainRun();  // pausing shows what has come; resuming, what came meanwhile
  m_chartsPaused = paused;
  if (paused) {
    m_drainTimer->stop();
    m_status->setText(tr("Charts paused at step %1; the run goes on and every record is stored (Ctrl+Shift+P resumes)")
                          .arg(std::max<std::int64_t>(0, m_rankTable->lowestStep())));
  } else {
    m_drainTimer->start();
    m_status->setText(tr("Running %1 series…").arg(m_reportingRanks));
  }
}

void MainWindow::stopRun() {
  if (!m_controller->isRunning()) return;
  m_status->setText(tr("Stopping: ranks finish their step and checkpoint…"));
  m_controller->stop();
}

void MainWindow::drainRun() {
  m_controller->take(m_batch);
  const auto& batch = m_batch;
  std::size_t nextEvent = 0, index = 0;
  // Restarts and exits at their place among the records (RunController::Event); the panels
  // take the records between two of them in one call each.
  auto eventsAt = [&](std::size_t i) {
    for (; nextEvent < batch.events.size() && batch.events[nextEvent].index == i; ++nextEvent)
      applyEvent(batch.events[nextEvent]);
  };
  for (const auto& chunk : batch.chunks)
    for (std::size_t i = 0; i < chunk.size();) {
      eventsAt(index);
      std::size_t n = chunk.size() - i;  // up to the next event, or to the chunk's end
      if (nextEvent < batch.events.size() && batch.events[nextEvent].index > index)
        n = std::min(n, batch.events[nextEvent].index - index);
      const RecordSpan records(chunk.data() + i, chunk.data() + i + n);
      for (LivePanel* panel : m_panels) panel->add(records);
      i += n, index += n;
    }
  eventsAt(index);  // what came after the last record
  for (const auto& [rank, line] : batch.logs) appendLog(rank, QString::fromStdString(line));
  redrawIfDue();
}

// Note [Attached records drawn as they come]
// What attaching is for is seeing a run as it goes, from a window that is not the run's
// (often on another host than its ranks): an attached run's records are taken when they
// come, not at the window's next periodic take, and the charts redrawn as soon as the redraw
// budget allows (Note [Redraw budget]), which is 5% of the window's time for an attached
// run. A follower hands over a rank's records
// at most a few dozen times a second (Note [Hand-over of slow steps] in engine/worker.cpp),
// and the controller tells once until they are taken, so the window wakes no more often.
void MainWindow::takeArrived() {
  if (!m_controller->isAttached() || m_chartsPaused) return;
  const auto before = m_lastRedraw;
  drainRun();
  if (m_lastRedraw != before || m_redrawSoon->isActive()) return;
  const double sinceMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m_lastRedraw).count();
  m_redrawSoon->start(static_cast<int>(std::max(0.0, redrawPeriodMs() - sinceMs)) + 1);
}

void MainWindow::applyEvent(const RunController::Event& e) {
  if (e.restart)
    for (LivePanel* panel : m_panels) panel->truncateAfter(e.step);
  else
    m_rankTable->rankExited(e.rank, e.how, e.failed, e.stopped);
}

// Note [Redraw budget]
// Training ranks often own every core, so each millisecond spent drawing is taken from
// them, and ranks in lock-step all wait for the one whose core the window took. The charts
// are redrawn (drawn at once, so the time measured is the drawing) only when the last redraw
// is at most m_redrawShare of the time since: 2%, or 0.25% when the run has a training
// thread on every core (5% for an attached run); never below 2 frames a second, or one
// every 2 s when the ranks own every core. A redraw's cost is its thread's CPU time, what
// it takes from the ranks: the time it waits for a core, which the ranks have meanwhile, is
// not counted, or a loaded machine would slow the charts to their floor for no core saved.
// The redraws keep an account (m_redrawDebtMs): each adds its cost, the time since the last
// pays m_redrawShare of itself off, and the next waits until the account also covers its
// usual cost (m_redrawCostMs, a moving mean), so that over a run the share holds whatever
// each redraw costs, a forced one (a first point) included. The last redraw, once the run
// has ended, takes nothing from ranks and is not counted.
// Records are taken as often as the charts are redrawn (an attached run's as they come, Note
// [Attached records drawn as they come]): in between they would only wait, and each wake-up
// of the window's thread also takes a core from a rank. Until every rank has drawn its first
// point (for 10 s at most) they are taken every 50 ms, and a rank's first point is drawn at
// once; above kAggregateAbove ranks only the run's first step is, since no line is a rank's.
// A new run's empty charts are laid out and drawn when it starts (resetLive), before its
// ranks train: a chart's first layout costs many redraws. A panel with nothing new draws
// nothing (a chart's own layout is not news), so such a redraw costs little and the next one
// comes soon. BENCHMARKS.md (monitoring, many ranks) has what this costs.
// An attached run's stored history comes all at once: while a take brings many records, the
// next comes after 50 ms too, and the history is drawn when the last of it is in.
void MainWindow::redrawIfDue() {
  const auto now = std::chrono::steady_clock::now();
  const double sinceMs = std::chrono::duration<double, std::milli>(now - m_lastRedraw).count();
  auto period = [this] { return redrawPeriodMs(); };
  // Within a millisecond of its time, a redraw is due: the timers are precise, and what it
  // takes early is owed by the next.
  if (sinceMs >= period() - 1.0 || m_forceRedraw) {
    // Credit is kept up to one redraw's cost: a long quiet spell does not pay for a burst.
    m_redrawDebtMs = std::max(-m_redrawCostMs, m_redrawDebtMs - m_redrawShare * sinceMs);
    m_forceRedraw = false;
    m_lastRedraw = now;
    m_panelMs.resize(m_panels.size() + 1);
    m_panelCpuMs.resize(m_panelMs.size());
    const double cpu0 = threadCpuMs();
    auto part = now;
    double partCpu = cpu0;
    const bool counted = !m_runOver;
    auto lap = [&](std::size_t i) {
      const auto t = std::chrono::steady_clock::now();
      const double cpu = threadCpuMs();
      if (counted) {
        m_panelMs[i] += std::chrono::duration<double, std::milli>(t - part).count();
        m_panelCpuMs[i] += cpu - partCpu;
      }
      part = t, partCpu = cpu;
    };
    for (std::size_t i = 0; i < m_panels.size(); ++i) m_panels[i]->refresh(), lap(i);
    markOutliers();
    lap(m_panels.size());
    m_redrawMs = std::chrono::duration<double, std::milli>(part - now).count();
    const double cost = partCpu - cpu0;
    m_redrawDebtMs += cost;
    m_redrawCostMs = m_redrawCostMs == 0 ? cost : 0.8 * m_redrawCostMs + 0.2 * cost;
    if (counted) {
      ++m_redraws;
      m_redrawMsTotal += m_redrawMs;
      m_redrawMsMax = std::max(m_redrawMsMax, m_redrawMs);
      m_redrawCpuMsTotal += cost;
    }
  }
  // A rank that never reports (it died before its first step) does not keep the fast pace.
  const bool allDrawn = m_rankTable->allReported() || now - m_runStarted > std::chrono::seconds(10);
  const bool catchingUp = m_controller->isAttached() && m_batch.records > kCatchUpRecords;
  const int interval = allDrawn && !catchingUp ? static_cast<int>(period()) : kFirstPointMs;
  if (m_drainTimer->interval() != interval) m_drainTimer->setInterval(interval);
}

double MainWindow::redrawPeriodMs() const {
  // The time, from the last redraw, that pays what the redraws owe and the next one's usual
  // cost in advance (Note [Redraw budget]).
  return std::min(m_redrawShare < 0.02 ? 2000.0 : 500.0,
                  std::max(50.0, (m_redrawDebtMs + m_redrawCostMs) / m_redrawShare));
}

std::map<QString, double> MainWindow::redrawMsByPart(bool cpu) const {
  const std::vector<double>& ms = cpu ? m_panelCpuMs : m_panelMs;
  std::map<QString, double> out;
  for (std::size_t i = 0; i < m_panels.size() && i < ms.size(); ++i)
    if (const auto* o = dynamic_cast<const QObject*>(m_panels[i]))
      out[QString::fromLatin1(o->metaObject()->className())] += ms[i];
  if (ms.size() > m_panels.size()) out[QStringLiteral("outliers")] = ms.back();
  return out;
}

void MainWindow::appendLog(int rank, const QString& line, bool again) {
  m_logLines.push_back({rank, line});
  if (m_logLines.size() > kMaxLogLines) m_logLines.pop_front();
  if (!again) m_rankTable->showMessage(rank, line);
  if (!again && rank < 0) showStraggler(line);
  const int wantRank = m_logRank->currentData().isValid() ? m_logRank->currentData().toInt() : -2;
  const int level = m_logLevel->currentData().toInt();
  const bool isError = line.contains("error", Qt::CaseInsensitive) || line.contains("failed");
  const bool isWarning = isError || line.contains("warn", Qt::CaseInsensitive);
  const QString shown = rank < 0 ? line : QStringLiteral("[%1] %2").arg(rank).arg(line);
  if (!again && isWarning) {
    m_problems->appendPlainText(shown);
    m_problems->show();
  }
  // A routine line that every rank prints (the OpenBLAS kernel note) is shown once when the
  // log shows all ranks; warnings and errors are each rank's own.
  if (rank >= 0 && wantRank == -2 && !isWarning && !m_sharedLines.insert(line).second) return;
  if ((wantRank == -2 || wantRank == rank) && (level == 0 || (level == 1 && isWarning) || (level == 2 && isError)))
    m_log->appendPlainText(shown);
}

// The supervisor names each straggler in a line of its own (Note [Stragglers]): the banner
// and the table show it for the rest of the run.
void MainWindow::showStraggler(const QString& line) {
  static const QString prefix = QStringLiteral("ptw: warning: straggler: ");
  if (!line.startsWith(prefix)) return;
  const QString message = line.mid(prefix.size());
  static const QRegularExpression rankOf(QStringLiteral("^rank (\\d+)"));
  const auto match = rankOf.match(message);
  if (match.hasMatch()) m_rankTable->markStraggler(match.captured(1).toInt(), message);
  m_stragglers << message;
  const int shown = 3;
  QString text = tr("Straggler: %1").arg(m_stragglers.mid(0, shown).join(QStringLiteral("; ")));
  if (m_stragglers.size() > shown)
    text += tr(" and %1 more (filter the table by \"straggler\")").arg(m_stragglers.size() - shown);
  m_stragglerBanner->setText(text);
  m_stragglerBanner->show();
}

void MainWindow::refilterLog() {
  std::deque<LogLine> lines;
  lines.swap(m_logLines);
  m_log->clear();
  m_sharedLines.clear();
  for (const auto& l : lines) appendLog(l.rank, l.text, true);
}

void MainWindow::onFinished(const QString& status, const QString& message, int failedRank,
                            const QStringList& lastLines) {
  m_chartsPaused = false;  // the run is over: everything is drawn
  m_pauseAction->setChecked(false);
  drainRun();  // what is left
  // The last window of steps, cut short by the end, is drawn with the steps it has (Note
  // [Step groups]); then everything once more.
  for (LivePanel* panel : m_panels) panel->finish();
  m_forceRedraw = true;
  m_runOver = true;  // Note [Redraw budget]: this redraw takes nothing from ranks
  drainRun();
  m_drainTimer->stop();
  m_redrawSoon->stop();
  m_editor->devicePicker()->setProbeHeld(m_sweep->isRunning());
  m_lastStatus = status;
  revalidate();
  m_status->setText(tr("Run %1: %2").arg(status, message));
  m_rankTable->runEnded(status == "finished"  ? RankTable::Status::Finished
                        : status == "stopped" ? RankTable::Status::Stopped
                                              : RankTable::Status::Failed,
                        failedRank, message);
  if (failedRank >= 0 && failedRank < m_reportingRanks) {
    appendLog(-1, tr("rank %1 failed: %2").arg(failedRank).arg(message));
    for (const QString& l : lastLines) appendLog(-1, QStringLiteral("  | ") + l);
  } else if (status == "failed") {
    appendLog(-1, tr("run failed: %1").arg(message));
  }
  m_history->reload();
  // A stall or a timeout (its stacks file names the rank that is behind): where every rank was
  // when it was stopped, shown at once. Stacks the user asked for earlier are no news.
  if (status == "failed" && !m_stacksTimer->isActive() && namesARank(m_controller->stacksFile()))
    openStacks(m_controller->stacksFile());
  if (m_closeAfterRun) QTimer::singleShot(0, this, &QWidget::close);
}

void MainWindow::showStacks() {
  const QString dir = m_controller->runDirectory();
  if (m_controller->isRunning()) {
    m_stacksBefore = core::listStacksFiles(dir.toStdString());
    m_controller->requestStacks();
    m_stacksUntil = std::chrono::steady_clock::now() + std::chrono::seconds(kStacksWaitS);
    m_stacksPane->showWaiting(tr("Taking every rank's stacks of run %1…").arg(m_controller->runId()));
    m_stacksPane->show();
    m_stacksPane->raise();
    m_stacksTimer->start();
    return;
  }
  const QString path = !m_controller->stacksFile().isEmpty() ? m_controller->stacksFile()
                       : dir.isEmpty()                       ? QString()
                                       : QString::fromStdString(core::latestStacksFile(dir.toStdString()));
  if (path.isEmpty()) {
    m_stacksPane->showMessage(dir.isEmpty()
                                  ? tr("No run yet: Show Stacks takes every rank's stacks while a run goes on.")
                                  : tr("Run %1 took no stacks: they are taken when a rank stalls, and "
                                       "on request (Show Stacks) while a run goes on.")
                                        .arg(m_controller->runId()));
    m_stacksPane->show();
    m_stacksPane->raise();
    return;
  }
  openStacks(path);
}

void MainWindow::pollStacks() {
  const std::string path = core::newStacksFile(m_controller->runDirectory().toStdString(), m_stacksBefore);
  if (!path.empty()) {
    m_stacksTimer->stop();
    openStacks(QString::fromStdString(path));
    return;
  }
  if (m_controller->isRunning() && std::chrono::steady_clock::now() < m_stacksUntil) return;
  m_stacksTimer->stop();
  m_stacksPane->showMessage(m_controller->isRunning()
                                ? tr("Run %1 wrote no stacks within %2 s (between attempts, or ending); try again.")
                                      .arg(m_controller->runId())
                                      .arg(kStacksWaitS)
                                : tr("Run %1 ended before its stacks were taken.").arg(m_controller->runId()));
}

void MainWindow::openStacks(const QString& path) {
  m_stacksPane->showFile(path);
  m_stacksPane->show();
  m_stacksPane->raise();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!m_closeAfterRun) {  // else the questions were answered when the user closed the window
    if (m_confirm && profile() != m_savedProfile) {
      auto answer = ask(QMessageBox::Question, tr("Unsaved profile"), tr("Save the changes to the profile?"),
                        QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel);
      if (answer == QMessageBox::Cancel) {
        event->ignore();
        return;
      }
      if (answer == QMessageBox::Save) {
        QString path = m_path.isEmpty() ? QFileDialog::getSaveFileName(this, tr("Save profile"), QString(),
                                                                       tr("ptw profiles (*.json)"))
                                        : m_path;
        QString error;
        if (path.isEmpty()) {
          event->ignore();
          return;
        }
        if (!saveProfile(path, &error)) {
          warn(tr("Cannot save profile"), error);
          event->ignore();
          return;
        }
      }
    }
    // An attached run is not this window's: it goes on, and only the following ends.
    if (m_controller->isAttached()) m_controller->detach();
    if ((m_controller->isRunning() && !m_controller->isAttached()) || m_sweep->isRunning()) {
      const bool run = m_controller->isRunning();
      if (m_confirm && ask(QMessageBox::Question, run ? tr("Run in progress") : tr("Sweep in progress"),
                           run ? tr("A run is in progress. Stop it and quit?")
                               : tr("A scaling sweep is in progress. Stop it and quit?"),
                           QMessageBox::Yes | QMessageBox::No) != QMessageBox::Yes) {
        event->ignore();
        return;
      }
      m_closeAfterRun = true;
    }
  }
  // The window stays until the ranks have finished their step and their records are stored
  // (onFinished and the sweep's end close it again): closing at once would leave the
  // window frozen and blank for that time.
  if ((m_controller->isRunning() && !m_controller->isAttached()) || m_sweep->isRunning()) {
    m_controller->stop();
    m_sweep->stop();
    m_status->setText(tr("Stopping before quitting: ranks finish their step and their records are stored…"));
    event->ignore();
    return;
  }
  QSettings settings;
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  saveView(settings);
  event->accept();
}

}  // namespace ptw::ui
