// SPDX-License-Identifier: GPL-3.0-or-later
// The window's Stacks pane, offscreen, on real runs of a Python script: opened by itself when
// a rank stalls, the rank that is behind first and marked, the frames every rank shares
// folded; and "Show Stacks" on a running run, which asks its supervisor and waits.
#include <QAction>
#include <QClipboard>
#include <QDir>
#include <QFile>
#include <QGuiApplication>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTreeWidget>
#include <QtTest>

#include <functional>

#include "test_support.h"
#include "ui/main_window.h"
#include "ui/run_controller.h"
#include "ui/stacks_pane.h"

using namespace ptw;
using Row = ui::StacksPane::Row;

namespace {

// Python that reports a step: report(step).
const char* kReport = R"(import json, os, time
RANK = int(os.environ["RANK"])
_ch = open(os.environ["PTW_METRICS"], "w", buffering=1)
def report(step):
    _ch.write(json.dumps({"step": step, "loss": 1.0}) + "\n")
)";

// The 1-based line of `script` that holds `marker`.
int lineOf(const QString& script, const QString& marker) {
  const auto lines = script.split('\n');
  for (int i = 0; i < lines.size(); ++i)
    if (lines[i].contains(marker)) return i + 1;
  return -1;
}

// A profile of `ranks` processes of Debian's Python running `script` (written to dir/script.py).
core::Profile scriptProfile(const QTemporaryDir& dir, const QString& script, int ranks) {
  QFile f(dir.filePath("script.py"));
  f.open(QIODevice::WriteOnly);
  f.write(script.toUtf8());
  f.close();
  core::Profile p = core::defaultProfile();
  p.strategy.kind = "command";
  p.strategy.ranks = ranks;
  p.command.program = "/usr/bin/python3";
  p.command.args = {"script.py"};
  p.command.cwd = dir.path().toStdString();
  p.command.stopGraceS = 0.5;
  p.hyper.maxSteps = 0;
  return p;
}

void showQuietly(ui::MainWindow& w, const QTemporaryDir& runs, const core::Profile& p) {
  w.setConfirmations(false);
  w.setRunsDirectory(runs.path());
  w.setProfile(p);
  w.show();
}

QTreeWidgetItem* rankRow(QTreeWidget* tree, int rank) {
  for (int i = 0; i < tree->topLevelItemCount(); ++i)
    if (tree->topLevelItem(i)->data(0, ui::StacksPane::kRankRole).toInt() == rank) return tree->topLevelItem(i);
  return nullptr;
}

// The rows below `item` of kind `row`, depth first.
QList<QTreeWidgetItem*> rowsBelow(QTreeWidgetItem* item, Row row) {
  QList<QTreeWidgetItem*> out;
  std::function<void(QTreeWidgetItem*)> walk = [&](QTreeWidgetItem* i) {
    for (int c = 0; c < i->childCount(); ++c) {
      if (i->child(c)->data(0, ui::StacksPane::kRowRole).toInt() == static_cast<int>(row)) out << i->child(c);
      walk(i->child(c));
    }
  };
  walk(item);
  return out;
}

// What a user sees of `item`: it and every row above it shown, and each above it open.
bool shownOnScreen(QTreeWidgetItem* item) {
  if (item->isHidden()) return false;
  for (auto* p = item->parent(); p; p = p->parent())
    if (p->isHidden() || !p->isExpanded()) return false;
  return true;
}

}  // namespace

