// SPDX-License-Identifier: GPL-3.0-or-later
// The window, offscreen: the profile editor, Open/Save, a live 2-rank run to the end, the
// history with overlay and profile diff, a killed rank, and the chart summaries that keep
// display memory bounded.
#include <qcustomplot.h>
#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPointer>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSlider>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTableWidget>
#include <QToolButton>
#include <QtTest>

#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "common/network.h"
#include "common/version.h"
#include "launch/launcher.h"
#include "launch/preflight.h"
#include "launch/run_store.h"
#include "launch/sweep.h"
#include "test_support.h"
#include "ui/chart_format.h"
#include "ui/device_picker.h"
#include "ui/loss_panel.h"
#include "ui/main_window.h"
#include "ui/metric_chart.h"
#include "ui/profile_editor.h"
#include "ui/rank_table.h"
#include "ui/run_controller.h"
#include "ui/run_history.h"
#include "ui/scalar_charts.h"
#include "ui/series_summary.h"
#include "ui/step_folder.h"
#include "ui/step_split_chart.h"
#include "ui/step_sums.h"
#include "ui/sweep_panel.h"

using namespace ptw;

namespace {
// A window that asks nothing, writes its runs under `runs`, is shown, and runs `steps` steps.
void showQuietly(ui::MainWindow& w, const QTemporaryDir& runs, const char* steps) {
  w.setConfirmations(false);
  w.setRunsDirectory(runs.path());
  w.show();
  w.editor()->setFieldText("hyper.max_steps", steps);
}

// The parameters of torchvision's resnet18(num_classes=classes), counted from its layers'
// shapes: a `stem`×`stem` first convolution (7 in torchvision's, 3 in the usual CIFAR variant),
// four stages of two basic blocks (two 3×3 convolutions and two BatchNorms each, a 1×1
// convolution and a BatchNorm where a stage changes the width), and the linear head.
qlonglong resnet18Parameters(qlonglong classes, qlonglong stem) {
  qlonglong n = 3 * 64 * stem * stem + 2 * 64, in = 64;
  for (const qlonglong out : {64, 128, 256, 512}) {
    for (int block = 0; block < 2; ++block) {
      const qlonglong from = block == 0 ? in : out;
      n += from * out * 9 + 2 * out + out * out * 9 + 2 * out;
      if (from != out) n += from * out + 2 * out;
    }
    in = out;
  }
  return n + 512 * classes + classes;
}

QString cell(QTableWidget* t, int row, int col) {
  auto* item = t->item(row, col);
  return item ? item->text() : QString();
}
}  // namespace

