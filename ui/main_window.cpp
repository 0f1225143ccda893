#include "ui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTimer>
#include <QVBoxLayout>

#include "common/error.h"
#include "ui/loss_chart.h"
#include "ui/run_controller.h"

namespace ptw::ui {

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_profile(core::defaultProfile()), m_controller(new RunController(this)) {
  buildUi();
  buildMenus();
  profileToFields();
  revalidate();

  // Records are drained and the chart redrawn at most 25 times a second, however fast
  // the ranks report.
  m_drainTimer = new QTimer(this);
  m_drainTimer->setInterval(40);
  connect(m_drainTimer, &QTimer::timeout, this, &MainWindow::drainRun);
  connect(m_controller, &RunController::started, this,
          [this](int port) { m_status->setText(tr("Running: store on 127.0.0.1:%1").arg(port)); });
  connect(m_controller, &RunController::rankExited, this, [this](int rank, const QString& how, bool failed) {
    if (failed) m_log->appendPlainText(tr("rank %1 ended with %2").arg(rank).arg(how));
  });
  connect(m_controller, &RunController::finished, this, &MainWindow::onFinished);
  setWindowTitle(tr("ptw: Parallel Training Workbench"));
  resize(1100, 700);
}

void MainWindow::buildUi() {
  auto* central = new QWidget(this);
  auto* outer = new QHBoxLayout(central);

  auto* form = new QGroupBox(tr("Experiment"), central);
  auto* fl = new QFormLayout(form);
  m_strategy = new QComboBox(form);
  m_strategy->setObjectName(QStringLiteral("strategy"));
  m_strategy->addItem(tr("DistributedDataParallel"), QStringLiteral("ddp"));
  m_strategy->addItem(tr("DataParallel (replicas in one process)"), QStringLiteral("dataparallel"));
  m_strategy->addItem(tr("Process pool, sync"), QStringLiteral("pool/sync"));
  m_strategy->addItem(tr("Process pool, hogwild"), QStringLiteral("pool/hogwild"));
  m_strategy->addItem(tr("Single process"), QStringLiteral("single"));
  m_ranks = new QSpinBox(form);
  m_ranks->setObjectName(QStringLiteral("ranks"));
  m_ranks->setRange(1, 256);
  m_optimizer = new QComboBox(form);
  m_optimizer->setObjectName(QStringLiteral("optimizer"));
  m_optimizer->addItem(tr("SGD"), QStringLiteral("sgd"));
  m_optimizer->addItem(tr("Adam"), QStringLiteral("adam"));
  m_optimizer->addItem(tr("AdamW"), QStringLiteral("adamw"));
  m_lr = new QDoubleSpinBox(form);
  m_lr->setObjectName(QStringLiteral("lr"));
  m_lr->setDecimals(6);
  m_lr->setRange(-1.0, 100.0);  // negative is allowed in the field so validation can explain it
  m_lr->setSingleStep(0.001);
  m_momentum = new QDoubleSpinBox(form);
  m_momentum->setObjectName(QStringLiteral("momentum"));
  m_momentum->setDecimals(3);
  m_momentum->setRange(0.0, 0.999);
  m_batch = new QSpinBox(form);
  m_batch->setObjectName(QStringLiteral("batch"));
  m_batch->setRange(1, 1 << 20);
  m_steps = new QSpinBox(form);
  m_steps->setObjectName(QStringLiteral("steps"));
  m_steps->setRange(0, 1 << 30);
  fl->addRow(tr("Strategy"), m_strategy);
  fl->addRow(tr("CPU ranks"), m_ranks);
  fl->addRow(tr("Optimizer"), m_optimizer);
  fl->addRow(tr("Learning rate"), m_lr);
  fl->addRow(tr("Momentum"), m_momentum);
  fl->addRow(tr("Batch per rank"), m_batch);
  fl->addRow(tr("Max steps"), m_steps);

  m_start = new QPushButton(tr("Start"), form);
  m_start->setObjectName(QStringLiteral("start"));
  m_stop = new QPushButton(tr("Stop"), form);
  m_stop->setObjectName(QStringLiteral("stop"));
  m_stop->setEnabled(false);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(m_start);
  buttons->addWidget(m_stop);
  fl->addRow(buttons);
  m_status = new QLabel(form);
  m_status->setObjectName(QStringLiteral("status"));
  m_status->setWordWrap(true);
  fl->addRow(m_status);
  form->setMaximumWidth(340);

  auto* splitter = new QSplitter(Qt::Vertical, central);
  m_chart = new LossChart(splitter);
  m_chart->setObjectName(QStringLiteral("lossChart"));
  m_log = new QPlainTextEdit(splitter);
  m_log->setObjectName(QStringLiteral("log"));
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(5000);
  splitter->addWidget(m_chart);
  splitter->addWidget(m_log);
  splitter->setStretchFactor(0, 4);
  splitter->setStretchFactor(1, 1);

  outer->addWidget(form);
  outer->addWidget(splitter, 1);
  setCentralWidget(central);

  auto onEdit = [this] {
    if (m_updatingFields) return;
    fieldsToProfile();
    revalidate();
  };
  connect(m_strategy, qOverload<int>(&QComboBox::currentIndexChanged), this, onEdit);
  connect(m_optimizer, qOverload<int>(&QComboBox::currentIndexChanged), this, onEdit);
  for (QSpinBox* s : {m_ranks, m_batch, m_steps}) connect(s, qOverload<int>(&QSpinBox::valueChanged), this, onEdit);
  for (QDoubleSpinBox* s : {m_lr, m_momentum})
    connect(s, qOverload<double>(&QDoubleSpinBox::valueChanged), this, onEdit);
  connect(m_start, &QPushButton::clicked, this, &MainWindow::startRun);
  connect(m_stop, &QPushButton::clicked, this, &MainWindow::stopRun);
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open Profile…"), QKeySequence::Open, this, [this] {
    QString path = QFileDialog::getOpenFileName(this, tr("Open profile"), QFileInfo(m_path).absolutePath(),
                                                tr("ptw profiles (*.json);;All files (*)"));
    QString error;
    if (!path.isEmpty() && !openProfile(path, &error)) QMessageBox::warning(this, tr("Cannot open profile"), error);
  });
  auto saveAs = [this] {
    QString path = QFileDialog::getSaveFileName(this, tr("Save profile"), m_path, tr("ptw profiles (*.json)"));
    QString error;
    if (!path.isEmpty() && !saveProfile(path, &error)) QMessageBox::warning(this, tr("Cannot save profile"), error);
  };
  file->addAction(tr("&Save Profile"), QKeySequence::Save, this, [this, saveAs] {
    QString error;
    if (m_path.isEmpty()) saveAs();
    else if (!saveProfile(m_path, &error)) QMessageBox::warning(this, tr("Cannot save profile"), error);
  });
  file->addAction(tr("Save Profile &As…"), QKeySequence::SaveAs, this, saveAs);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(tr("&Start"), QKeySequence(Qt::Key_F5), this, &MainWindow::startRun);
  run->addAction(tr("S&top"), QKeySequence(Qt::SHIFT | Qt::Key_F5), this, &MainWindow::stopRun);
}

