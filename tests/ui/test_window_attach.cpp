// SPDX-License-Identifier: GPL-3.0-or-later
// The window following a run it did not start (MainWindow::attachRun, Note [Reattaching] in
// launch/follow_source.h), on an X server (Xvfb, where CTest finds xvfb-run): a headless run of
// a script that waits at step 10 for a file the test creates, so that the window attaches
// mid-run however loaded the machine. The window draws the steps stored before it came at
// once, then the rest live, each once; closing it leaves the run going; its Stop stops the run.
// Run > Submit to SLURM is tested with a fake sbatch on PATH, the job then run by the test.
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QPlainTextEdit>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "common/profile.h"
#include "launch/follow_source.h"
#include "launch/run_store.h"
#include "test_support.h"
#include "ui/attach_dialog.h"
#include "ui/main_window.h"
#include "ui/metric_chart.h"
#include "ui/run_controller.h"
#include "ui/run_history.h"

using namespace ptw;
using namespace ptw::core;

namespace {

constexpr int kRanks = 2;
constexpr int kGateStep = 10;

const char* kScript = R"(import json, os, sys, time, signal
RANK = int(os.environ["RANK"])
ch = open(os.environ["PTW_METRICS"], "w", buffering=1)
gate, steps = sys.argv[1], int(sys.argv[2])
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
for step in range(steps):
    if step == 10:
        end = time.time() + 60
        while not os.path.exists(gate) and not stop and time.time() < end:
            time.sleep(0.02)
    if stop:
        break
    ch.write(json.dumps({"step": step, "loss": 1.0 / (step + 1), "samples": 8}) + "\n")
    with open("reported.%d" % RANK, "w") as f:
        f.write(str(step + 1))
    time.sleep(0.01)
)";

// A headless script run: the script and its profile in `work`, the runs in `runs`.
struct HeadlessRun {
  QTemporaryDir work, runs;
  QProcess ptw;
  explicit HeadlessRun(int steps) {
    QFile f(work.filePath("script.py"));
    f.open(QIODevice::WriteOnly);
    f.write(kScript);
    f.close();
    Profile p = defaultProfile();
    p.name = "attached";
    p.strategy.kind = "command";
    p.strategy.ranks = kRanks;
    p.command.program = "/usr/bin/python3";  // never the first python3 on PATH
    p.command.args = {"script.py", work.filePath("gate").toStdString(), std::to_string(steps)};
    p.command.cwd = work.path().toStdString();
    p.command.stopGraceS = 5;
    p.hyper.maxSteps = 0;
    test::writeProfile(work, p);
    ptw.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "-p", work.filePath("profile.json")});
  }
  ~HeadlessRun() {
    if (ptw.state() == QProcess::NotRunning) return;
    ptw.kill();
    ptw.waitForFinished(10000);
  }
  bool allAtGate() const {
    for (int r = 0; r < kRanks; ++r) {
      QFile f(work.filePath(QString("reported.%1").arg(r)));
      if (!f.open(QIODevice::ReadOnly) || f.readAll().trimmed().toInt() < kGateStep) return false;
    }
    return true;
  }
  void openGate() {
    QFile g(work.filePath("gate"));
    g.open(QIODevice::WriteOnly);
  }
  int finish() {
    // Finished already when an event loop (QTRY) took its end.
    if (ptw.state() != QProcess::NotRunning && !ptw.waitForFinished(90000)) return -1;
    return ptw.exitStatus() == QProcess::NormalExit ? ptw.exitCode() : -1;
  }
};

void showQuietly(ui::MainWindow& w, const QString& runs) {
  w.setConfirmations(false);
  w.setRunsDirectory(runs);
  w.show();
}

}  // namespace