class TestMainWindow : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);  // QSettings in a test location
    QCoreApplication::setOrganizationName("ptw-tests");
    QCoreApplication::setApplicationName("test_main_window");
    QSettings().clear();
  }

  // At first sight the window says what Start will run instead of showing empty axes, and
  // the loss chart smooths (TensorBoard's 0.6) until the user sets otherwise.
  void theWindowAtFirstSightSaysWhatStartRuns() {
    ui::MainWindow w;
    w.setConfirmations(false);
    w.show();
    QCOMPARE(w.findChild<QSlider*>("smoothing")->value(), 60);
    QCOMPARE(w.lossChart()->smoothing(), 0.6);
    auto* hint = w.findChild<QLabel*>("firstRunHint");
    QVERIFY(hint && hint->isVisible());
    QVERIFY(!w.lossChart()->isVisible());
    QVERIFY2(hint->text().contains("Start (F5) runs this profile: 2 ranks of DDP on the CPU"),
             qPrintable(hint->text()));
    w.editor()->setFieldText("strategy.ranks", "4");
    QVERIFY2(hint->text().contains("4 ranks of DDP"), qPrintable(hint->text()));
    w.editor()->setFieldText("strategy.kind", "pool");
    QVERIFY2(hint->text().contains("a pool of 4 workers (sync) on the CPU"), qPrintable(hint->text()));
    QVERIFY(w.findChild<QLabel*>("rankTableHint")->isVisible());
    QVERIFY(!w.findChild<QPlainTextEdit*>("log")->placeholderText().isEmpty());
  }

  // Numbers read as numbers in tables and on axes: separators or k/M, never an exponent.
  void numbersReadAsNumbers_data() {
    QTest::addColumn<double>("value");
    QTest::addColumn<QString>("cell");
    QTest::addColumn<QString>("axis");
    QTest::newRow("million") << 1147950.0 << "1.15M"
                             << "1.15M";
    QTest::newRow("two million") << 2e6 << "2M"
                                 << "2M";
    QTest::newRow("thousands") << 12345.0 << "12,345"
                               << "12.3k";
    QTest::newRow("hundreds") << 812.5 << "812.5"
                              << "812.5";
    QTest::newRow("loss") << 0.01234 << "0.01234"
                          << "0.01234";
    QTest::newRow("tiny") << 0.0000123 << "0.0000123"
                          << "0.0000123";
    QTest::newRow("zero") << 0.0 << "0"
                          << "0";
  }
  void numbersReadAsNumbers() {
    QFETCH(double, value);
    QFETCH(QString, cell);
    QFETCH(QString, axis);
    QCOMPARE(ui::readableNumber(value), cell);
    QCOMPARE(ui::compactNumber(value), axis);
  }

  // The mean over ranks stands out: on top, thicker, and the ranks lighter behind it.
  void theMeanStandsOutAmongRanks() {
    ui::MetricChart chart("loss");
    chart.setSmoothing(0.6);
    for (int r = 0; r < 4; ++r) chart.addSeries(QString("rank %1").arg(r), Qt::blue);
    const int mean = chart.addSeries("mean", Qt::black);
    chart.setEmphasized(mean);
    auto* plot = chart.plot();
    const QCPGraph* meanLine = plot->graph(2 * mean + 1);  // each series: raw, then smoothed
    const QCPGraph* rankLine = plot->graph(1);
    QVERIFY(meanLine->pen().widthF() > rankLine->pen().widthF());
    QVERIFY(rankLine->pen().color().alpha() < 255);
    QCOMPARE(meanLine->layer()->name(), QString("emphasis"));
    QVERIFY(meanLine->layer()->index() > rankLine->layer()->index());
  }

  // Legends sit outside the axis rect, and axes that count workers tick at whole numbers
  // with labels that read as numbers.
  void legendsCoverNoDataAndCountsTickWhole() {
    ui::StepSplitChart split;
    ui::MetricChart loss("loss");
    ui::SweepPanel sweepPanel;
    split.reset(2);
    loss.addSeries("rank 0", Qt::blue);
    for (QWidget* widget : std::initializer_list<QWidget*>{&split, &loss, &sweepPanel}) {
      widget->resize(600, 400);
      widget->show();
      QVERIFY(QTest::qWaitForWindowExposed(widget));
    }
    for (auto* plot : {split.plot(), loss.plot(), sweepPanel.throughputPlot()}) {
      plot->replot();
      QVERIFY(plot->legend->visible());
      QVERIFY(plot->legend->outerRect().height() > 0);
      QVERIFY(!plot->legend->outerRect().intersects(plot->axisRect()->rect()));
    }
    auto* sweep = sweepPanel.throughputPlot();
    sweep->xAxis->setRange(0.8, 2.2);
    sweep->yAxis->setRange(0, 2.5e6);
    sweep->replot();
    const auto ticks = sweep->xAxis->tickVector();
    QVERIFY(!ticks.isEmpty());
    for (double t : ticks) QVERIFY2(t == std::round(t), qPrintable(QString::number(t)));
    for (const QString& label : sweep->yAxis->tickVectorLabels())
      QVERIFY2(!label.contains("10^") && !label.contains('e') && !label.contains(QChar(0xB7)), qPrintable(label));
    QVERIFY(sweep->yAxis->tickVectorLabels().contains("2M"));
  }

  // Note [Stretches of steps]: where a script's own counter starts again, the loss chart's
  // step axis names it beneath ptw's step; where it does not, the axis is as ever.
  void theLossAxisNamesAScriptsOwnCounter() {
    ui::LossPanel panel;
    ui::LiveRun run;
    run.profile = core::defaultProfile();
    run.ranks = 1;
    run.names = QStringList{"rank 0"};
    panel.reset(run);
    std::vector<core::Record> records;
    for (std::int64_t step = 0; step < 100; step += 10) {  // epochs of 50 steps: the counter restarts at 50
      core::Record r;
      r.kind = core::Record::Kind::Step;
      r.step.step = step;
      r.step.stepOffset = step >= 50 ? 50 : 0;
      r.step.loss = 1.0 / (1 + static_cast<double>(step));
      records.push_back(r);
    }
    panel.add(ui::RecordSpan(records.data(), records.data() + 20 / 10));  // before the stretch
    panel.resize(600, 400);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    panel.plot()->xAxis->setRange(0, 100);
    panel.plot()->replot();
    for (const QString& label : panel.plot()->xAxis->tickVectorLabels())
      QVERIFY2(!label.contains('\n'), qPrintable(label));
    panel.add(ui::RecordSpan(records.data() + 2, records.data() + records.size()));
    panel.plot()->xAxis->setRange(0, 100);
    panel.plot()->replot();
    const auto ticks = panel.plot()->xAxis->tickVector();
    const auto labels = panel.plot()->xAxis->tickVectorLabels();
    QVERIFY(ticks.size() >= 3);
    for (int i = 0; i < ticks.size(); ++i) {
      const double t = ticks[i];
      const QString expected = t >= 50 ? ui::compactNumber(t) + "\n" + ui::compactNumber(t - 50) : ui::compactNumber(t);
      QCOMPARE(labels[i], expected);
    }
    QVERIFY(panel.plot()->xAxis->label().contains("own counter"));
  }

  // The mean loss and total throughput of a step are drawn once every rank has reported it,
  // from that step's values, whatever order the ranks' batches arrive in.
  void stepSumsCompleteEachStepFromThatStepsValues() {
    ui::StepSums sums;
    sums.reset(2);
    std::vector<std::tuple<std::int64_t, double, double>> done;
    auto add = [&](int rank, std::int64_t step) {
      ui::StepSums::Done d;
      // rank r at step s: loss r + s / 1000, throughput 1000 * (r + 1) + s
      if (sums.add(step, rank + step / 1000.0, 1000.0 * (rank + 1) + static_cast<double>(step), 1, d)) {
        QCOMPARE(d.first, d.step);
        done.emplace_back(d.step, d.loss, d.throughput);
      }
    };
    for (std::int64_t s = 1; s <= 300; ++s) add(0, s);  // rank 0's batch first
    QVERIFY(done.empty());
    for (std::int64_t s = 1; s <= 200; ++s) add(1, s);  // then part of rank 1's
    QCOMPARE(done.size(), std::size_t(200));
    for (std::int64_t s = 201; s <= 400; ++s) add(1, s);  // rank 1 ahead now
    for (std::int64_t s = 301; s <= 400; ++s) add(0, s);
    QCOMPARE(done.size(), std::size_t(400));
    for (std::size_t i = 0; i < done.size(); ++i) {
      const auto step = static_cast<std::int64_t>(i) + 1;
      QCOMPARE(std::get<0>(done[i]), step);
      QCOMPARE(std::get<1>(done[i]), (0 + step / 1000.0 + 1 + step / 1000.0) / 2);
      QCOMPARE(std::get<2>(done[i]), 1000.0 + 2000.0 + 2.0 * static_cast<double>(step));
    }
    // A step older than the last complete one is not drawn again; a rank that skipped a step
    // does not hold up the next ones.
    add(0, 399);
    add(0, 402);
    add(1, 402);
    QCOMPARE(done.size(), std::size_t(401));
    QCOMPARE(std::get<0>(done.back()), std::int64_t(402));
  }

  // Before a run is selected, the Runs tab says in one line how to fill its chart, as the Live
  // tab does before the first run, instead of showing empty axes.
  void theRunsTabSaysHowToFillItsChart() {
    QTemporaryDir runs;
    ui::RunHistory history;
    history.setRunsDirectory(runs.path());
    history.show();
    auto* hint = history.findChild<QLabel*>("overlayHint");
    QVERIFY(hint && hint->isVisible());
    QCOMPARE(hint->text(), QString("Select a run in the list above to draw its loss here; select several to compare "
                                   "them."));
    QVERIFY(!history.overlay()->isVisible());
  }

  // Past step 2048 the ranks send groups of steps (Note [Step groups]): a window is drawn once
  // every rank's groups cover all of it, however each rank's records were cut into groups,
  // from the same sums as its steps one by one would give.
  void stepSumsCompleteAWindowFromGroupsCutAnywhere() {
    const std::int64_t from = 8192, span = core::stepGroupSpan(from);
    QCOMPARE(span, std::int64_t(8));
    QCOMPARE(core::stepGroupSpan(from + span - 1), span);  // a window's steps share its span
    QCOMPARE(core::stepGroupSpan(2047), std::int64_t(1));
    QCOMPARE(core::stepGroupSpan(std::int64_t(1) << 40), std::int64_t(4096));
    ui::StepSums sums;
    sums.reset(2);
    auto loss = [](int rank, std::int64_t step) { return rank + static_cast<double>(step % 7) / 8; };
    auto group = [&](int rank, std::int64_t first, std::int64_t last, ui::StepSums::Done& d) {
      double sum = 0;
      for (std::int64_t s = first; s <= last; ++s) sum += loss(rank, s);
      return sums.add(first, sum, 100.0 * (rank + 1) * static_cast<double>(last - first + 1), last - first + 1, d);
    };
    ui::StepSums::Done d;
    QVERIFY(!group(0, from, from + 2, d));  // rank 0 in two groups (its records left between)
    QVERIFY(!group(1, from, from + span - 1, d));
    QVERIFY(!group(0, from + 3, from + span - 2, d));
    QVERIFY(group(0, from + span - 1, from + span - 1, d));
    QCOMPARE(d.first, from);
    QCOMPARE(d.step, from + span - 1);
    double expected = 0;
    for (int r = 0; r < 2; ++r)
      for (std::int64_t s = from; s < from + span; ++s) expected += loss(r, s);
    QCOMPARE(d.loss, expected / static_cast<double>(2 * span));
    QCOMPARE(d.throughput, 100.0 + 200.0);
    QVERIFY(!group(1, from, from, d));  // that window is drawn
  }

  // A rank's status through a run: starting, running from its first step, failed or exited
  // as its process ends, restarting with the next attempt, then finished or stopped with the
  // run, but a rank that failed stays failed.
  // A SLURM run whose nodes come from its job: the host column, hidden while the profile names
  // no host, shows each rank's node once the run learns them (RunController::hosts).
  void theHostColumnShowsTheNodesLearnt() {
    ui::RankTable table;
    core::Profile p = core::defaultProfile();
    p.strategy.ranks = 2;
    p.hosts.launcher = "slurm";
    table.reset({p, 2, {"rank 0", "rank 1"}});
    int host = -1;
    for (int c = 0; c < table.columnCount(); ++c)
      if (table.horizontalHeaderItem(c)->text() == "host") host = c;
    QVERIFY(host >= 0);
    QVERIFY(table.isColumnHidden(host));
    table.setHosts({"node1", "node2"});
    QVERIFY(!table.isColumnHidden(host));
    for (int row = 0; row < 2; ++row)
      QCOMPARE(cell(&table, row, host), QString(table.rankAt(row) == 0 ? "node1" : "node2"));
  }
  void theRankTableFollowsEachRanksStatus() {
    ui::RankTable table;
    table.reset({core::defaultProfile(), 3, {"rank 0", "rank 1", "rank 2"}});
    auto status = [&](int rank) { return cell(&table, rank, 1); };
    for (int r = 0; r < 3; ++r) QCOMPARE(status(r), QString("starting"));
    std::vector<core::Record> records(3);
    records[0].step.rank = 0;
    records[0].step.step = 3;
    records[0].step.loss = 0.5;
    records[1].kind = core::Record::Kind::Group;
    records[1].step.rank = 2;
    records[1].step.step = 9;
    records[1].group.first = 8;
    records[1].group.count = 2;
    records[2].kind = core::Record::Kind::Validation;
    records[2].step.rank = 1;
    const ui::RecordSpan all(records.data(), records.data() + records.size());
    QSignalSpy firstSteps(&table, &ui::RankTable::firstStep);
    table.add(all);
    QCOMPARE(firstSteps.count(), 2);
    QCOMPARE(status(0), QString("running"));
    QCOMPARE(status(1), QString("starting"));  // a validation record holds no step
    QCOMPARE(status(2), QString("running"));
    QVERIFY(!table.allReported());
    QCOMPARE(table.lowestStep(), std::int64_t(-1));
    table.refresh();
    QCOMPARE(cell(&table, 2, 2), QString("9"));  // a group's last step
    table.rankExited(1, "exit code 3", true);
    QCOMPARE(status(1), QString("failed"));
    QCOMPARE(cell(&table, 1, 8), QString("exit code 3"));
    table.truncateAfter(2);
    for (int r = 0; r < 3; ++r) QCOMPARE(status(r), QString("restarting"));
    QCOMPARE(cell(&table, 1, 8), QString());
    records[2].kind = core::Record::Kind::Step;
    records[2].step.step = 4;
    table.add(all);
    QCOMPARE(firstSteps.count(), 5);
    QVERIFY(table.allReported());
    QCOMPARE(table.lowestStep(), std::int64_t(3));
    table.rankExited(0, "exit code 0", false);
    QCOMPARE(status(0), QString("exited"));
    table.rankExited(1, "exit code 3", true);
    table.rankExited(2, "stopped (exit code 0)", false, true);  // ptw stopped it
    QCOMPARE(status(2), QString("stopped"));
    QCOMPARE(cell(&table, 2, 8), QString("stopped (exit code 0)"));
    table.runEnded(ui::RankTable::Status::Stopped, -1, QString());
    QCOMPARE(status(0), QString("stopped"));
    QCOMPARE(status(1), QString("failed"));
    QCOMPARE(status(2), QString("stopped"));
    table.runEnded(ui::RankTable::Status::Failed, 2, "rank 2: out of memory");
    QCOMPARE(status(0), QString("stopped"));  // a failed run leaves the others as they were
    QCOMPARE(status(2), QString("failed"));
    QCOMPARE(cell(&table, 2, 7), QString("rank 2: out of memory"));
  }

  void editingFieldsChangesTheProfileAndMarksInvalidOnes() {
    ui::MainWindow w;
    w.setConfirmations(false);
    auto* e = w.editor();
    auto* start = w.findChild<QPushButton*>("start");
    QVERIFY(start && start->isEnabled());
    // Every profile field has an editor, named by its path.
    for (const auto& [path, value] : core::profileFields(core::defaultProfile()))
      QVERIFY2(e->field(QString::fromStdString(path)), path.c_str());
    e->setFieldText("strategy.ranks", "3");
    QCOMPARE(w.profile().strategy.ranks, 3);
    e->setFieldText("hyper.lr", "-0.5");
    QVERIFY(!start->isEnabled());
    QVERIFY2(start->toolTip().contains("hyper.lr: must be > 0"), qPrintable(start->toolTip()));
    QVERIFY(e->field("hyper.lr")->toolTip().contains("must be > 0"));
    QVERIFY(e->field("hyper.batch_size")->toolTip().isEmpty());
    e->setFieldText("hyper.lr", "abc");
    QVERIFY2(e->field("hyper.lr")->toolTip().contains("expected a number, got \"abc\""),
             qPrintable(e->field("hyper.lr")->toolTip()));
    e->setFieldText("hyper.lr", "0.02");
    QVERIFY(start->isEnabled());
    QCOMPARE(w.profile().hyper.lr, 0.02);
    e->setFieldText("model.hidden", "32, 16");
    QCOMPARE(w.profile().model.hidden, (std::vector<std::int64_t>{32, 16}));
    e->setFieldText("data.features", "x3, x1");
    QCOMPARE(w.profile().data.features, (std::vector<std::string>{"x3", "x1"}));
    core::Profile withFeatures = w.profile();
    ui::MainWindow shown;
    shown.setProfile(withFeatures);
    QCOMPARE(qobject_cast<QLineEdit*>(shown.editor()->field("data.features"))->text(), QString("x3, x1"));
    e->setFieldText("strategy.kind", "pool");
    e->setFieldText("strategy.pool_mode", "hogwild");
    QCOMPARE(w.profile().strategy.poolMode, std::string("hogwild"));
    e->setFieldText("hyper.nesterov", "true");  // needs momentum > 0
    QVERIFY(!start->isEnabled());
    QVERIFY(e->field("hyper.nesterov")->toolTip().contains("needs optimizer sgd and momentum > 0"));
  }

  // The form shows the fields the chosen kinds read: data.path for csv (and mnist), not for
  // synthetic data; bucket_mb for ddp; gpus on cuda. Each label carries the profile's help.
  void theEditorShowsOnlyTheFieldsThatApply() {
    ui::ProfileEditor e;
    auto shown = [&](const char* path) { return e.field(path)->isVisibleTo(&e); };
    e.setFieldText("data.kind", "synthetic-regression");
    QVERIFY(!shown("data.path"));
    QVERIFY(!shown("data.target"));
    QVERIFY(shown("data.noise"));
    e.setFieldText("data.kind", "csv");
    QVERIFY(shown("data.path"));
    QVERIFY(shown("data.target") && shown("data.features") && shown("data.task"));
    QVERIFY(!shown("data.noise"));
    e.setFieldText("data.kind", "mnist");
    QVERIFY(shown("data.path") && !shown("data.target"));
    e.setFieldText("data.kind", "synthetic-classification");
    QVERIFY(!shown("data.path"));
    e.setFieldText("strategy.kind", "ddp");
    QVERIFY(shown("strategy.bucket_mb") && shown("strategy.backend") && !shown("strategy.pool_mode"));
    e.setFieldText("strategy.kind", "pool");
    QVERIFY(!shown("strategy.bucket_mb") && shown("strategy.pool_mode"));
    QVERIFY(!shown("strategy.gpus"));
    e.setFieldText("model.kind", "mlp");
    QVERIFY(shown("model.hidden") && shown("model.activation") && !shown("model.path"));
    e.setFieldText("model.kind", "torchscript");
    QVERIFY(shown("model.path") && !shown("model.hidden"));
    // Every label's tooltip is the field's help line.
    int helped = 0;
    for (auto* label : e.findChildren<QLabel*>())
      if (label->text() == "bucket_mb") {
        QCOMPARE(label->toolTip(), QString::fromStdString(core::fieldHelp().at("strategy.bucket_mb")).remove('`'));
        ++helped;
      }
    QCOMPARE(helped, 1);
  }

  // hosts.interface, shown for ranks on other hosts only, is picked from this machine's
  // interfaces with their addresses (loopback is always there) by keyboard; a pick writes the
  // interface's name alone, the empty choice none, and a name typed (as another host may call
  // its interface) is taken as typed.
  void theInterfacePickerListsThisMachinesInterfaces() {
    ui::ProfileEditor e;
    e.show();
    QVERIFY(QTest::qWaitForWindowExposed(&e));
    QVERIFY(!e.field("hosts.interface")->isVisibleTo(&e));
    e.setFieldText("hosts.launcher", "slurm");  // the ranks' network, not how ssh reaches them
    QVERIFY(e.field("hosts.interface")->isVisibleTo(&e));
    for (const char* f :
         {"hosts.ssh_user", "hosts.ssh_port", "hosts.ssh_identity", "hosts.ssh_config", "hosts.alive_interval_s"})
      QVERIFY2(!e.field(f)->isVisibleTo(&e), f);
    e.setFieldText("hosts.launcher", "ssh");
    QVERIFY(e.field("hosts.interface")->isVisibleTo(&e));
    QVERIFY(e.field("hosts.ssh_user")->isVisibleTo(&e));
    auto* c = qobject_cast<QComboBox*>(e.field("hosts.interface"));
    QVERIFY(c && c->isEditable());
    QCOMPARE(c->itemData(0).toString(), QString());
    QVERIFY2(c->itemText(0).startsWith("(none: "), qPrintable(c->itemText(0)));
    QVERIFY(c->findText(QStringLiteral("lo — 127.0.0.1")) > 0);
    QCOMPARE(c->itemData(c->findText(QStringLiteral("lo — 127.0.0.1"))).toString(), QStringLiteral("lo"));
    c->setFocus();
    for (int i = 0; i < c->count() && c->currentData().toString() != "lo"; ++i) QTest::keyClick(c, Qt::Key_Down);
    QCOMPARE(c->currentText(), QStringLiteral("lo"));
    QCOMPARE(e.profile().hosts.interface, std::string("lo"));
    QCOMPARE(c->toolTip(), QString());  // no error at the field
    for (int i = 0; i < c->count() && c->currentIndex() > 0; ++i) QTest::keyClick(c, Qt::Key_Up);
    QCOMPARE(c->currentText(), QString());
    QCOMPARE(e.profile().hosts.interface, std::string());
    QTest::keyClicks(c->lineEdit(), "ib0");
    QCOMPARE(e.profile().hosts.interface, std::string("ib0"));
    QCOMPARE(c->count(), static_cast<int>(core::networkInterfaces().size()) + 1);  // nothing typed is added
    core::Profile p = e.profile();
    p.hosts.interface = "eth9";
    e.setProfile(p);
    QCOMPARE(c->currentText(), QStringLiteral("eth9"));
    QCOMPARE(e.profile().hosts.interface, std::string("eth9"));
    e.setFieldText("hosts.interface", "not an interface");
    QVERIFY2(c->toolTip().contains("expected a network interface's name"), qPrintable(c->toolTip()));
  }

  // strategy.kind command shows the Command group and hides what only ptw's engine reads
  // (model, data, optimizer, checkpoints). The program, the arguments (one a line, spaces and
  // commas kept), the environment table and the folder go into the profile as its JSON holds
  // them; a bad variable name or template is marked at its item and holds Start back.
  void theCommandEditorWritesTheCommandSection() {
    ui::MainWindow w;
    w.setConfirmations(false);
    w.show();
    auto* e = w.editor();
    auto shown = [&](const char* path) { return e->field(path)->isVisibleTo(e); };
    auto* group = e->findChild<QWidget*>("group.command");
    QVERIFY(group && !group->isVisibleTo(e));
    QVERIFY(shown("model.kind") && shown("data.kind") && shown("hyper.optimizer") && shown("run.eval_every"));
    e->setFieldText("strategy.kind", "command");
    QVERIFY(group->isVisibleTo(e));
    for (const char* path :
         {"command.program", "command.args", "command.env", "command.cwd", "command.pattern", "command.report_ranks",
          "command.stop_grace_s", "strategy.ranks", "hyper.max_steps", "run.timeout_s"})
      QVERIFY2(shown(path), path);
    for (const char* path : {"model.kind", "data.kind", "data.samples", "hyper.optimizer", "hyper.weight_decay",
                             "hyper.lr", "hyper.batch_size", "hyper.seed", "run.eval_every", "run.checkpoint_every",
                             "run.threads_per_rank", "run.loader_threads"})
      QVERIFY2(!shown(path), path);
    QVERIFY(!e->findChild<QWidget*>("group.model")->isVisibleTo(e));
    QVERIFY(!e->findChild<QWidget*>("group.data")->isVisibleTo(e));
    QVERIFY(e->findChild<QToolButton*>("command.program.browse")->isVisibleTo(e));
    QVERIFY(e->findChild<QToolButton*>("command.cwd.browse")->isVisibleTo(e));
    auto* start = w.findChild<QPushButton*>("start");
    QVERIFY(!start->isEnabled());  // no program yet
    QVERIFY2(e->field("command.program")->toolTip().contains("needs a program"),
             qPrintable(e->field("command.program")->toolTip()));

    e->setFieldText("command.program", "/usr/bin/python3");
    auto* args = qobject_cast<QPlainTextEdit*>(e->field("command.args"));
    QVERIFY(args);
    args->setPlainText("train.py\n--name\nmy run, v2\n--lr\n{hyper.lr}\n");
    e->setFieldText("command.cwd", "/tmp");
    auto* env = qobject_cast<QTableWidget*>(e->field("command.env"));
    QVERIFY(env);
    auto* add = e->findChild<QToolButton*>("command.env.add");
    QTest::mouseClick(add, Qt::LeftButton);
    QCOMPARE(env->rowCount(), 1);
    QVERIFY(start->isEnabled());  // an empty row is no entry yet
    env->item(0, 0)->setText("OMP_NUM_THREADS");
    env->item(0, 1)->setText("1");
    QTest::mouseClick(add, Qt::LeftButton);
    env->item(1, 0)->setText("GREETING");
    env->item(1, 1)->setText("a=b c");
    const core::Profile p = w.profile();
    QCOMPARE(p.command.program, std::string("/usr/bin/python3"));
    QCOMPARE(p.command.args, (std::vector<std::string>{"train.py", "--name", "my run, v2", "--lr", "{hyper.lr}"}));
    QCOMPARE(p.command.env, (std::vector<std::string>{"OMP_NUM_THREADS=1", "GREETING=a=b c"}));
    QCOMPARE(p.command.cwd, std::string("/tmp"));
    QVERIFY(shown("hyper.lr"));  // the arguments pass it on
    QVERIFY2(start->isEnabled(), qPrintable(w.blockingReason()));
    auto* hint = w.findChild<QLabel*>("firstRunHint");
    QVERIFY2(
        hint->text().contains("2 processes of your command\n/usr/bin/python3 train.py --name my run, v2 --lr 0.01"),
        qPrintable(hint->text()));

    // An invalid key: its row and the table say why, and Start waits.
    env->item(1, 0)->setText("1BAD");
    QVERIFY(!start->isEnabled());
    QVERIFY(env->styleSheet().contains("#b00020"));
    QVERIFY2(env->toolTip().contains("env[1]: expected KEY=VALUE"), qPrintable(env->toolTip()));
    QVERIFY2(env->item(1, 0)->toolTip().contains("expected KEY=VALUE"), qPrintable(env->item(1, 0)->toolTip()));
    QVERIFY(env->item(0, 0)->toolTip().isEmpty());
    QVERIFY2(start->toolTip().contains("command.env[1]: expected KEY=VALUE"), qPrintable(start->toolTip()));
    env->item(1, 0)->setText("GREETING");
    QVERIFY(start->isEnabled());
    QVERIFY(env->styleSheet().isEmpty());

    // A template that names no field, at its line.
    args->setPlainText("train.py\n{hyper.lrr}");
    QVERIFY(!start->isEnabled());
    QVERIFY2(args->toolTip().contains("args[1]: {hyper.lrr} names no profile field"), qPrintable(args->toolTip()));
    QCOMPARE(args->extraSelections().size(), 1);
    QCOMPARE(args->extraSelections().front().cursor.blockNumber(), 1);
    // A field a template names is a knob of the run: shown.
    QVERIFY(!shown("hyper.momentum"));
    args->setPlainText("train.py\n--momentum\n{hyper.momentum}");
    QVERIFY(start->isEnabled());
    QVERIFY(args->extraSelections().isEmpty());
    QVERIFY(shown("hyper.momentum"));

    // Removing the selected row.
    env->selectRow(0);
    QTest::mouseClick(e->findChild<QToolButton*>("command.env.remove"), Qt::LeftButton);
    QCOMPARE(w.profile().command.env, (std::vector<std::string>{"GREETING=a=b c"}));
    // Back to ddp: the command group goes, the model and data come back.
    e->setFieldText("strategy.kind", "ddp");
    QVERIFY(!group->isVisibleTo(e) && shown("model.kind") && shown("data.kind"));
  }

  // A command profile shows what applies to it and nothing else: of the strategy its kind,
  // ranks and device (ptw checks for a GPU before a cuda run), of the hyperparameters
  // max_steps (its progress and warm-up); any other of them once a template passes it on.
  void aCommandProfileShowsOnlyWhatItReads() {
    ui::MainWindow w;
    w.setConfirmations(false);
    w.show();
    auto* e = w.editor();
    core::Profile p = core::defaultProfile();
    p.strategy.kind = "command";
    p.strategy.device = "cuda";  // where ptw's own strategies show strategy.gpus
    p.command.program = "/usr/bin/python3";
    p.command.args = {"train.py"};
    const std::set<std::string> reads = {"strategy.kind", "strategy.ranks", "strategy.device", "hyper.max_steps"};
    auto knob = [&](const std::string& path) {
      return (path.rfind("strategy.", 0) == 0 || path.rfind("hyper.", 0) == 0) && !reads.count(path);
    };
    std::vector<std::string> knobs;
    for (const auto& [path, json] : core::profileFields(p))
      if (knob(path)) knobs.push_back(path);
    QVERIFY(knobs.size() >= 20);  // every other field of the two sections
    e->setProfile(p);
    QVERIFY2(e->errors().empty(), qPrintable(w.blockingReason()));
    for (const auto& path : reads) QVERIFY2(e->field(QString::fromStdString(path))->isVisibleTo(e), path.c_str());
    for (const auto& path : knobs) QVERIFY2(!e->field(QString::fromStdString(path))->isVisibleTo(e), path.c_str());
    // The program sets its own batch: the devices' line gives the world size alone.
    auto* summary = e->devicePicker()->findChild<QLabel*>("devices.summary");
    QCOMPARE(summary->text(), QString("world size 2"));
    // Named by a template, each is a knob of the run, shown.
    for (const auto& path : knobs) p.command.args.push_back("{" + path + "}");
    e->setProfile(p);
    QVERIFY2(e->errors().empty(), qPrintable(w.blockingReason()));
    for (const auto& path : knobs) QVERIFY2(e->field(QString::fromStdString(path))->isVisibleTo(e), path.c_str());
  }

  // The sweep tab of a command profile offers its process counts alone and runs the program with
  // each, the one-process run first, whatever strategies are ticked; back to ptw's own strategy,
  // the strategies return. The program reports 8 samples in 5 ms a process: 1600 samples/s each.
  void aCommandProfilesSweepVariesItsProcessesOnly() {
    QTemporaryDir dir, runs;
    QFile script(dir.filePath("train.py"));
    QVERIFY(script.open(QIODevice::WriteOnly));
    script.write(R"(import json, os
ch = open(os.environ["PTW_METRICS"], "w", buffering=1)
for step in range(1, 31):
    ch.write(json.dumps({"step": step, "loss": 1.0 / step, "samples": 8, "step_ms": 5.0}) + "\n")
)");
    script.close();
    ui::MainWindow w;
    w.setConfirmations(false);
    w.setRunsDirectory(runs.path());
    w.show();
    auto* panel = w.sweep();
    auto* strategies = panel->findChild<QWidget*>("sweep.strategies");
    QVERIFY(strategies->isVisibleTo(panel));
    w.findChild<QCheckBox*>("sweep.ddp")->setChecked(true);
    core::Profile p = core::defaultProfile();
    p.strategy.kind = "command";
    p.command.program = "/usr/bin/python3";
    p.command.args = {"train.py"};
    p.command.cwd = dir.path().toStdString();
    w.setProfile(p);
    QVERIFY(!strategies->isVisibleTo(panel));
    auto* workers = panel->findChild<QLineEdit*>("sweep.workers");
    auto* form = qobject_cast<QFormLayout*>(workers->parentWidget()->layout()->itemAt(0)->layout());
    QVERIFY(form);
    QCOMPARE(qobject_cast<QLabel*>(form->labelForField(workers))->text(), QString("Process counts (strategy.ranks)"));
    workers->setText("2, 1");
    panel->findChild<QSpinBox*>("sweep.steps")->setValue(30);
    QSignalSpy done(panel, &ui::SweepPanel::finished);
    QVERIFY2(panel->start(), qPrintable(panel->findChild<QLabel*>("sweep.status")->text()));
    QVERIFY(done.wait(120000));
    const auto& points = panel->points();
    QCOMPARE(points.size(), std::size_t(2));
    for (int i = 0; i < 2; ++i) {
      const auto& point = points[static_cast<std::size_t>(i)];
      QCOMPARE(point.strategy, std::string("command"));
      QCOMPARE(point.workers, i + 1);
      QCOMPARE(point.status, std::string("finished"));
      QVERIFY2(std::abs(point.samplesPerS - 1600.0 * point.workers) < 1e-6,
               qPrintable(QString::number(point.samplesPerS)));
      QCOMPARE(panel->table()->item(i, 0)->text(), QString("command"));
      QCOMPARE(panel->table()->item(i, 1)->text(), QString::number(i + 1));
    }
    const auto stored = core::RunStore(runs.path().toStdString()).runs();
    QCOMPARE(stored.size(), std::size_t(2));
    for (const auto& run : stored) QCOMPARE(run.strategy, std::string("command"));
    w.editor()->setFieldText("strategy.kind", "ddp");
    QVERIFY(strategies->isVisibleTo(panel));
    QCOMPARE(qobject_cast<QLabel*>(form->labelForField(workers))->text(), QString("Worker counts"));
  }

  // A script profile opens as it is, and what is saved after editing opens as it was saved.
  void aCommandProfileRoundTrips_data() {
    QTest::addColumn<QString>("file");
    QTest::newRow("records") << "script-ddp.json";
    QTest::newRow("pattern") << "script-ddp-pattern.json";
    QTest::newRow("mpirun") << "script-mpi.json";
  }
  void aCommandProfileRoundTrips() {
    QFETCH(QString, file);
    QTemporaryDir dir;
    ui::MainWindow w;
    w.setConfirmations(false);
    const QString path = qEnvironmentVariable("PTW_SOURCE_DIR") + "/resources/profiles/" + file;
    QString error;
    QVERIFY2(w.openProfile(path, &error), qPrintable(error));
    core::Profile expected = core::loadProfile(path.toStdString());
    QVERIFY(w.profile() == expected);
    QVERIFY(!w.isWindowModified());
    QVERIFY2(w.blockingReason().isEmpty(), qPrintable(w.blockingReason()));
    auto* args = qobject_cast<QPlainTextEdit*>(w.editor()->field("command.args"));
    QCOMPARE(args->toPlainText().split('\n').size(), static_cast<int>(expected.command.args.size()));
    args->appendPlainText("--note\ttwo words");
    expected.command.args.push_back("--note\ttwo words");
    QStringList env;
    for (const auto& entry : expected.command.env) env << QString::fromStdString(entry);
    env << "PTW_TEST_NOTE=x = y";
    expected.command.env.push_back("PTW_TEST_NOTE=x = y");
    w.editor()->setFieldText("command.env", env.join('\n'));
    QVERIFY(w.isWindowModified());
    QVERIFY(w.profile() == expected);
    QVERIFY2(w.saveProfile(dir.filePath("saved.json"), &error), qPrintable(error));
    QVERIFY(core::loadProfile(dir.filePath("saved.json").toStdString()) == expected);
    ui::MainWindow other;
    other.setConfirmations(false);
    QVERIFY2(other.openProfile(dir.filePath("saved.json"), &error), qPrintable(error));
    QVERIFY(other.profile() == expected);
  }

  // Every editor writes its own field: each field is given a value other than the default
  // (the next choice, a flipped flag, another number, list or text) through its editor, and
  // the profile then holds exactly those values, field by field.
  void everyEditorWritesItsOwnField() {
    ui::MainWindow w;
    w.setConfirmations(false);
    auto* e = w.editor();
    std::map<std::string, QJsonValue> expected;
    for (const auto& [path, json] : core::profileFields(core::defaultProfile())) {
      const QString text = QString::fromStdString(json);
      const QJsonValue v = QJsonDocument::fromJson(("[" + text + "]").toUtf8()).array().at(0);
      QJsonValue other;
      QString edit;
      if (v.isBool()) {
        other = !v.toBool();
        edit = other.toBool() ? "true" : "false";
      } else if (v.isDouble()) {
        const bool integral = !text.contains('.') && !text.contains('e');
        other = integral ? v.toDouble() + 3 : v.toDouble() * 0.5 + 0.25;
        edit = QString::number(other.toDouble(), 'g', 17);
      } else if (path == "command.args" || path == "command.env") {
        // One item a line, taken whole: spaces, commas and '=' stay in the item.
        const bool args = path == "command.args";
        other = args ? QJsonArray{"a b", "c,d"} : QJsonArray{"A=1", "B=x=y z"};
        edit = args ? "a b\nc,d" : "A=1\nB=x=y z";
      } else if (v.isArray()) {
        const bool words = path == "data.features" || path == "hosts.hosts";
        other = words ? QJsonArray{"a", "b"} : QJsonArray{2, 3};
        edit = words ? "a, b" : "2, 3";
      } else {
        const auto choices = core::fieldChoices(path);
        const std::string now = v.toString().toStdString();
        const auto at = std::find(choices.begin(), choices.end(), now);
        other =
            choices.empty()
                ? v.toString() + "x"
                : QString::fromStdString(at == choices.end() || at + 1 == choices.end() ? choices.front() : *(at + 1));
        edit = other.toString();
      }
      expected[path] = other;
      e->setFieldText(QString::fromStdString(path), edit);
    }
    QVERIFY(expected.size() >= 30);  // every section's fields, not a few
    for (const auto& [path, json] : core::profileFields(w.profile())) {
      const QJsonValue got = QJsonDocument::fromJson(("[" + QString::fromStdString(json) + "]").toUtf8()).array().at(0);
      QVERIFY2(got == expected.at(path), qPrintable(QString::fromStdString(path + " = " + json)));
    }
  }

  // Ticking GPUs picks them by index (strategy.gpus), not the first N; a profile that
  // lists GPUs ticks those, also when the GPUs are listed after it was opened.
  void devicePickerPicksGpusByIndex() {
    ui::MainWindow w;
    w.setConfirmations(false);
    auto* picker = w.editor()->devicePicker();
    QTRY_VERIFY_WITH_TIMEOUT(!picker->probing(), 30000);  // this machine's own list, first
    core::Profile opened = w.profile();
    opened.strategy.device = "cuda";
    opened.strategy.gpus = {1, 3};
    w.setProfile(opened);
    std::vector<ui::DevicePicker::Device> devices(1);  // four GPUs, as `ptw-worker --devices` lists them
    devices[0].kind = "cpu";
    devices[0].cores = 2;
    for (int i = 0; i < 4; ++i) {
      ui::DevicePicker::Device d;
      d.kind = "cuda";
      d.index = i;
      d.name = "GPU";
      devices.push_back(d);
    }
    picker->setDevices(devices);
    auto gpu = [&](int i) { return picker->findChild<QCheckBox*>(QString("device.cuda.%1").arg(i)); };
    QVERIFY(gpu(0) && gpu(3));
    QVERIFY(!gpu(0)->isChecked() && gpu(1)->isChecked() && !gpu(2)->isChecked() && gpu(3)->isChecked());
    gpu(1)->setChecked(false);
    gpu(3)->setChecked(false);
    gpu(2)->setChecked(true);
    gpu(3)->setChecked(true);
    core::Profile p = w.profile();
    QCOMPARE(p.strategy.device, std::string("cuda"));
    QCOMPARE(p.strategy.ranks, 2);
    QCOMPARE(p.strategy.gpus, (std::vector<std::int64_t>{2, 3}));
    QVERIFY(core::validate(p).empty());
    gpu(2)->setChecked(false);
    gpu(3)->setChecked(false);
    gpu(0)->setChecked(true);
    QCOMPARE(w.profile().strategy.ranks, 1);
    QVERIFY(w.profile().strategy.gpus.empty());  // cuda:0 onwards is the default
    p.strategy.gpus = {1, 3};
    w.setProfile(p);
    QVERIFY(!gpu(0)->isChecked() && gpu(1)->isChecked() && !gpu(2)->isChecked() && gpu(3)->isChecked());
    QCOMPARE(w.profile().strategy.gpus, (std::vector<std::int64_t>{1, 3}));
  }

  // The CPU row names the OpenBLAS kernels ranks train with, as `ptw-worker --blas` does
  // (Note [BLAS kernels]).
  void cpuRowNamesTheBlasKernelsRanksTrainWith() {
    QProcess blas;
    blas.start(QString::fromStdString(core::Launcher::defaultWorkerPath()), {"--blas"});  // the picker's worker
    QVERIFY(blas.waitForFinished(60000) && blas.exitCode() == 0);
    const QString kernels = QJsonDocument::fromJson(blas.readAllStandardOutput()).object()["openblas_core"].toString();
    ui::MainWindow w;
    auto* picker = w.editor()->devicePicker();
    QTRY_VERIFY_WITH_TIMEOUT(!picker->probing(), 30000);
    QVERIFY(!picker->devices().empty());
    QCOMPARE(picker->devices().front().openblasCore, kernels);
    auto* line = picker->findChild<QLabel*>("device.cpu.blas");
    QCOMPARE(line != nullptr, !kernels.isEmpty());
    if (line) QCOMPARE(line->text(), "OpenBLAS " + kernels + " kernels");
  }

  // Note [Device probe waits for runs]: a run started as the window opens (as --start does)
  // trains without `ptw-worker --devices` beside it, and the list comes after the run; a
  // probe already running when Start is pressed is stopped and asked again after the run.
  void theDeviceProbeWaitsForTheRun() {
    const int me = static_cast<int>(::getpid());
    for (bool probeFirst : {false, true}) {
      QTemporaryDir runs;
      ui::MainWindow w;
      showQuietly(w, runs, "100000000");
      auto* picker = w.editor()->devicePicker();
      if (probeFirst) QTRY_VERIFY_WITH_TIMEOUT(!test::liveWorkersWith("--devices", me).empty(), 10000);
      w.startRun();
      QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) >= 10 && w.lossChart()->pointCount(1) >= 10, 20000);
      for (int i = 0; i < 20; ++i) {  // two seconds of training: longer than a probe takes
        QVERIFY2(test::liveWorkersWith("--devices", me).empty(), probeFirst ? "probe first" : "run first");
        QVERIFY(picker->probing());
        QTest::qWait(100);
      }
      QCOMPARE(picker->devices().size(), std::size_t(1));
      QCOMPARE(picker->devices().front().memoryBytes, qint64(0));  // the CPU as Qt sees it, so far
      // which says no more than it knows: no memory, and no verdict on GPUs yet
      auto* cpuRow = picker->findChild<QCheckBox*>("device.cpu");
      QVERIFY2(cpuRow && !cpuRow->text().contains("GiB"), qPrintable(cpuRow ? cpuRow->text() : QString()));
      auto* note = picker->findChild<QLabel*>("device.noGpu");
      QVERIFY2(note && note->text().contains("listed when the run ends"), qPrintable(note ? note->text() : QString()));
      w.stopRun();
      QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("stopped"), 15000);
      QTRY_VERIFY_WITH_TIMEOUT(!picker->probing(), 30000);
      QVERIFY(picker->devices().front().memoryBytes > 0);  // the worker's list
      QTRY_VERIFY(picker->findChild<QCheckBox*>("device.cpu")->text().contains("GiB"));
      note = picker->findChild<QLabel*>("device.noGpu");  // on this machine, which has none
      QVERIFY(note);
      QCOMPARE(note->text(), QStringLiteral("No CUDA device visible to LibTorch."));
    }
  }

  // Help > About says the version project() sets, the one `ptw --version` prints.
  void helpAboutSaysTheVersion() {
    ui::MainWindow w;
    w.setConfirmations(false);
    w.show();
    auto* about = w.findChild<QAction*>("aboutAction");
    QVERIFY(about);
    QVERIFY(about->isEnabled());
    about->trigger();
    QMessageBox* box = nullptr;
    QTRY_VERIFY((box = w.findChild<QMessageBox*>("aboutBox")) && box->isVisible());
    QVERIFY2(box->text().contains(QStringLiteral("ptw %1").arg(ptw::kVersion)), qPrintable(box->text()));
    QProcess ptwVersion;
    ptwVersion.start(qEnvironmentVariable("PTW_BIN_DIR") + "/ptw", {"--version"});
    QVERIFY(ptwVersion.waitForFinished(30000));
    QCOMPARE(QString::fromUtf8(ptwVersion.readAllStandardOutput()).trimmed(),
             QStringLiteral("ptw %1").arg(ptw::kVersion));
    QPointer<QMessageBox> gone(box);
    box->accept();
    QTRY_VERIFY(gone.isNull());  // closes itself
  }

  void openSaveRecentAndUnsavedMarker() {
    QTemporaryDir dir;
    ui::MainWindow w;
    w.setConfirmations(false);
    QString error;
    const QString seed = qEnvironmentVariable("PTW_SOURCE_DIR") + "/resources/profiles/seed-ddp.json";
    QVERIFY2(w.openProfile(seed, &error), qPrintable(error));
    core::Profile expected = core::defaultProfile();
    expected.hyper.maxSteps = 200000;  // the example runs long enough to watch
    QVERIFY(w.profile() == expected);
    QVERIFY(!w.isWindowModified());
    QCOMPARE(w.recentFiles().value(0), QFileInfo(seed).absoluteFilePath());
    w.editor()->setFieldText("hyper.max_steps", "77");
    QVERIFY(w.isWindowModified());
    QVERIFY(w.windowTitle().contains("seed-ddp.json"));
    QVERIFY(w.saveProfile(dir.filePath("saved.json"), &error));
    QVERIFY(!w.isWindowModified());
    QCOMPARE(w.recentFiles().value(0), dir.filePath("saved.json"));
    ui::MainWindow other;
    other.setConfirmations(false);
    QVERIFY(other.openProfile(dir.filePath("saved.json"), &error));
    QCOMPARE(other.profile().hyper.maxSteps, std::int64_t(77));
    QCOMPARE(qobject_cast<QLineEdit*>(other.editor()->field("hyper.max_steps"))->text(), QString("77"));

    // A bad file changes nothing and says why.
    QFile bad(dir.filePath("bad.json"));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("{\"strategy\": {\"ranks\": 0}}");
    bad.close();
    QVERIFY(!other.openProfile(dir.filePath("bad.json"), &error));
    QVERIFY2(error.contains("strategy.ranks: must be >= 1"), qPrintable(error));
    QCOMPARE(other.profile().hyper.maxSteps, std::int64_t(77));
  }

  // What stops a run before it starts is said in the line headless prints for it (test_headless),
  // under Start and above the log, and nothing is started: a profile that does not exist, a
  // data file or column that does not, no CUDA device for device cuda.
  void problemsBeforeARunReadAsHeadlessSaysThem() {
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "20");
    auto* status = w.findChild<QLabel*>("status");
    auto* problems = w.findChild<QPlainTextEdit*>("logProblems");
    const core::Profile before = w.profile();
    QString error;
    QVERIFY(!w.openProfile("/nonexistent/p.json", &error));
    const QString missingProfile =
        "profile /nonexistent/p.json does not exist; give an existing profile file to -p/--profile (examples: "
        "resources/profiles/)";
    QCOMPARE(error, missingProfile);
    QCOMPARE(status->text(), missingProfile);
    QVERIFY(problems->isVisibleTo(&w));
    QCOMPARE(problems->toPlainText(), missingProfile);
    QVERIFY(w.profile() == before);

    core::Profile csv = core::loadProfile(test::sourcePath("resources/profiles/ddp-csv-regression.json").toStdString());
    const QString file = QDir::cleanPath(test::sourcePath("resources/data/regression.csv"));
    auto startFails = [&](const core::Profile& p, const QString& expected) {
      w.setProfile(p);
      QVERIFY2(w.blockingReason().isEmpty(), qPrintable(w.blockingReason()));
      problems->clear();
      QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
      QVERIFY(!w.controller()->isRunning());
      QCOMPARE(status->text(), expected);
      QCOMPARE(problems->toPlainText(), expected);
      QVERIFY(QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty());  // no run folder
      QVERIFY(test::livePtwWorkers(static_cast<int>(::getpid())).empty());
    };
    core::Profile p = csv;
    p.data.path = "/nonexistent/d.csv";
    startFails(p, "data.path: /nonexistent/d.csv does not exist; set data.path to an existing CSV file");
    p = csv;
    p.data.target = "z";
    startFails(p, "data.target: column \"z\" is not in " + file +
                      " (columns: x1, x2, x3, x4, y); set data.target to one of them");
    p = csv;
    p.data.features = {"x1", "x9"};
    startFails(p, "data.features: column \"x9\" is not in " + file +
                      " (columns: x1, x2, x3, x4, y); set data.features to one of them");
    p = core::defaultProfile();
    p.strategy.device = "cuda";
    if (!core::deviceProblem(p, test::workerPath()).empty())
      startFails(p,
                 "strategy.device: \"cuda\" but LibTorch sees no CUDA device on this machine (this LibTorch has "
                 "no CUDA, or no driver is loaded); use \"cpu\"");
  }

  // More CPU ranks than cores: the window says so before Start, in the line headless prints,
  // and again above the log once the run starts; the run goes on to its end.
  void moreRanksThanCoresIsSaidAndTheRunGoesOn() {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "20");
    auto* status = w.findChild<QLabel*>("status");
    w.editor()->setFieldText("strategy.ranks", QString::number(cores + 1));
    const QString expected = QString(
                                 "strategy.ranks: %1 ranks on %2 core(s); they will take turns and each step "
                                 "waits for the slowest; set strategy.ranks to %2 or fewer for a fair speed")
                                 .arg(cores + 1)
                                 .arg(cores);
    QCOMPARE(status->text(), expected);
    QVERIFY2(w.findChild<QLabel*>("firstRunHint")->text().endsWith("\n" + expected),
             qPrintable(w.findChild<QLabel*>("firstRunHint")->text()));
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QVERIFY(w.controller()->isRunning());
    auto* problems = w.findChild<QPlainTextEdit*>("logProblems");
    QVERIFY2(problems->toPlainText().contains("warning: " + expected), qPrintable(problems->toPlainText()));
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 60000);
    QCOMPARE(cell(w.rankTable(), cores, 2), QString("20"));
  }

  // The run store fills up: the run fails with the line headless prints, naming the runs
  // folder to free space in and the way around it.
  void aFullDiskSaysWhereToFreeSpace() {
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "1000000000");
    w.controller()->setStoreLimitKib(640);
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("failed"), 60000);
    const QString advice = "; the disk holding " + runs.path() +
                           " is full: free space there or pass --runs-dir another folder, then resume the run from "
                           "its last checkpoint (run.resume_from)";
    const QString status = w.findChild<QLabel*>("status")->text();
    QVERIFY2(status.startsWith("Run failed: ") && status.endsWith(advice), qPrintable(status));
    const QString problems = w.findChild<QPlainTextEdit*>("logProblems")->toPlainText();
    QVERIFY2(problems.contains(status.mid(QString("Run failed: ").size())), qPrintable(problems));
    QVERIFY(test::livePtwWorkers(static_cast<int>(::getpid())).empty());
  }

  void preflightShowsShapesOrTheProblem() {
    ui::MainWindow w;
    w.setConfirmations(false);
    QSignalSpy spy(w.editor(), &ui::ProfileEditor::preflightFinished);
    w.editor()->runPreflight();
    QVERIFY(spy.wait(30000));
    QVERIFY(spy.at(0).at(0).toBool());
    QVERIFY2(spy.at(0).at(1).toString().contains("input [10] → output [1]"), qPrintable(spy.at(0).at(1).toString()));
    w.editor()->setFieldText("model.kind", "torchscript");
    w.editor()->setFieldText("model.path", "/nonexistent/model.pt");
    w.editor()->runPreflight();
    QVERIFY(spy.wait(30000));
    QVERIFY(!spy.at(1).at(0).toBool());
    QVERIFY2(spy.at(1).at(1).toString().contains("model.path: cannot load TorchScript"),
             qPrintable(spy.at(1).at(1).toString()));
    // A worker program that cannot start is said, and the next check runs.
    w.editor()->setFieldText("model.kind", "linear");
    const QByteArray worker = qgetenv("PTW_WORKER");
    qputenv("PTW_WORKER", "/nonexistent/ptw-worker");
    w.editor()->runPreflight();
    QVERIFY(spy.wait(30000));
    QVERIFY(!spy.at(2).at(0).toBool());
    QVERIFY2(spy.at(2).at(1).toString().contains("Cannot start the worker program /nonexistent/ptw-worker"),
             qPrintable(spy.at(2).at(1).toString()));
    if (worker.isNull())
      qunsetenv("PTW_WORKER");
    else
      qputenv("PTW_WORKER", worker);
    w.editor()->runPreflight();
    QVERIFY(spy.wait(30000));
    QVERIFY2(spy.at(3).at(0).toBool(), qPrintable(spy.at(3).at(1).toString()));
  }

  // Check workload on image data shows the input as C×H×W and 16 training images after
  // augmentation, enlarged by whole pixels to about 256 across; on data that is not images, none.
  // (ResNet-18 checks in eval mode: in training mode its BatchNorm refuses a single sample.)
  void preflightShowsSampleImages_data() {
    QTest::addColumn<QString>("profile");
    QTest::addColumn<QString>("shapes");
    QTest::addColumn<int>("side");  // of the grid as shown
    QTest::newRow("image folder, 16×16") << "dataparallel-image-folder.json"
                                         << "input 3×16×16 → output [3]" << 3 * (4 * 17 - 1);
    QTest::newRow("CIFAR, ResNet-18") << "ddp-resnet18-cifar.json"
                                      << "input 3×32×32 → output [10]" << 4 * 33 - 1;
  }
  void preflightShowsSampleImages() {
    QFETCH(QString, profile);
    QFETCH(QString, shapes);
    QFETCH(int, side);
    const QString path = test::sourcePath("resources/profiles/" + profile);
    if (!QFile::exists(test::sourcePath("resources/data/resnet18-cifar.scripted.pt")))
      QSKIP("the image examples' data is not generated (the build's ptw_example_data target)");
    ui::MainWindow w;
    w.setConfirmations(false);
    QString error;
    QVERIFY2(w.openProfile(path, &error), qPrintable(error));
    QSignalSpy spy(w.editor(), &ui::ProfileEditor::preflightFinished);
    w.editor()->runPreflight();
    QVERIFY(spy.wait(30000));
    const QString text = spy.at(0).at(1).toString();
    QVERIFY2(spy.at(0).at(0).toBool(), qPrintable(text));
    QVERIFY2(text.contains(shapes) && text.contains("16 training images after augmentation"), qPrintable(text));
    auto* images = w.editor()->findChild<QLabel*>("preflightImages");
    QVERIFY(images && !images->isHidden());
    QCOMPARE(images->pixmap().size(), QSize(side, side));
    w.newProfile();  // synthetic data: shapes, no images
    w.editor()->runPreflight();
    QVERIFY(spy.wait(30000));
    QVERIFY(spy.at(1).at(0).toBool());
    QVERIFY(images->isHidden());
  }

  // An image model's user watches validation accuracy, the learning rate and the model's
  // size: the accuracy chart holds the stored validation accuracies (in %), the learning-rate
  // chart each step's stored rate, and the rank table the model's parameter count, checked
  // against a count made here from the model's shape. A run with no accuracy says why.
  void accuracyLearningRateAndModelSize_data() {
    QTest::addColumn<QString>("profile");  // an example, or "" for the default with the fields below
    QTest::addColumn<QStringList>("fields");
    QTest::addColumn<qlonglong>("parameters");
    QTest::addColumn<QString>("note");  // what the accuracy chart's place says, or "" for the chart
    QTest::addColumn<int>("steps");
    // mlp 10 -> 16 -> 3: weights and biases of two layers.
    QTest::newRow("mlp, DDP, classification")
        << "" << QStringList{"model.kind=mlp",         "model.hidden=16",
                             "model.out_features=3",   "data.kind=synthetic-classification",
                             "data.val_fraction=0.25", "run.eval_every=10",
                             "hyper.schedule=cosine",  "hyper.warmup_steps=5"}
        << qlonglong(10 * 16 + 16 + 16 * 3 + 3) << "" << 40;
    QTest::newRow("linear, DDP, regression")
        << "" << QStringList{"data.val_fraction=0.25", "run.eval_every=10"} << qlonglong(10 + 1) << "regression" << 20;
    QTest::newRow("ResNet-18 example, DDP")
        << "ddp-resnet18-cifar.json" << QStringList{"run.eval_every=2"} << resnet18Parameters(10, 7) << "" << 4;
    // The example's CNN: conv 3->16 3×3, conv 16->32 3×3, linear 32->3.
    QTest::newRow("image folder example, DataParallel")
        << "dataparallel-image-folder.json" << QStringList{"run.eval_every=0", "data.val_fraction=0"}
        << qlonglong(3 * 16 * 9 + 16 + 16 * 32 * 9 + 32 + 32 * 3 + 3) << "val_fraction is 0" << 20;
  }
  void accuracyLearningRateAndModelSize() {
    QFETCH(QString, profile);
    QFETCH(QStringList, fields);
    QFETCH(qlonglong, parameters);
    QFETCH(QString, note);
    QFETCH(int, steps);
    if (!profile.isEmpty() && !QFile::exists(test::sourcePath("resources/data/cnn-shapes.scripted.pt")))
      QSKIP("the image examples' data is not generated (the build's ptw_example_data target)");
    QTemporaryDir runs;
    ui::MainWindow w;
    if (!profile.isEmpty()) {
      QString error;
      QVERIFY2(w.openProfile(test::sourcePath("resources/profiles/" + profile), &error), qPrintable(error));
    }
    showQuietly(w, runs, qPrintable(QString::number(steps)));
    for (const QString& f : fields) w.editor()->setFieldText(f.section('=', 0, 0), f.section('=', 1));
    QVERIFY2(w.blockingReason().isEmpty(), qPrintable(w.blockingReason()));
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 120000);

    const int ranks = w.rankTable()->rowCount();
    QCOMPARE(ranks, 2);
    const QString count = QLocale(QLocale::English).toString(parameters);
    for (int r = 0; r < ranks; ++r) {
      auto* item = w.rankTable()->item(r, 5);
      QCOMPARE(w.rankTable()->horizontalHeaderItem(5)->text(), QString("params"));
      QCOMPARE(item->toolTip(), count + " parameters");
      QCOMPARE(item->text(), ui::readableNumber(static_cast<double>(parameters), 3));
      QCOMPARE(w.rankTable()->horizontalHeaderItem(6)->text(), QString("memory"));
      QVERIFY2(cell(w.rankTable(), r, 6).endsWith("iB"), qPrintable(cell(w.rankTable(), r, 6)));
    }
    if (profile.startsWith("ddp-resnet18")) {
      QCOMPARE(resnet18Parameters(1000, 7), qlonglong(11689512));  // torchvision's documented count
      QCOMPARE(resnet18Parameters(10, 3), qlonglong(11173962));    // the CIFAR variant's
      QCOMPARE(cell(w.rankTable(), 0, 5), QString("11.2M"));
    }

    core::RunStore store(runs.path().toStdString());
    const auto id = w.controller()->runId();
    // The learning rate: rank 0's stored rate at every step.
    std::vector<std::pair<double, double>> lrs;
    for (const auto& s : store.steps(id))
      if (s.rank == 0) lrs.emplace_back(static_cast<double>(s.step), s.lr);
    QCOMPARE(lrs.size(), std::size_t(steps));
    const auto drawn = w.lrChart()->summary(0)->render(0, steps + 1, 10000);
    QCOMPARE(drawn.size(), lrs.size());
    for (std::size_t i = 0; i < lrs.size(); ++i) {
      QCOMPARE(drawn[i].x, lrs[i].first);
      QCOMPARE(drawn[i].mean, lrs[i].second);
    }
    if (fields.contains("hyper.schedule=cosine"))
      QVERIFY(lrs.front().second < lrs[5].second && lrs.back().second < lrs[5].second);

    auto* noteLabel = w.accuracyNote();
    if (!note.isEmpty()) {
      QVERIFY(noteLabel->isVisibleTo(&w) && !w.accuracyChart()->isVisibleTo(&w));
      QVERIFY2(noteLabel->text().contains(note), qPrintable(noteLabel->text()));
      QCOMPARE(w.accuracyChart()->pointCount(0), std::size_t(0));
      return;
    }
    QVERIFY(w.accuracyChart()->isVisibleTo(&w) && !noteLabel->isVisibleTo(&w));
    const auto validation = store.validation(id);
    QVERIFY(validation.size() >= 2);
    const auto points = w.accuracyChart()->summary(0)->render(0, steps + 1, 10000);
    QCOMPARE(points.size(), validation.size());
    for (std::size_t i = 0; i < validation.size(); ++i) {
      QCOMPARE(points[i].x, static_cast<double>(validation[i].step));
      QCOMPARE(points[i].mean, 100 * validation[i].valAccuracy);
      QVERIFY(points[i].mean >= 0 && points[i].mean <= 100);
    }
    const auto yRange = w.accuracyChart()->plot()->yAxis->range();  // a percentage's whole scale
    QVERIFY2(yRange.lower <= 0 && yRange.upper >= 100,
             qPrintable(QString("%1..%2").arg(yRange.lower).arg(yRange.upper)));
  }

  // Past step 2048 the ranks send groups of steps (Note [Step groups]): the charts still
  // count every step, the mean over ranks covers every step up to the last, the window cut
  // short by the end included, and its last point is the mean of the stored losses there.
  void aLongRunIsDrawnFromGroupsOfSteps() {
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "6001");  // windows of 4 steps from step 4096: the last holds 6000-6001
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 60000);
    for (int series : {0, 1, 2}) QCOMPARE(w.lossChart()->pointCount(series), std::size_t(6001));
    for (int series : {0, 1, 2}) QCOMPARE(w.throughputChart()->pointCount(series), std::size_t(6001));
    double stored = 0;
    for (const auto& s : core::RunStore(runs.path().toStdString()).steps(1))
      if (s.step >= 6000) stored += s.loss;
    const auto columns = w.lossChart()->summary(2)->render(5999.5, 6001.5, 100);
    QVERIFY(!columns.empty());
    QCOMPARE(columns.back().x, 6001.0);
    QCOMPARE(columns.back().mean, stored / 4);
    QCOMPARE(columns.back().count, std::size_t(2));
    QCOMPARE(cell(w.rankTable(), 0, 2), QString("6001"));
  }

  // A 2-rank run from the window: both series fill, the table reaches finished, the run
  // is in the history. A second run with another learning rate: overlay and diff.
  void runsFillSeriesTableAndHistoryThenCompare() {
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "300");
    w.editor()->setFieldText("data.val_fraction", "0.2");
    w.editor()->setFieldText("run.eval_every", "50");
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QVERIFY(w.controller()->isRunning());
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 30000);
    QCOMPARE(w.lossChart()->pointCount(0), std::size_t(300));
    QCOMPARE(w.lossChart()->pointCount(1), std::size_t(300));
    QCOMPARE(w.throughputChart()->pointCount(0), std::size_t(300));
    QCOMPARE(w.lossChart()->pointCount(2), std::size_t(300));  // the ranks' mean, once a step
    QCOMPARE(w.lossChart()->pointCount(3), std::size_t(6));    // validation every 50 steps, the last at the end
    QCOMPARE(w.rankTable()->rowCount(), 2);
    for (int r = 0; r < 2; ++r) {
      QCOMPARE(cell(w.rankTable(), r, 1), QString("finished"));
      QCOMPARE(cell(w.rankTable(), r, 2), QString("300"));
      QCOMPARE(cell(w.rankTable(), r, 8), QString("exit code 0"));
    }
    const auto split = w.splitChart()->split(0);
    QVERIFY(split[1] > 0 && split[2] > 0);  // compute and communication measured
    QCOMPARE(w.history()->table()->rowCount(), 1);
    QCOMPARE(cell(w.history()->table(), 0, 1), QString("finished"));
    QCOMPARE(cell(w.history()->table(), 0, 7), QString(ptw::kVersion));  // the ptw that made the run

    w.editor()->setFieldText("hyper.lr", "0.02");
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 30000);
    QCOMPARE(w.history()->table()->rowCount(), 2);
    w.history()->selectRuns({1, 2});
    QCOMPARE(w.history()->overlay()->seriesCount(), 2);
    QCOMPARE(w.history()->overlay()->pointCount(0), std::size_t(300));
    QCOMPARE(w.history()->overlay()->pointCount(1), std::size_t(300));
    QCOMPARE(w.history()->differingFields(), QStringList{"hyper.lr"});
    QCOMPARE(w.history()->diff()->columnCount(), 3);
    auto* overlayHint = w.history()->findChild<QLabel*>("overlayHint");
    QVERIFY(w.history()->overlay()->isVisibleTo(w.history()) && !overlayHint->isVisibleTo(w.history()));
    w.history()->selectRuns({});  // nothing selected: the hint again, not empty axes
    QVERIFY(!w.history()->overlay()->isVisibleTo(w.history()) && overlayHint->isVisibleTo(w.history()));
    w.history()->selectRuns({1, 2});

    // Selecting a rank highlights its series; the log filters by rank.
    w.rankTable()->selectRow(1);
    auto* rankFilter = w.findChild<QComboBox*>("logRank");
    rankFilter->setCurrentIndex(rankFilter->findData(1));
    const QString log = w.findChild<QPlainTextEdit*>("log")->toPlainText();
    QVERIFY(!log.isEmpty());
    for (const auto& line : log.split('\n', Qt::SkipEmptyParts)) QVERIFY2(line.startsWith("[1]"), qPrintable(line));
  }

  // A run of the user's program from the window: each of 2 ranks reports 30 steps with a
  // loss and a named scalar "acc"; the script is found in the profile's folder. The loss chart draws them as any run's;
  // "acc" gets a chart of its own (a line per rank and their mean) in the Scalars tab, which appears with it; the run
  // is in the history as a command run, its loss in the overlay. The next run, of ptw's own engine, reports no scalars:
  // its charts are gone and so is the tab.
  void aCommandRunChartsItsScalarsAndJoinsTheHistory() {
    QTemporaryDir runs, dir;
    QFile script(dir.filePath("train.py"));
    QVERIFY(script.open(QIODevice::WriteOnly));
    script.write(
        "import json, os\n"
        "with open(os.environ['PTW_METRICS'], 'w', buffering=1) as out:\n"
        "    for s in range(1, 31):\n"
        "        out.write(json.dumps({'step': s, 'loss': 1.0 / s, 'acc': s / 100.0}) + '\\n')\n");
    script.close();
    ui::MainWindow w;
    showQuietly(w, runs, "30");
    auto* e = w.editor();
    e->setFieldText("strategy.kind", "command");
    e->setFieldText("strategy.ranks", "2");
    e->setFieldText("command.program", "/usr/bin/python3");
    e->setFieldText("command.args", "train.py");  // in command.cwd "", the profile's folder
    QVERIFY2(w.blockingReason().isEmpty(), qPrintable(w.blockingReason()));
    QString error;
    QVERIFY2(w.saveProfile(dir.filePath("train.json"), &error), qPrintable(error));
    auto* tabs = w.findChild<QTabWidget*>("tabs");
    const int scalarTab = tabs->indexOf(w.scalarCharts());
    QVERIFY(!tabs->isTabVisible(scalarTab));
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 60000);
    for (int series : {0, 1, 2}) QCOMPARE(w.lossChart()->pointCount(series), std::size_t(30));  // ranks, mean

    auto* acc = w.findChild<ui::MetricChart*>("scalar:acc");
    QVERIFY(acc);
    QCOMPARE(w.scalarCharts()->count(), 1);  // the loss is no named scalar
    QCOMPARE(acc->seriesCount(), 3);
    for (int series : {0, 1, 2}) QCOMPARE(acc->pointCount(series), std::size_t(30));
    for (int series : {0, 1, 2}) {
      const auto last = acc->summary(series)->render(29.5, 30.5, 10);
      QVERIFY(!last.empty());
      QCOMPARE(last.back().x, 30.0);
      QCOMPARE(last.back().mean, 0.3);
    }
    QVERIFY(tabs->isTabVisible(scalarTab));
    QVERIFY2(tabs->tabText(scalarTab).contains("(1)"), qPrintable(tabs->tabText(scalarTab)));
    tabs->setCurrentIndex(scalarTab);
    QTRY_VERIFY(acc->isVisible());

    QCOMPARE(w.history()->table()->rowCount(), 1);
    QCOMPARE(cell(w.history()->table(), 0, 1), QString("finished"));
    QCOMPARE(cell(w.history()->table(), 0, 3), QString("command"));
    QCOMPARE(cell(w.history()->table(), 0, 4), QString("2"));
    w.history()->selectRuns({1});
    QCOMPARE(w.history()->overlay()->pointCount(0), std::size_t(30));
    const auto first = w.history()->overlay()->summary(0)->render(0.5, 1.5, 10);
    QVERIFY(!first.empty());
    QCOMPARE(first.front().mean, 1.0);  // the mean of both ranks' loss at step 1

    e->setFieldText("strategy.kind", "ddp");
    e->setFieldText("hyper.max_steps", "20");
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 30000);
    QCOMPARE(w.scalarCharts()->count(), 0);
    QVERIFY(!w.findChild<ui::MetricChart*>("scalar:acc"));
    QVERIFY(!tabs->isTabVisible(scalarTab));
    QCOMPARE(tabs->currentIndex(), 0);
    QCOMPARE(w.history()->table()->rowCount(), 2);
  }

  // The rank table's host column is hidden for a local run. A run across hosts checks each host
  // before Start goes on: one whose ssh port refuses is named with ssh's reason, and nothing
  // starts. Only loopback is contacted: 127.0.0.1 port 1, where nothing listens.
  void aHostThatRefusesSshIsNamedBeforeStart() {
    if (QStandardPaths::findExecutable("ssh").isEmpty()) QSKIP("ssh (openssh-client) is not installed");
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "20");
    QVERIFY(w.rankTable()->isColumnHidden(9));
    QCOMPARE(w.rankTable()->horizontalHeaderItem(9)->text(), QString("host"));
    core::Profile p = w.profile();
    p.strategy.backend = "gloo";
    p.hosts.launcher = "ssh";
    p.hosts.hosts = {"127.0.0.1:2"};
    p.hosts.sshPort = 1;
    w.setProfile(p);
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    auto* problems = w.findChild<QPlainTextEdit*>("logProblems");
    QTRY_VERIFY_WITH_TIMEOUT(problems->toPlainText().contains("hosts.hosts: cannot reach host 127.0.0.1"), 30000);
    QVERIFY2(problems->toPlainText().contains("Connection refused"), qPrintable(problems->toPlainText()));
    QVERIFY(test::livePtwWorkers(static_cast<int>(::getpid())).empty());
  }

  void killedRankShowsFailedAndTheWindowStaysResponsive() {
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "1000000000");
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(1) >= 20, 20000);
    auto workers = test::livePtwWorkers(static_cast<int>(::getpid()));
    QCOMPARE(workers.size(), std::size_t(2));
    // Which pid is rank 1: its log names it; the launcher started them in rank order.
    std::sort(workers.begin(), workers.end());
    ::kill(workers[1], SIGKILL);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("failed"), 15000);
    QCOMPARE(cell(w.rankTable(), 1, 1), QString("failed"));
    QVERIFY2(cell(w.rankTable(), 1, 7).contains("signal 9"), qPrintable(cell(w.rankTable(), 1, 7)));
    QVERIFY(w.rankTable()->item(1, 1)->foreground().color() == QColor(176, 0, 32));
    QVERIFY(!test::anyAlive(workers));
    // The failure comes first, above the log, whatever the log's filter.
    auto* problems = w.findChild<QPlainTextEdit*>("logProblems");
    QVERIFY(problems->isVisibleTo(&w));
    QVERIFY2(problems->toPlainText().contains("rank 1 failed"), qPrintable(problems->toPlainText()));
    // Still responsive: edits apply and a new run can start.
    w.editor()->setFieldText("hyper.max_steps", "30");
    QVERIFY(w.findChild<QPushButton*>("start")->isEnabled());
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 30000);
    QCOMPARE(w.lossChart()->pointCount(0), std::size_t(30));  // the charts were reset for the new run
    QVERIFY(!problems->isVisibleTo(&w));                      // and the new run has had no problem
  }

  // Rank 1 is killed after step 12 of the first attempt; the run restarts from the
  // checkpoint at step 10. What the charts drew past step 10 is dropped and the replayed
  // steps drawn in its place: each rank's series ends with steps 1..30 once each. The rank
  // table shows the second attempt, however the window's takes fall: with the charts paused
  // through the run, the first attempt's exits, the restart and the second attempt's exits
  // all come in one take at the end, in their order.
  void aRestartRedrawsFromTheCheckpoint_data() {
    QTest::addColumn<bool>("paused");
    QTest::newRow("charts live") << false;
    QTest::newRow("charts paused through the run") << true;
  }
  void aRestartRedrawsFromTheCheckpoint() {
    QFETCH(bool, paused);
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "30");
    w.editor()->setFieldText("run.checkpoint_every", "5");
    w.editor()->setFieldText("run.max_restarts", "1");
    w.controller()->setWorkerArgs({"--fault=kill-at-step:1:12"});
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    if (paused) w.setChartsPaused(true);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 60000);
    QVERIFY(w.findChild<QPlainTextEdit*>("log")->toPlainText().contains("restarting (attempt 2 of 2)"));
    for (int rank = 0; rank < 2; ++rank) {
      QCOMPARE(w.lossChart()->pointCount(rank), std::size_t(30));
      QCOMPARE(w.throughputChart()->pointCount(rank), std::size_t(30));
      // The table is the second attempt's: rank 1 is no longer shown failed.
      QCOMPARE(cell(w.rankTable(), rank, 1), QString("finished"));
      QCOMPARE(cell(w.rankTable(), rank, 2), QString("30"));
      QCOMPARE(cell(w.rankTable(), rank, 8), QString("exit code 0"));
    }
  }

  // Another profile replaces unsaved edits only when the user lets them go: a file from
  // Open Recent, a run's profile from the history, the sweep's fastest. Closing with changes
  // that cannot be saved says why and keeps the window open.
  void unsavedEditsAreReplacedOnlyWhenTheUserSaysSo() {
    QTemporaryDir dir;
    ui::MainWindow w;
    w.show();
    QStringList asked;
    QMessageBox::StandardButton answer = QMessageBox::No;
    w.setAsker([&](QMessageBox::Icon, const QString& title, const QString& text, QMessageBox::StandardButtons) {
      asked << title + ": " + text;
      return answer;
    });
    core::Profile other = core::defaultProfile();
    other.hyper.lr = 0.05;
    const QString path = QFileInfo(dir.filePath("other.json")).absoluteFilePath();
    core::saveProfile(other, path.toStdString());
    QVERIFY(w.openProfile(path));  // now in Open Recent
    QAction* recent = nullptr;
    for (auto* a : w.findChildren<QAction*>())
      if (a->text() == path) recent = a;
    QVERIFY(recent);
    const std::vector<std::function<void()>> replacers = {
        [&] { recent->trigger(); },
        [&] { emit w.history()->openProfileRequested(QString::fromStdString(core::toJson(other))); },
        [&] { emit w.sweep()->openProfile(other); },
    };
    for (const auto& replace : replacers) {
      w.editor()->setFieldText("hyper.lr", "0.3");
      const auto before = asked.size();
      answer = QMessageBox::No;
      replace();
      QCOMPARE(asked.size(), before + 1);
      QVERIFY2(asked.last().contains("unsaved changes"), qPrintable(asked.last()));
      QCOMPARE(w.profile().hyper.lr, 0.3);  // kept
      answer = QMessageBox::Yes;
      replace();
      QCOMPARE(w.profile().hyper.lr, 0.05);
    }
    QVERIFY(w.openProfile(path));
    w.editor()->setFieldText("hyper.lr", "-1");
    answer = QMessageBox::Save;
    QVERIFY(!w.close());
    QVERIFY(w.isVisible());
    QVERIFY2(asked.last().startsWith("Cannot save profile: ") && asked.last().contains("hyper.lr"),
             qPrintable(asked.last()));
    w.setConfirmations(false);
  }

  // The view comes back as it was left: the loss chart's options, the tab, the sweep's
  // choices. A recent file that is gone leaves Open Recent when it fails to open.
  void theViewComesBackAndGoneRecentFilesLeave() {
    bool hogwild = false;
    {
      ui::MainWindow w;
      w.setConfirmations(false);
      w.show();
      w.findChild<QSlider*>("smoothing")->setValue(40);
      w.findChild<QCheckBox*>("logY")->setChecked(true);
      QVERIFY(w.findChild<QCheckBox*>("outliers")->isChecked() && w.lossChart()->ignoresOutliers() &&
              w.throughputChart()->ignoresOutliers() && !w.history()->findChild<ui::MetricChart*>()->ignoresOutliers());
      w.findChild<QCheckBox*>("outliers")->setChecked(false);
      QVERIFY(!w.lossChart()->ignoresOutliers() && !w.throughputChart()->ignoresOutliers());
      w.findChild<QTabWidget*>("tabs")->setCurrentIndex(2);
      w.findChild<QLineEdit*>("sweep.workers")->setText("1, 2, 4");
      w.findChild<QSpinBox*>("sweep.steps")->setValue(77);
      auto* box = w.findChild<QCheckBox*>("sweep.pool-hogwild");
      hogwild = !box->isChecked();
      box->setChecked(hogwild);
      QVERIFY(w.close());
    }
    {
      ui::MainWindow w;
      QCOMPARE(w.findChild<QSlider*>("smoothing")->value(), 40);
      QVERIFY(w.findChild<QCheckBox*>("logY")->isChecked());
      QVERIFY(!w.findChild<QCheckBox*>("outliers")->isChecked() && !w.lossChart()->ignoresOutliers());
      QVERIFY(!w.findChild<QCheckBox*>("logX")->isChecked());
      QCOMPARE(w.findChild<QTabWidget*>("tabs")->currentIndex(), 2);
      QCOMPARE(w.findChild<QLineEdit*>("sweep.workers")->text(), QString("1, 2, 4"));
      QCOMPARE(w.findChild<QSpinBox*>("sweep.steps")->value(), 77);
      QCOMPARE(w.findChild<QCheckBox*>("sweep.pool-hogwild")->isChecked(), hogwild);
    }
    QSettings().remove("view");  // later tests start from the defaults

    QTemporaryDir dir;
    const QString path = QFileInfo(dir.filePath("gone.json")).absoluteFilePath();
    core::saveProfile(core::defaultProfile(), path.toStdString());
    ui::MainWindow w;
    w.setConfirmations(false);
    QVERIFY(w.openProfile(path));
    QVERIFY(w.recentFiles().contains(path));
    QFile::remove(path);
    QStringList told;
    w.setAsker([&](QMessageBox::Icon, const QString& title, const QString& text, QMessageBox::StandardButtons) {
      told << title + ": " + text;
      return QMessageBox::Ok;
    });
    for (auto* a : w.findChildren<QAction*>())
      if (a->text() == path) a->trigger();
    QCOMPARE(told.size(), 1);
    QVERIFY2(told[0].contains("no longer listed under Open Recent"), qPrintable(told[0]));
    QVERIFY(!w.recentFiles().contains(path));
  }

  // Closing while a run goes on stops it and keeps the window, saying so, until the ranks
  // are done; a sweep cannot start beside the run, and Run > Start is off while it runs.
  void closingDuringARunWaitsForItsEnd() {
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "100000000");
    QAction *start = nullptr, *stop = nullptr;
    for (auto* a : w.findChildren<QAction*>()) {
      if (a->text() == "&Start") start = a;
      if (a->text() == "S&top") stop = a;
    }
    QVERIFY(start && stop);
    QVERIFY(start->isEnabled() && !stop->isEnabled());
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) >= 10, 20000);
    QVERIFY(!start->isEnabled() && stop->isEnabled());
    QVERIFY(!w.sweep()->start());
    QVERIFY2(w.findChild<QLabel*>("sweep.status")->text().contains("A run is in progress"),
             qPrintable(w.findChild<QLabel*>("sweep.status")->text()));
    auto workers = test::livePtwWorkers(static_cast<int>(::getpid()));
    QCOMPARE(workers.size(), std::size_t(2));
    QVERIFY(!w.close());
    QVERIFY(w.isVisible());
    QVERIFY2(w.findChild<QLabel*>("status")->text().contains("Stopping before quitting"),
             qPrintable(w.findChild<QLabel*>("status")->text()));
    QTRY_VERIFY_WITH_TIMEOUT(!w.isVisible(), 20000);
    QCOMPARE(w.lastStatus(), QStringLiteral("stopped"));
    QVERIFY(!test::anyAlive(workers));
  }

  void stopIsGraceful() {
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "100000000");
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) >= 10 && w.lossChart()->pointCount(1) >= 10, 20000);
    auto workers = test::livePtwWorkers(static_cast<int>(::getpid()));
    QCOMPARE(workers.size(), std::size_t(2));
    QTest::mouseClick(w.findChild<QPushButton*>("stop"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("stopped"), 15000);
    for (int r = 0; r < 2; ++r) {  // a rank ptw stopped says so, though it exited 0
      QCOMPARE(cell(w.rankTable(), r, 1), QString("stopped"));
      QCOMPARE(cell(w.rankTable(), r, 8), QString("stopped (exit code 0)"));
    }
    QVERIFY(w.findChild<QPushButton*>("start")->isEnabled());
    QVERIFY(!test::anyAlive(workers));
  }

  // Ctrl+Shift+P pauses the live charts (and the button beside their options resumes them):
  // nothing new is drawn while the run goes on, resuming draws what came meanwhile, and a
  // run that ends paused is drawn to its last step, every step the store holds.
  void pausedChartsTakeNothingAndLoseNothing() {
    QTemporaryDir runs;
    ui::MainWindow w;
    showQuietly(w, runs, "100000000");
    QAction* pause = nullptr;
    for (auto* a : w.findChildren<QAction*>())
      if (a->text() == "&Pause Live Charts") pause = a;
    QVERIFY(pause && !pause->isEnabled());
    auto* button = w.findChild<QToolButton*>("pauseCharts");  // the same action beside the chart options
    QVERIFY(button && button->defaultAction() == pause && !button->isEnabled());
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) >= 10 && w.lossChart()->pointCount(1) >= 10, 20000);
    QVERIFY(pause->isEnabled() && !pause->isChecked());
    QTest::keyClick(&w, Qt::Key_P, Qt::ControlModifier | Qt::ShiftModifier);
    QVERIFY(w.chartsPaused() && pause->isChecked());
    const std::size_t frozen = w.lossChart()->pointCount(0), frozenSteps = w.throughputChart()->pointCount(1);
    const QString tableStep = cell(w.rankTable(), 0, 2);
    auto* status = w.findChild<QLabel*>("status");
    const auto slowest = std::min(tableStep.toLongLong(), cell(w.rankTable(), 1, 2).toLongLong());
    QVERIFY2(status->text().contains(QString("Charts paused at step %1;").arg(slowest)), qPrintable(status->text()));
    QTest::qWait(2500);  // live, records are taken every 2 s at most (Note [Redraw budget]), and sent every 250 ms
    QCOMPARE(w.lossChart()->pointCount(0), frozen);
    QCOMPARE(w.throughputChart()->pointCount(1), frozenSteps);
    QCOMPARE(cell(w.rankTable(), 0, 2), tableStep);
    QVERIFY(button->isChecked());
    QTest::mouseClick(button, Qt::LeftButton);
    QVERIFY(!w.chartsPaused() && !pause->isChecked());
    QVERIFY2(w.lossChart()->pointCount(0) > frozen, "resuming draws what came while paused");
    QVERIFY(cell(w.rankTable(), 0, 2).toLongLong() > tableStep.toLongLong());
    w.setChartsPaused(true);
    QVERIFY(pause->isChecked());
    QTest::mouseClick(w.findChild<QPushButton*>("stop"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("stopped"), 15000);
    QVERIFY(!w.chartsPaused() && !pause->isChecked() && !pause->isEnabled());
    std::size_t stored[2] = {0, 0};
    for (const auto& s : core::RunStore(runs.path().toStdString()).steps(1)) ++stored[s.rank];
    QVERIFY(stored[0] > frozen);
    QCOMPARE(w.lossChart()->pointCount(0), stored[0]);
    QCOMPARE(w.lossChart()->pointCount(1), stored[1]);
    w.setChartsPaused(true);  // no run: nothing to pause
    QVERIFY(!w.chartsPaused() && !pause->isChecked());
  }

  // The scaling sweep from the window: a line per strategy, the fastest opened as the profile.
  void sweepDrawsLinesAndOpensTheFastest() {
    QTemporaryDir runs;
    ui::MainWindow w;
    w.setConfirmations(false);
    w.setRunsDirectory(runs.path());
    auto* panel = w.sweep();
    for (const char* name :
         {"sweep.dataparallel", "sweep.ddp-gloo", "sweep.ddp-shm", "sweep.pool-hogwild", "sweep.pool"})
      w.findChild<QCheckBox*>(name)->setChecked(false);
    w.findChild<QCheckBox*>("sweep.ddp")->setChecked(true);
    auto* workers = w.findChild<QLineEdit*>("sweep.workers");
    auto* status = w.findChild<QLabel*>("sweep.status");
    for (const char* bad : {"1, x", "1, 300"}) {
      workers->setText(bad);
      QVERIFY(!panel->start());
      QVERIFY2(status->text().contains("expected integers from 1 to 255"), qPrintable(status->text()));
    }
    workers->setText(" , ");
    QVERIFY(!panel->start());
    QVERIFY2(status->text().contains("give at least one"), qPrintable(status->text()));
    workers->setText("1, 2");
    w.findChild<QSpinBox*>("sweep.steps")->setValue(20);
    QSignalSpy done(panel, &ui::SweepPanel::finished);
    QVERIFY(panel->start());
    QVERIFY(done.wait(120000));
    QCOMPARE(panel->points().size(), std::size_t(3));  // single + ddp × {1, 2}
    QCOMPARE(panel->table()->rowCount(), 3);
    const auto stored = core::RunStore(runs.path().toStdString()).runs();
    for (int row = 0; row < 3; ++row) {  // each configuration's step and its share of waiting and reducing
      const auto& p = panel->points()[static_cast<std::size_t>(row)];
      // 20 steps leave fewer than 20 after warm-up: too short to measure, as headless and the store say.
      QVERIFY(!p.measured);
      QCOMPARE(panel->table()->item(row, 2)->text(), QString("too short"));
      const auto run = std::find_if(stored.begin(), stored.end(), [&](const auto& r) { return r.id == p.runId; });
      QVERIFY(run != stored.end());
      QVERIFY(std::isnan(run->samplesPerS));
      QCOMPARE(panel->table()->item(row, 4)->text(), QString("too short"));  // steps/s, likewise
      QCOMPARE(panel->table()->item(row, 5)->text(), QString::number(p.stepMs.stepMs, 'f', 3));
      QCOMPARE(panel->table()->item(row, 6)->text(), QString::number(100 * p.stepMs.commMs / p.stepMs.stepMs, 'f', 1));
      QVERIFY(p.stepMs.stepMs > 0);
    }
    QVERIFY(panel->throughputPlot()->graphCount() >= 2);  // single, ddp (+ the fastest marker)
    const auto& points = panel->points();
    const auto best = static_cast<std::size_t>(core::Sweep::fastest(points));
    QTest::mouseClick(w.findChild<QPushButton*>("sweep.openFastest"), Qt::LeftButton);
    const core::Profile p = w.profile();
    QCOMPARE(p.strategy.kind, std::string(points[best].strategy == "single" ? "single" : "ddp"));
    QCOMPARE(p.strategy.ranks, points[best].workers);
  }

  // Note [Attached history in groups]: an attached run's step records, folded as they come in
  // batches of any size, give each rank's every step once, in groups that keep within the
  // ranks' windows of steps and hold their steps' sums; a restart's replay and a diverged
  // loss start a group, and a validation record keeps its place among them.
  void attachedStepRecordsFoldIntoGroups() {
    constexpr std::int64_t kFirst = 1000000, kSteps = 50000, kReplayAt = 1020000, kReplayFrom = 1010000;
    constexpr std::int64_t kDiverges = 1030000, kValidationAt = 1025000;
    std::vector<core::Record> all;
    double lossSum0 = 0;  // rank 0's, over every record sent
    std::int64_t sent[2] = {0, 0};
    auto step = [&](int rank, std::int64_t n) {
      core::Record r;
      r.kind = core::Record::Kind::Step;
      r.step.rank = rank;
      r.step.step = n;
      r.step.loss = rank == 1 && n == kDiverges ? INFINITY : 1.0 / static_cast<double>(n - kFirst + 1);
      r.step.samplesPerS = 100, r.step.stepMs = 2;
      if (rank == 0) lossSum0 += r.step.loss;
      ++sent[rank];
      all.push_back(r);
    };
    for (std::int64_t n = kFirst; n < kFirst + kSteps; ++n) {
      if (n == kValidationAt) {
        core::Record v;
        v.kind = core::Record::Kind::Validation;
        v.step.step = n;
        v.valLoss = 0.5;
        all.push_back(v);
      }
      for (int rank = 0; rank < 2; ++rank) step(rank, n);
      if (n == kReplayAt)  // a restart from a checkpoint replays rank 0's steps from there
        for (std::int64_t m = kReplayFrom; m <= kReplayAt; ++m) step(0, m);
    }
    ui::StepFolder folder;
    std::vector<core::Record> out;
    const std::size_t sizes[] = {1, 4093, 77, 20000, 512};
    std::size_t batches = 0;
    for (std::size_t at = 0, i = 0; at < all.size(); ++i, ++batches) {
      const std::size_t n = std::min(sizes[i % 5], all.size() - at);
      std::vector<core::Record> batch(all.begin() + static_cast<long>(at), all.begin() + static_cast<long>(at + n));
      folder.fold(batch);
      out.insert(out.end(), batch.begin(), batch.end());
      at += n;
    }
    std::int64_t counted[2] = {0, 0}, groups[2] = {0, 0}, replayStarts = 0;
    double lossSum = 0;
    bool validationSeen = false, divergedStarts = false;
    for (const auto& r : out) {
      if (r.kind == core::Record::Kind::Validation) {
        validationSeen = true;
        continue;
      }
      QCOMPARE(r.kind, core::Record::Kind::Group);
      const auto& g = r.group;
      const int rank = r.step.rank;
      QCOMPARE(r.step.step - g.first + 1, g.count);  // consecutive steps, the record its last
      const std::int64_t span = core::stepGroupSpan(g.first);
      QCOMPARE(g.first - g.first % span, r.step.step - r.step.step % span);  // within one window
      // What came before the validation record is before it still, and what came after, after.
      QCOMPARE(validationSeen, r.step.step >= kValidationAt);
      counted[rank] += g.count;
      ++groups[rank];
      if (rank == 0) lossSum += g.lossSum, replayStarts += g.first == kReplayFrom;
      if (rank == 1 && g.first == kDiverges) divergedStarts = true;
    }
    QCOMPARE(counted[0], sent[0]);
    QCOMPARE(counted[1], sent[1]);
    QVERIFY(std::abs(lossSum - lossSum0) <= 1e-9 * lossSum0);
    // The replay starts a group mid-window (the first pass went on through that step).
    QVERIFY(kReplayFrom % core::stepGroupSpan(kReplayFrom) != 0);
    QCOMPARE(replayStarts, std::int64_t{1});
    QVERIFY(divergedStarts);
    QVERIFY(validationSeen);
    // A group per window of steps and per batch at most, not a record per step.
    const std::int64_t windows = kSteps / core::stepGroupSpan(kFirst) + 1;
    for (int rank = 0; rank < 2; ++rank)
      QVERIFY2(groups[rank] <= 2 * windows + static_cast<std::int64_t>(batches) + 2,
               qPrintable(QString("rank %1: %2 groups").arg(rank).arg(groups[rank])));
    QVERIFY(groups[1] < sent[1] / 20);
  }

  // Display memory does not grow with the run; min and max survive decimation; zoomed in
  // on recent data the real points are drawn.
  void seriesSummaryIsBoundedAndFaithful() {
    ui::SeriesSummary s(1024, 2048);
    const std::size_t before = s.memoryBytes();
    for (int i = 1; i <= 1'000'000; ++i) {
      s.add(i, i == 123'457 ? 50.0 : (i == 700'001 ? -50.0 : std::sin(i * 0.001)));
      if (i % 997 == 0) QCOMPARE(s.rawFrom(), std::max(1.0, i - 2047.0));  // the newest 2,048 held raw
    }
    QCOMPARE(s.count(), std::size_t(1'000'000));
    const auto tail = s.render(s.rawFrom(), 1'000'000, 1100);  // every raw point, in order
    QCOMPARE(tail.size(), std::size_t(2048));
    for (std::size_t k = 0; k < tail.size(); ++k) QCOMPARE(tail[k].x, 1'000'000.0 - 2047 + static_cast<double>(k));
    QVERIFY2(s.memoryBytes() < before + 200'000, qPrintable(QString::number(s.memoryBytes())));
    auto cols = s.render(1, 1'000'000, 800);
    QVERIFY(cols.size() <= 800);
    double top = -1e9, bottom = 1e9, topAt = 0;
    for (const auto& c : cols) {
      if (c.yMax > top) {
        top = c.yMax;
        topAt = c.xAtMax;
      }
      bottom = std::min(bottom, c.yMin);
    }
    QCOMPARE(top, 50.0);
    QCOMPARE(topAt, 123'457.0);
    QCOMPARE(bottom, -50.0);
    auto raw = s.render(999'500, 999'600, 800);  // inside the raw tail: the real points
    QVERIFY(raw.size() >= 101 && raw.size() <= 103);
    for (const auto& c : raw) QCOMPARE(c.count, std::size_t(1));
    s.truncateAfter(500'000);
    QCOMPARE(s.xLast(), 500'000.0);
  }

  // A loss that starts high and trains low is not drawn flat: the y axis fits all but the
  // outliers (the live charts' default, as in TensorBoard), or everything.
  void outliersDoNotFlattenTheChart() {
    ui::MetricChart chart("loss");
    chart.resize(600, 400);
    chart.show();
    QVERIFY(QTest::qWaitForWindowExposed(&chart));
    const int s = chart.addSeries("rank 0", Qt::blue);
    for (int x = 1; x <= 2000; ++x) chart.append(s, x, x <= 20 ? 30.0 : 0.5 + 0.1 * std::sin(x));
    QVERIFY(!chart.ignoresOutliers());  // a chart fits every point unless asked (the history's overlay)
    chart.setIgnoreOutliers(true);      // as the window's live charts are
    chart.refresh();
    auto y = chart.plot()->yAxis->range();
    QVERIFY2(y.upper < 1.0 && y.lower > 0.3, qPrintable(QString("%1..%2").arg(y.lower).arg(y.upper)));
    chart.setIgnoreOutliers(false);
    chart.refresh();
    y = chart.plot()->yAxis->range();
    QVERIFY2(y.upper >= 30.0 && y.lower <= 0.4, qPrintable(QString("%1..%2").arg(y.lower).arg(y.upper)));
    ui::MetricChart few("loss");  // a handful of points: each one counts
    few.resize(600, 400);
    few.show();
    QVERIFY(QTest::qWaitForWindowExposed(&few));
    const int f = few.addSeries("rank 0", Qt::blue);
    few.setIgnoreOutliers(true);
    for (int x = 1; x <= 10; ++x) few.append(f, x, x == 1 ? 30.0 : 1.0);
    few.refresh();
    QVERIFY(few.plot()->yAxis->range().upper >= 30.0);
  }

  void smoothingIsBiasCorrected() {
    std::vector<ui::SeriesSummary::Column> flat;
    for (int i = 0; i < 10; ++i) flat.push_back({double(i), 2, 2, double(i), double(i), 2.0, 1});
    for (double v : ui::smoothedMeans(flat, 0.9)) QVERIFY(std::abs(v - 2.0) < 1e-12);  // no pull towards 0
    std::vector<ui::SeriesSummary::Column> step = flat;
    for (int i = 5; i < 10; ++i) step[static_cast<std::size_t>(i)].mean = 4.0;
    auto ema = ui::smoothedMeans(step, 0.5);
    QVERIFY(ema[5] > 2.0 && ema[5] < 4.0);
    QVERIFY(ema[9] > ema[5] && ema[9] < 4.0);
  }
};

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