void MainWindow::setProfile(const core::Profile& profile) {
  m_profile = profile;
  profileToFields();
  revalidate();
}

void MainWindow::profileToFields() {
  m_updatingFields = true;
  QString strategyKey = QString::fromStdString(m_profile.strategy.kind);
  if (m_profile.strategy.kind == "pool") strategyKey += "/" + QString::fromStdString(m_profile.strategy.poolMode);
  m_strategy->setCurrentIndex(std::max(0, m_strategy->findData(strategyKey)));
  m_ranks->setValue(m_profile.strategy.ranks);
  m_optimizer->setCurrentIndex(std::max(0, m_optimizer->findData(QString::fromStdString(m_profile.hyper.optimizer))));
  m_lr->setValue(m_profile.hyper.lr);
  m_momentum->setValue(m_profile.hyper.momentum);
  m_batch->setValue(static_cast<int>(m_profile.hyper.batchSize));
  m_steps->setValue(static_cast<int>(m_profile.hyper.maxSteps));
  m_updatingFields = false;
}

void MainWindow::fieldsToProfile() {
  const QStringList strategyKey = m_strategy->currentData().toString().split('/');
  m_profile.strategy.kind = strategyKey.front().toStdString();
  if (strategyKey.size() > 1) m_profile.strategy.poolMode = strategyKey.back().toStdString();
  m_profile.strategy.ranks = m_ranks->value();
  m_profile.hyper.optimizer = m_optimizer->currentData().toString().toStdString();
  m_profile.hyper.lr = m_lr->value();
  m_profile.hyper.momentum = m_momentum->value();
  m_profile.hyper.batchSize = m_batch->value();
  m_profile.hyper.maxSteps = m_steps->value();
}