class TestStacksPane : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName("ptw-tests");
    QCoreApplication::setApplicationName("test_stacks_pane");
  }

  // Rank 1 of 3 hangs in wait_forever at step 2; ranks 0 and 2 wait in wait_for_peer after
  // step 5, called from the same lines of train(), main() and the module. The run fails as a
  // stall, and the pane opens by itself: rank 1 first and marked, wait_forever shown, the
  // three frames all ranks share (train, main, <module>) folded into one closed row, rank 2
  // said to stand where rank 0 does. The end message carries rank 1's top frames. The filter
  // keeps the ranks with a matching frame; Ctrl+C copies the selected row; Esc closes the
  // pane, and Show Stacks opens the run's file again.
  void aStalledRunOpensTheStacksPane() {
    QTemporaryDir dir, runs;
    const QString script = QString(kReport) + R"(
def wait_forever():
    while True:
        time.sleep(0.05)  # rank 1 is here

def wait_for_peer():
    while True:
        time.sleep(0.05)  # ranks 0 and 2 are here

def step(n):
    report(n)
    if RANK == 1 and n == 2:
        wait_forever()
    if n == 5:
        wait_for_peer()

def train():
    for n in range(1, 6):
        step(n)

def main():
    train()

main()
)";
    core::Profile p = scriptProfile(dir, script, 3);
    // Long enough for three Pythons to start on a busy machine of two cores; rank 1's stall
    // is found this long after its step 2.
    p.run.timeoutS = 6;
    ui::MainWindow w;
    showQuietly(w, runs, p);
    ui::StacksPane* pane = w.stacksPane();
    QVERIFY(!pane->isVisible());
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("failed"), 30000);
    const QString at = QString("at wait_forever (script.py:%1) from step (script.py:%2)")
                           .arg(lineOf(script, "rank 1 is here"))
                           .arg(lineOf(script, "        wait_forever()"));
    const QString problems = w.findChild<QPlainTextEdit*>("logProblems")->toPlainText();
    QVERIFY2(problems.contains("rank 1 failed: rank 1 stopped making progress") && problems.contains(at),
             qPrintable(problems));
    QVERIFY2(w.findChild<QLabel*>("status")->text().contains(at), qPrintable(w.findChild<QLabel*>("status")->text()));

    QVERIFY(pane->isVisible());
    QCOMPARE(pane->path(), QDir(w.controller()->runDirectory()).filePath("stacks-0.txt"));
    QCOMPARE(w.controller()->stacksFile(), pane->path());
    QCOMPARE(pane->behindRank(), 1);
    QTreeWidget* tree = pane->tree();
    QCOMPARE(tree->topLevelItemCount(), 3);
    QCOMPARE(tree->topLevelItem(0), rankRow(tree, 1));  // the rank that is behind first
    QVERIFY2(rankRow(tree, 1)->text(0).contains("behind"), qPrintable(rankRow(tree, 1)->text(0)));
    QVERIFY(!rankRow(tree, 0)->text(0).contains("behind"));
    QVERIFY2(rankRow(tree, 2)->text(0).endsWith(": same frames as rank 0"), qPrintable(rankRow(tree, 2)->text(0)));
    QCOMPARE(rankRow(tree, 2)->childCount(), 0);

    auto frames = [&](int rank) {
      QStringList shown;
      for (auto* f : rowsBelow(rankRow(tree, rank), Row::Frame))
        if (shownOnScreen(f)) shown << f->text(0);
      return shown;
    };
    const QString hung = QString("wait_forever (script.py:%1)").arg(lineOf(script, "rank 1 is here"));
    const QString peer = QString("wait_for_peer (script.py:%1)").arg(lineOf(script, "ranks 0 and 2 are here"));
    // Shown: where each rank differs, innermost first; the shared frames are folded away.
    QCOMPARE(frames(1),
             QStringList({hung, QString("step (script.py:%1)").arg(lineOf(script, "        wait_forever()"))}));
    QCOMPARE(frames(0),
             QStringList({peer, QString("step (script.py:%1)").arg(lineOf(script, "        wait_for_peer()"))}));
    for (int rank : {0, 1}) {
      const auto shared = rowsBelow(rankRow(tree, rank), Row::Shared);
      QCOMPARE(shared.size(), 1);
      QCOMPARE(shared[0]->text(0), QString("3 frames shared by all ranks"));
      QVERIFY(shownOnScreen(shared[0]) && !shared[0]->isExpanded());
      QStringList inside;
      for (int c = 0; c < shared[0]->childCount(); ++c) inside << shared[0]->child(c)->text(0).section(' ', 0, 0);
      QCOMPARE(inside, QStringList({"train", "main", "<module>"}));
    }

    pane->setFilter("wait_for_peer");
    QVERIFY(rankRow(tree, 1)->isHidden());
    QCOMPARE(frames(0), QStringList({peer}));
    pane->setFilter("");
    QVERIFY(!rankRow(tree, 1)->isHidden());

    tree->setFocus();
    tree->clearSelection();
    rowsBelow(rankRow(tree, 1), Row::Frame).front()->setSelected(true);
    QTest::keyClick(tree, Qt::Key_C, Qt::ControlModifier);
    QCOMPARE(QGuiApplication::clipboard()->text(), "  " + hung);
    QTest::keyClick(tree, Qt::Key_Escape);
    QVERIFY(!pane->isVisible());
    w.findChild<QAction*>("showStacksAction")->trigger();
    QVERIFY(pane->isVisible());
    QCOMPARE(pane->path(), w.controller()->stacksFile());
    QCOMPARE(tree->topLevelItemCount(), 3);
  }

  // Show Stacks before any run says how stacks come. On a running 2-rank run whose ranks
  // wait for a file, it asks the supervisor: the pane says it waits, then shows the new
  // file: no rank named, both ranks listed, rank 0 in wait_for_go, rank 1 where rank 0 is.
  // The run then finishes as it would have.
  void showStacksAsksARunningRun() {
    QTemporaryDir dir, runs;
    const QString script = QString(kReport) + R"(
def wait_for_go():
    while not os.path.exists("go"):
        time.sleep(0.02)  # every rank waits here

report(1)
open("ready.%d" % RANK, "w").write("1")
wait_for_go()
report(2)
)";
    ui::MainWindow w;
    showQuietly(w, runs, scriptProfile(dir, script, 2));
    ui::StacksPane* pane = w.stacksPane();
    QAction* show = w.findChild<QAction*>("showStacksAction");
    QVERIFY(w.rankTable()->actions().contains(show));  // the rank table's context menu
    show->trigger();
    QVERIFY(pane->isVisible());
    QVERIFY2(pane->headline().startsWith("No run yet"), qPrintable(pane->headline()));
    QVERIFY(pane->path().isEmpty());

    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(dir.filePath("ready.0")) && QFile::exists(dir.filePath("ready.1")), 30000);
    show->trigger();
    QVERIFY(pane->isWaiting());
    QVERIFY2(pane->headline().startsWith("Taking every rank's stacks"), qPrintable(pane->headline()));
    QTRY_VERIFY_WITH_TIMEOUT(!pane->path().isEmpty(), 25000);
    QFile(dir.filePath("go")).open(QIODevice::WriteOnly);
    QVERIFY(!pane->isWaiting());
    QCOMPARE(pane->behindRank(), -1);
    QVERIFY2(pane->headline().startsWith("ptw: stacks of every rank, attempt 0: on request"),
             qPrintable(pane->headline()));
    QTreeWidget* tree = pane->tree();
    QCOMPARE(tree->topLevelItemCount(), 2);
    QCOMPARE(tree->topLevelItem(0), rankRow(tree, 0));
    const auto frames = rowsBelow(rankRow(tree, 0), Row::Frame);
    QVERIFY(!frames.isEmpty());
    QCOMPARE(frames.front()->text(0),
             QString("wait_for_go (script.py:%1)").arg(lineOf(script, "every rank waits here")));
    QVERIFY(shownOnScreen(frames.front()));
    QVERIFY2(rankRow(tree, 1)->text(0).endsWith(": same frames as rank 0"), qPrintable(rankRow(tree, 1)->text(0)));
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 30000);
    QCOMPARE(pane->path(), w.controller()->stacksFile());  // a finished run's file is not opened anew
  }
};

QTEST_MAIN(TestStacksPane)
#include "test_stacks_pane.moc"