class TestWindowAttach : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName("ptw-tests");
    QCoreApplication::setApplicationName("test_window_attach");
  }

  // File > Attach to Run... lists the run; attached, the window draws the 10 steps stored
  // before it came, then the rest; closed, it leaves the run going; a second window attached
  // after draws all of it, each stored step once, and sees the run end.
  void theWindowDrawsARunsHistoryThenLive() {
    constexpr int kSteps = 40;
    HeadlessRun run(kSteps);
    QTRY_VERIFY_WITH_TIMEOUT(run.allAtGate(), 30000);
    ui::AttachDialog dialog(run.runs.path(), {});
    dialog.list();
    QCOMPARE(dialog.table()->rowCount(), 1);
    const RunRow row = dialog.chosen();
    QCOMPARE(row.status, std::string("running"));

    {
      ui::MainWindow w;
      showQuietly(w, run.runs.path());
      w.attachRun(run.runs.path(), row);
      QVERIFY(w.controller()->isAttached());
      QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) == kGateStep && w.lossChart()->pointCount(1) == kGateStep,
                               20000);
      QVERIFY(w.close());  // no question: the run is not the window's
    }
    QCOMPARE(run.ptw.state(), QProcess::Running);  // the run went on
    QVERIFY(!run.ptw.waitForFinished(500));

    // A SLURM job's nodes, which its supervisor writes into the run folder, reach the
    // attached window's host column.
    core::Profile placed = core::loadProfile(row.dir + "/profile.json");
    placed.hosts.launcher = "slurm";
    placed.hosts.hosts = {"nodeA:1", "nodeB:1"};
    core::saveProfile(placed, row.dir + "/profile.nodes.json");
    ui::MainWindow w;
    showQuietly(w, run.runs.path());
    w.attachRun(run.runs.path(), row);
    QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) == kGateStep, 20000);
    QTableWidget* table = w.rankTable();
    int host = -1;
    for (int c = 0; c < table->columnCount(); ++c)
      if (table->horizontalHeaderItem(c)->text() == "host") host = c;
    QVERIFY(host >= 0);
    QTRY_VERIFY_WITH_TIMEOUT(!table->isColumnHidden(host), 10000);
    QStringList shown;
    for (int r = 0; r < table->rowCount(); ++r) shown << table->item(r, host)->text();
    shown.sort();
    QCOMPARE(shown, QStringList({"nodeA", "nodeB"}));
    run.openGate();
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 60000);
    QCOMPARE(run.finish(), 0);
    RunStore store(run.runs.path().toStdString());
    QCOMPARE(store.stepCount(row.id), std::int64_t{kRanks * kSteps});
    for (int r = 0; r < kRanks; ++r) QCOMPARE(w.lossChart()->pointCount(r), std::size_t(kSteps));
  }

  // The Runs tab shows a running run's live step, read from its step file as it grows: at the
  // gate, step 9 (the tenth), the same as the window attached to it has drawn.
  void theRunsTabShowsARunningRunsStep() {
    HeadlessRun run(1000);
    QTRY_VERIFY_WITH_TIMEOUT(run.allAtGate(), 30000);  // the gate stays shut: it stays at step 9
    ui::MainWindow w;
    showQuietly(w, run.runs.path());
    w.history()->reload();
    QTRY_COMPARE_WITH_TIMEOUT(w.history()->table()->item(0, 1)->text().section(',', 0, 0),
                              QStringLiteral("running: step %1").arg(kGateStep - 1), 10000);
    // Opened attached: a double-click on the running row draws it in the Live tab.
    emit w.history()->table()->cellDoubleClicked(0, 1);
    QVERIFY(w.controller()->isAttached());
    QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) == kGateStep, 20000);
    w.stopRun();
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("stopped"), 30000);
    QCOMPARE(run.finish(), 5);
  }

  // Stop on an attached run asks its supervisor, through its run folder: the run stops as on
  // Ctrl-C (headless exit 5), and the window shows it stopped.
  void stopOnAnAttachedRunStopsIt() {
    HeadlessRun run(1000);
    QTRY_VERIFY_WITH_TIMEOUT(run.allAtGate(), 30000);  // the gate stays shut: only the stop ends it
    ui::MainWindow w;
    showQuietly(w, run.runs.path());
    const auto rows = listRuns(run.runs.path().toStdString(), {}, true);
    QCOMPARE(rows.size(), std::size_t{1});
    w.attachRun(run.runs.path(), rows.front());
    QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) == kGateStep, 20000);
    w.stopRun();
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("stopped"), 30000);
    QCOMPARE(run.finish(), 5);
  }

  // Run > Submit to SLURM (Note [Submitted runs]): with an sbatch on PATH that keeps what it
  // is given and prints a job id, the window writes RUN/submit.sbatch, whose job runs `ptw
  // --headless -p RUN/profile.json`, submits it, says the job's id, and waits for the run
  // attached. The job's own command, run here as SLURM would run it (with the local launcher:
  // there is no allocation), is then drawn in the window to its end.
  void submitToSlurmSubmitsTheJobAndAttaches() {
    constexpr int kSteps = 30;
    QTemporaryDir bin, runs;
    const auto tool = [&](const QString& name, const QByteArray& body) {
      QFile f(bin.filePath(name));
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("#!/bin/sh\n" + body);
      f.close();
      f.setPermissions(f.permissions() | QFileDevice::ExeOwner);
    };
    tool("sbatch", "printf '%s\\n' \"$@\" > \"" + bin.filePath("args").toUtf8() + "\"\necho 4242\n");
    for (const char* name : {"srun", "squeue", "scancel"}) tool(name, "exit 0\n");  // asked for before Start
    struct PathBack {                                                               // however the test ends
      QByteArray path = qgetenv("PATH");
      ~PathBack() { qputenv("PATH", path); }
    } back;
    qputenv("PATH", bin.path().toUtf8() + ":" + back.path);
    Profile p = defaultProfile();  // the seed DDP run: a SLURM job's ranks are ptw's own
    p.name = "submitted";
    p.hyper.maxSteps = kSteps;
    p.hosts.launcher = "slurm";
    ui::MainWindow w;
    showQuietly(w, runs.path());
    w.setProfile(p);
    auto* submit = w.findChild<QAction*>("submitAction");
    QVERIFY(submit);
    QTRY_VERIFY2_WITH_TIMEOUT(submit->isEnabled(), qPrintable(w.blockingReason()), 10000);
    submit->trigger();
    QVERIFY(w.controller()->isAttached());  // waiting for the job's run

    QFile args(bin.filePath("args"));
    QVERIFY(args.open(QIODevice::ReadOnly));
    const QStringList given = QString::fromUtf8(args.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(given.size(), 2);
    QCOMPARE(given[0], QStringLiteral("--parsable"));
    const QString folder = QFileInfo(given[1]).absolutePath();
    QCOMPARE(given[1], folder + "/submit.sbatch");
    QCOMPARE(QFileInfo(folder).absolutePath(), QFileInfo(runs.path()).absoluteFilePath());
    QFile job(given[1]);
    QVERIFY(job.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(job.readAll());
    const QRegularExpressionMatch exec =
        QRegularExpression(QStringLiteral("\n(exec '([^']+)' --headless -p '([^']+)' .*)\n$")).match(text);
    QVERIFY2(exec.hasMatch(), qPrintable(text));
    QCOMPARE(exec.captured(2), test::binDir() + "/ptw");
    QCOMPARE(exec.captured(3), folder + "/profile.json");
    QCOMPARE(core::loadProfile(exec.captured(3).toStdString()).name, std::string("submitted"));
    const QString log = w.findChild<QPlainTextEdit*>("log")->toPlainText();
    QVERIFY2(log.contains("submitted SLURM job 4242 for the run in " + folder), qPrintable(log));
    QCOMPARE(w.lossChart()->pointCount(0), std::size_t(0));

    QProcess jobRun;  // the batch step, as the job would run it
    jobRun.start(QStringLiteral("bash"), {"-c", exec.captured(1) + " --set hosts.launcher=local"});
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 60000);
    QVERIFY(jobRun.state() == QProcess::NotRunning || jobRun.waitForFinished(30000));
    QVERIFY2(jobRun.exitCode() == 0, jobRun.readAllStandardError().constData());
    for (int r = 0; r < reportingRanks(p); ++r) QCOMPARE(w.lossChart()->pointCount(r), std::size_t(kSteps));
  }

  // A folder with no runs: the dialog says so in ptw's words, and nothing is attached.
  void aFolderWithoutRunsIsSaid() {
    QTemporaryDir empty;
    ui::AttachDialog dialog(empty.path(), {});
    dialog.list();
    QCOMPARE(dialog.table()->rowCount(), 0);
    QVERIFY2(dialog.problem().contains("holds no runs"), qPrintable(dialog.problem()));
    QCOMPARE(dialog.chosen().id, std::int64_t{0});
    QVERIFY(QDir(empty.path()).isEmpty());
  }
};

QTEST_MAIN(TestWindowAttach)
#include "test_window_attach.moc"