void MainWindow::revalidate() {
  auto errors = core::validate(m_profile);
  m_blockingReason.clear();
  for (const auto& e : errors)
    m_blockingReason += (m_blockingReason.isEmpty() ? "" : "\n") + QString::fromStdString(e.text());
  bool running = m_controller->isRunning();
  m_start->setEnabled(errors.empty() && !running);
  m_start->setToolTip(m_blockingReason.isEmpty() ? tr("Start the run (F5)") : m_blockingReason);
  if (!running) m_status->setText(m_blockingReason);
}

bool MainWindow::openProfile(const QString& path, QString* error) {
  try {
    setProfile(core::loadProfile(path.toStdString()));
    m_path = path;
    statusBar()->showMessage(tr("Opened %1").arg(path), 5000);
    return true;
  } catch (const Error& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

bool MainWindow::saveProfile(const QString& path, QString* error) {
  try {
    core::saveProfile(m_profile, path.toStdString());
    m_path = path;
    statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
    return true;
  } catch (const Error& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
}

void MainWindow::startRun() {
  if (m_controller->isRunning() || !m_blockingReason.isEmpty()) return;
  QString error;
  if (!m_controller->start(m_profile, m_runsDir, &error)) {
    m_status->setText(tr("Cannot start: %1").arg(error));
    return;
  }
  m_lastStatus = QStringLiteral("running");
  m_chart->reset(core::reportingRanks(m_profile));
  m_log->clear();
  m_log->appendPlainText(tr("Run folder: %1").arg(m_controller->runDirectory()));
  m_start->setEnabled(false);
  m_stop->setEnabled(true);
  m_status->setText(tr("Starting %1 rank(s)…").arg(m_profile.strategy.ranks));
  m_drainTimer->start();
}

void MainWindow::stopRun() {
  if (!m_controller->isRunning()) return;
  m_status->setText(tr("Stopping…"));
  m_controller->stop();
}

void MainWindow::drainRun() {
  auto records = m_controller->takeRecords();
  if (!records.empty()) m_chart->addRecords(records);
  for (const auto& [rank, line] : m_controller->takeLogs())
    m_log->appendPlainText(QStringLiteral("[%1] %2").arg(rank).arg(QString::fromStdString(line)));
  m_chart->refresh();
}

void MainWindow::onFinished(const QString& status, const QString& message, int failedRank,
                            const QStringList& lastLines) {
  drainRun();
  m_drainTimer->stop();
  m_lastStatus = status;
  m_stop->setEnabled(false);
  revalidate();
  m_status->setText(tr("Run %1: %2").arg(status, message));
  if (failedRank >= 0) {
    m_log->appendPlainText(tr("rank %1 failed: %2").arg(failedRank).arg(message));
    for (const QString& l : lastLines) m_log->appendPlainText(QStringLiteral("  | ") + l);
  }
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (m_controller->isRunning()) {
    auto answer = QMessageBox::question(this, tr("Run in progress"), tr("A run is in progress. Stop it and quit?"));
    if (answer != QMessageBox::Yes) {
      event->ignore();
      return;
    }
    m_controller->stop();
  }
  event->accept();
}

}  // namespace ptw::ui
