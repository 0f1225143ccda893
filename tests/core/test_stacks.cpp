// SPDX-License-Identifier: GPL-3.0-or-later
// Every rank's stacks (Note [Taking stacks] in launch/stack_collector.h): taken when a rank
// stalls, before the kill, and on `ptw stacks`; Python frames with file and line for a
// script's ranks, function names for ptw's own; none taken while nothing is stuck.
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QtTest>

#include <unistd.h>

#include <string>

#include "common/command.h"
#include "common/error.h"
#include "common/profile.h"
#include "launch/collective_blame.h"
#include "launch/stack_collector.h"
#include "launch/stacks_file.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

struct Result {
  int code = -1;
  QString out, err;
};

Result runPtw(const QStringList& args) {
  QProcess p;
  p.start(test::binDir() + "/ptw", args);
  if (!p.waitForFinished(60000)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError())};
}

// A profile of `ranks` processes running `script` (written to dir/script.py) with Debian's Python.
Profile scriptProfile(const QTemporaryDir& dir, const QString& script, int ranks) {
  QFile f(dir.filePath("script.py"));
  f.open(QIODevice::WriteOnly);
  f.write(script.toUtf8());
  f.close();
  Profile p = defaultProfile();
  p.name = "script";
  p.strategy.kind = "command";
  p.strategy.ranks = ranks;
  p.command.program = "/usr/bin/python3";
  p.command.args = {"script.py"};
  p.command.cwd = dir.path().toStdString();
  p.command.stopGraceS = 0.5;
  p.hyper.maxSteps = 0;
  return p;
}

// Python that reports a step: report(step).
const char* kReport = R"(import json, os, signal, sys, time
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

QString runFolder(const QTemporaryDir& runs) {
  for (const auto& d : QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot))
    if (d != "runs.blocks") return runs.filePath(d);
  return {};
}

QString readFile(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

QJsonObject readSummary(const QString& path) { return QJsonDocument::fromJson(readFile(path).toUtf8()).object(); }

// Rank `rank`'s section of a stacks file: from its header to the next.
QString section(const QString& stacks, int rank) {
  const QString head = QString("== rank %1 (").arg(rank);
  const int from = stacks.indexOf(head);
  if (from < 0) return {};
  const int to = stacks.indexOf("\n== rank ", from + 1);
  return stacks.mid(from, to < 0 ? -1 : to - from);
}

QStringList stacksFilesIn(const QString& dir) {
  return QDir(dir).entryList({"stacks-*.txt", "*.pystacks.*", "*.stacks", "*.stacks.part"});
}

}  // namespace

class TestStacks : public QObject {
  Q_OBJECT
 private slots:
  // The file and the message from what gdb and faulthandler write: ranks standing in the same
  // places (addresses, arguments and thread ids aside) are folded into the first; the message
  // names the innermost frames of the main thread (Python) or of ptw's own code (native).
  void framesAreFoldedAndNamed() {
    const std::string gdbRank =
        "Thread 2 (Thread 0x7f01 (LWP %1) \"ptw-worker\"):\n"
        "#0  0x00007f10 in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "Thread 1 (Thread 0x7f00 (LWP %2) \"ptw-worker\"):\n"
        "#0  0x00007f20 in pause () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "#1  0x000055%3 in ptw::engine::Trainer::run (this=0x55%3, stop=...) at /src/core/engine/trainer.cpp:120\n"
        "#2  0x000055%3 in main (argc=5, argv=0x7ffd) at /src/app/worker_main.cpp:5\n";
    auto rank = [&](int r, const QString& pid, const QString& addr) {
      RankStacks s;
      s.rank = r, s.pid = pid.toInt(), s.host = "node1", s.kind = "native";
      s.frames = QString::fromStdString(gdbRank).arg(pid, pid, addr).toStdString();
      return s;
    };
    RankStacks other = rank(2, "300", "cc");
    other.frames += "#3  0x0000 in ptw::engine::trainRank (args=...) at /src/core/engine/worker.cpp:700\n";
    RankStacks python;
    python.rank = 3, python.pid = 400, python.host = "node1", python.kind = "python";
    python.frames =
        "process 401 (python3):\n"
        "Thread 0x00007f02 (most recent call first):\n"
        "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
        "\n"
        "Current thread 0x00007f03 (most recent call first):\n"
        "  File \"/home/me/train.py\", line 7 in wait_forever\n"
        "  File \"/home/me/train.py\", line 12 in <module>\n";
    RankStacks gone;
    gone.rank = 4, gone.pid = 500, gone.host = "node1", gone.note = "ended before its stack was taken";
    const std::vector<RankStacks> all{rank(0, "100", "aa"), rank(1, "200", "bb"), other, python, gone};
    const QString text = QString::fromStdString(StackCollector::render(all, "title"));
    QVERIFY(text.startsWith("title\n"));
    QVERIFY2(section(text, 0).contains("Trainer::run (this=0x55aa"), qPrintable(text));
    QVERIFY2(section(text, 1).endsWith("== rank 1 (pid 200, host node1): native frames ==\nsame frames as rank 0\n"),
             qPrintable(text));
    QVERIFY2(section(text, 2).contains("worker.cpp:700"), qPrintable(text));
    QVERIFY2(section(text, 3).contains("line 7 in wait_forever"), qPrintable(text));
    QVERIFY2(section(text, 4).contains("(ended before its stack was taken)"), qPrintable(text));
    QCOMPARE(StackCollector::topFrames(all[0]),
             std::string("ptw::engine::Trainer::run (trainer.cpp:120) from main (worker_main.cpp:5)"));
    QCOMPARE(StackCollector::topFrames(python), std::string("wait_forever (train.py:7) from <module> (train.py:12)"));
    QCOMPARE(StackCollector::topFrames(gone), std::string());
  }

  // A file render() writes, read back: each rank's section with its pid, host, kind, note or
  // "same frames as"; the rank the title names; each thread's frames with the outermost ones
  // every rank shares counted (Note [Shared frames]): ranks 0 and 2 differ in their innermost
  // frame, so the main thread's other two are shared, and the second thread's one frame.
  void aStacksFileReadsBackWithItsSharedFrames() {
    auto rank = [](int r, const std::string& innermost) {
      RankStacks s;
      s.rank = r, s.pid = 100 + r, s.host = "node1", s.kind = "native";
      s.frames = "Thread 2 (Thread 0x7f01 (LWP " + std::to_string(200 + r) +
                 ") \"ptw-worker\"):\n"
                 "#0  0x00007f10 in __futex_abstimed_wait_common () from /lib/x86_64-linux-gnu/libc.so.6\n"
                 "Thread 1 (Thread 0x7f00 (LWP " +
                 std::to_string(100 + r) + ") \"ptw-worker\"):\n#0  0x00007f20 in " + innermost +
                 " () from /lib/x86_64-linux-gnu/libc.so.6\n"
                 "#1  0x000055aa in ptw::engine::Trainer::run (this=0x55" +
                 std::to_string(r) +
                 ", stop=...) at /src/core/engine/trainer.cpp:120\n"
                 "#2  0x000055bb in main (argc=5, argv=0x7ffd) at /src/app/worker_main.cpp:5\n";
      return s;
    };
    RankStacks gone;
    gone.rank = 3, gone.pid = 103, gone.note = "ended before its stack was taken";
    const std::string title = "ptw: stacks of every rank, attempt 1: rank 2 on host node1 stopped making progress";
    const std::string text = StackCollector::render({rank(0, "pause"), rank(1, "pause"), rank(2, "poll"), gone}, title);
    const StacksFile file = parseStacksFile(text);
    QCOMPARE(file.title, title);
    QCOMPARE(file.behind, 2);
    QCOMPARE(int(file.sections.size()), 4);
    const StackSection* zero = file.section(0);
    QCOMPARE(zero->pid, 100);
    QCOMPARE(zero->host, std::string("node1"));
    QCOMPARE(zero->kind, std::string("native"));
    QCOMPARE(zero->sameAs, -1);
    QCOMPARE(file.section(1)->sameAs, 0);
    QCOMPARE(file.framesOf(1), zero);
    QVERIFY(file.section(1)->threads.empty());
    QCOMPARE(file.section(3)->note, std::string("ended before its stack was taken"));
    QCOMPARE(file.section(3)->kind, std::string());
    QCOMPARE(file.framesOf(3), file.section(3));
    for (const StackSection* s : {zero, file.section(2)}) {
      QCOMPARE(int(s->threads.size()), 2);
      QVERIFY(s->threads[0].header.rfind("Thread 2 ", 0) == 0);
      QCOMPARE(s->threads[0].shared, std::size_t(1));
      QCOMPARE(int(s->threads[1].frames.size()), 3);
      QCOMPARE(s->threads[1].shared, std::size_t(2));
      QCOMPARE(s->threads[1].frames[1].describe(), std::string("ptw::engine::Trainer::run (trainer.cpp:120)"));
      QCOMPARE(s->threads[1].frames[2].path, std::string("/src/app/worker_main.cpp"));
    }
    QCOMPARE(zero->threads[1].frames[0].function, std::string("pause"));
    QCOMPARE(file.section(2)->threads[1].frames[0].function, std::string("poll"));
    QVERIFY(
        QString::fromStdString(file.section(2)->text).startsWith("== rank 2 (pid 102, host node1): native frames =="));
    // Taken on request: no rank is named.
    QCOMPARE(
        parseStacksFile(StackCollector::render({rank(0, "pause")}, "ptw: stacks of every rank, attempt 0: on request"))
            .behind,
        -1);
  }

  // Not a stacks file: one line naming the file and what was expected.
  void aFileThatIsNoStacksFileIsNamed() {
    try {
      parseStacksFile("loss,step\n1,2\n", "/runs/x/stacks-0.txt");
      QFAIL("no error");
    } catch (const Error& e) {
      QCOMPARE(QString(e.what()), QString("/runs/x/stacks-0.txt: not a stacks file: expected its first line to start "
                                          "with \"ptw: stacks of every rank\", got \"loss,step\""));
    }
    QTemporaryDir dir;
    try {
      readStacksFile(dir.filePath("stacks-9.txt").toStdString());
      QFAIL("no error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).startsWith(dir.filePath("stacks-9.txt") + ": cannot read the stacks file"), e.what());
    }
  }

  // Rank 1 hangs in wait_forever after step 1; ranks 0 and 2 go on to step 5 and wait there
  // in the same place. Rank 1 is named, its frame (file and line) is in the message and the
  // file, and rank 2's frames, the same as rank 0's, are folded.
  void aHungPythonRankIsNamedWithItsFrames() {
    QTemporaryDir dir, runs;
    const QString script = QString(kReport) + R"(
def wait_forever():
    while True:
        time.sleep(0.05)  # rank 1 is here

def wait_for_peer():
    while True:
        time.sleep(0.05)  # ranks 0 and 2 are here

report(1)
if RANK == 1:
    wait_forever()
for step in range(2, 6):
    report(step)
wait_for_peer()
)";
    Profile p = scriptProfile(dir, script, 3);
    p.run.timeoutS = 3;
    const QString summary = runs.filePath("summary.json");
    const Result r = runPtw({"--headless", "--runs-dir", runs.path(), "--summary", summary, "--profile",
                             QString::fromStdString(test::writeProfile(dir, p))});
    QCOMPARE(r.code, 3);
    const QJsonObject s = readSummary(summary);
    QCOMPARE(s["failed_rank"].toInt(), 1);
    const QString at = QString("at wait_forever (script.py:%1) from <module> (script.py:%2)")
                           .arg(lineOf(script, "rank 1 is here"))
                           .arg(lineOf(script, "    wait_forever()"));
    const QString message = s["message"].toString();
    QVERIFY2(message.startsWith("rank 1 stopped making progress: stuck in its own work after step 1"),
             qPrintable(message));
    QVERIFY2(message.contains(at), qPrintable(message));
    QVERIFY2(r.err.contains(at), qPrintable(r.err));
    const QString path = runFolder(runs) + "/stacks-0.txt";
    QCOMPARE(s["stacks"].toString(), path);
    const QString stacks = readFile(path);
    const QString frame = QString("File \"%1\", line %2 in wait_forever")
                              .arg(dir.filePath("script.py"))
                              .arg(lineOf(script, "rank 1 is here"));
    QVERIFY2(section(stacks, 1).contains(frame), qPrintable(stacks));
    QVERIFY2(section(stacks, 1).contains(": python frames"), qPrintable(stacks));
    const QString peer = QString("line %1 in wait_for_peer").arg(lineOf(script, "ranks 0 and 2 are here"));
    QVERIFY2(section(stacks, 0).contains(peer), qPrintable(stacks));
    QVERIFY2(section(stacks, 2).contains("same frames as rank 0"), qPrintable(stacks));
    QVERIFY2(!section(stacks, 2).contains("File \""), qPrintable(stacks));
    // Read back: rank 1 named, its innermost frame wait_forever; rank 2 rank 0's. Their
    // outermost frames are <module> at different lines: no frame is shared.
    const StacksFile file = readStacksFile(path.toStdString());
    QCOMPARE(file.behind, 1);
    QCOMPARE(int(file.sections.size()), 3);
    const StackSection* one = file.section(1);
    QCOMPARE(one->kind, std::string("python"));
    QVERIFY(!one->threads.empty());
    QVERIFY(one->threads.back().process.rfind("process ", 0) == 0);
    QCOMPARE(one->threads.back().frames.front().describe(),
             QString("wait_forever (script.py:%1)").arg(lineOf(script, "rank 1 is here")).toStdString());
    QCOMPARE(one->threads.back().frames.front().path, dir.filePath("script.py").toStdString());
    QCOMPARE(file.framesOf(2), file.section(0));
    QCOMPARE(file.section(0)->threads.back().frames.front().function, std::string("wait_for_peer"));
    QCOMPARE(one->threads.back().shared, std::size_t(0));
    // The programs' own stack files go with the run.
    QCOMPARE(QDir(runFolder(runs)).entryList({"*.pystacks.*"}), QStringList());
  }

  // ptw's own rank 1 hangs after step 5 (--fault hang-at-step) while rank 0 waits for it in
  // the next collective. The message names rank 1 and the collective it has not entered
  // (Note [Collective positions]): shared memory's attach is a broadcast and a barrier, then
  // each step of this small model is one all-reduce (Note [One-barrier step]), so after 5
  // steps rank 1 entered 7 and rank 0 waits in #8. Rank 1's frames are the ones it wrote
  // itself (Note [Native stacks]): the fault's function by name, in the message too.
  void aHungNativeRankShowsItsFunctionsAndPosition() {
    QTemporaryDir dir, runs;
    Profile p = test::endlessProfile(2);
    p.run.timeoutS = 5;
    const QString summary = runs.filePath("summary.json");
    const Result r =
        runPtw({"--headless", "--runs-dir", runs.path(), "--summary", summary, "--worker-arg=--fault=hang-at-step:1:5",
                "--profile", QString::fromStdString(test::writeProfile(dir, p))});
    QCOMPARE(r.code, 3);
    const QJsonObject s = readSummary(summary);
    QCOMPARE(s["failed_rank"].toInt(), 1);
    const QString message = s["message"].toString();
    QVERIFY2(message.startsWith("rank 1 stopped making progress: stuck in its own work after step 5 for 5 s; "
                                "rank 1 has not entered all-reduce #8; rank 0 is waiting inside it; "
                                "at ptw::engine::hangInOwnWork from "),
             qPrintable(message));
    QVERIFY2(r.err.contains(message), qPrintable(r.err));  // the headless output says the same
    const QString stacks = readFile(s["stacks"].toString());
    QVERIFY2(section(stacks, 1).contains(": native frames (ptw-worker) ==\nThread "), qPrintable(stacks));
    QVERIFY2(section(stacks, 1).contains("\nThread 1 (LWP "), qPrintable(stacks));
    QVERIFY2(section(stacks, 1).contains(" in ptw::engine::hangInOwnWork() from "), qPrintable(stacks));
    QVERIFY2(section(stacks, 0).contains(" in ptw::engine::ShmSegment::barrier("), qPrintable(stacks));
    // Read back: rank 1's main thread differs from rank 0's at the hang; the frames below,
    // from the program's start to the training loop's, are the same in both and counted as shared.
    const StacksFile file = readStacksFile(s["stacks"].toString().toStdString());
    QCOMPARE(file.behind, 1);
    const StackThread& hung = file.section(1)->threads.back();
    const StackThread& peer = file.section(0)->threads.back();
    QVERIFY2(hung.header.rfind("Thread 1 ", 0) == 0, hung.header.c_str());
    QVERIFY(hung.shared >= 1 && hung.shared < hung.frames.size());
    QCOMPARE(peer.shared, hung.shared);
    bool loopShared = false;
    for (std::size_t i = hung.frames.size() - hung.shared; i < hung.frames.size(); ++i) {
      QVERIFY(hung.frames[i].samePlace(peer.frames[peer.frames.size() - hung.frames.size() + i]));
      loopShared = loopShared || hung.frames[i].function.rfind("ptw::engine::Trainer::run", 0) == 0;
    }
    QVERIFY2(loopShared, qPrintable(stacks));
    bool hangOwn = false;
    for (std::size_t i = 0; i < hung.frames.size() - hung.shared; ++i)
      hangOwn = hangOwn || hung.frames[i].function.rfind("ptw::engine::hangInOwnWork", 0) == 0;
    QVERIFY2(hangOwn, qPrintable(stacks));
    QCOMPARE(stacksFilesIn(runFolder(runs)), QStringList{"stacks-0.txt"});  // the ranks' own answers are gone
  }

  // A rank that does not answer for itself (its handler left out, PTW_STACKS_HANDLER=off) where
  // neither gdb nor eu-stack can run: its section says what to install, and the run ends as it
  // would have, rank 1 named. The debuggers are hidden in a mount namespace of the test's own,
  // with a file nobody may execute bound over each, which access(X_OK) refuses as if missing.
  void withoutADebuggerTheSectionSaysSo() {
    if (::geteuid() != 0) QSKIP("needs root: hides gdb and eu-stack in a mount namespace of its own (unshare -m)");
    const QString unshare = QStandardPaths::findExecutable("unshare");
    if (unshare.isEmpty()) QSKIP("needs unshare (util-linux)");
    QTemporaryDir dir, runs;
    QFile blank(dir.filePath("blank"));
    QVERIFY(blank.open(QIODevice::WriteOnly));
    blank.close();
    QString hide;
    for (const QString tool : {"/usr/bin/gdb", "/usr/bin/eu-stack"})
      if (QFile::exists(tool)) hide += QString("mount --bind '%1' '%2' && ").arg(blank.fileName(), tool);
    Profile p = test::endlessProfile(2);
    p.run.timeoutS = 5;
    const QString summary = runs.filePath("summary.json");
    QProcess ptw;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("PTW_STACKS_HANDLER", "off");
    ptw.setProcessEnvironment(env);
    ptw.start(unshare,
              {"--mount", "--propagation", "private", "sh", "-c", hide + "exec \"$0\" \"$@\"", test::binDir() + "/ptw",
               "--headless", "--runs-dir", runs.path(), "--summary", summary, "--worker-arg=--fault=hang-at-step:1:5",
               "--profile", QString::fromStdString(test::writeProfile(dir, p))});
    QVERIFY(ptw.waitForFinished(60000));
    const QString err = QString::fromUtf8(ptw.readAllStandardError());
    if (err.startsWith("unshare: ")) QSKIP(qPrintable("cannot make a mount namespace here: " + err.trimmed()));
    QCOMPARE(ptw.exitCode(), 3);
    const QJsonObject s = readSummary(summary);
    QCOMPARE(s["failed_rank"].toInt(), 1);
    QVERIFY2(s["message"].toString().startsWith("rank 1 stopped making progress: stuck in its own work after step 5"),
             qPrintable(s["message"].toString()));
    const QString stacks = readFile(s["stacks"].toString());
    for (int r = 0; r < 2; ++r)
      QVERIFY2(section(stacks, r).contains("gdb not found; install gdb for native stacks"), qPrintable(stacks));
  }

  // `ptw stacks latest` on a running native run of 4 ranks: every rank answers for itself
  // (Note [Native stacks]), none is read with a debugger, and the run goes on to be stopped.
  void nativeStacksOnDemandComeFromTheRanks() {
    QTemporaryDir dir, runs;
    Profile p = test::endlessProfile(4);
    const QString summary = runs.filePath("summary.json");
    QProcess ptw;
    ptw.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "--summary", summary, "--profile",
                                        QString::fromStdString(test::writeProfile(dir, p))});
    // Each rank catches the signal once it has read its profile (SigCgt in its status).
    auto allTraining = [&] {
      const auto pids = test::livePtwWorkers(static_cast<int>(ptw.processId()));
      if (pids.size() != 4) return false;
      for (int pid : pids) {
        const QString status = readFile(QString("/proc/%1/status").arg(pid));
        const auto at = status.indexOf("SigCgt:");
        const auto mask = status.mid(at + 7, status.indexOf('\n', at) - at - 7).trimmed().toULongLong(nullptr, 16);
        if (at < 0 || !((mask >> (stacksSignal() - 1)) & 1)) return false;
      }
      return true;
    };
    QTRY_VERIFY_WITH_TIMEOUT(allTraining(), 30000);
    const Result stacks = runPtw({"stacks", "latest", "--runs-dir", runs.path()});
    QVERIFY2(stacks.code == 0, qPrintable(stacks.err));
    for (int r = 0; r < 4; ++r) {
      const QString mine = section(stacks.out, r);
      QVERIFY2(mine.contains(": native frames (ptw-worker) =="), qPrintable(stacks.out));
      QVERIFY2(mine.contains("same frames as rank") || mine.contains(" in ptw::engine::workerMain("),
               qPrintable(stacks.out));
    }
    QVERIFY2(!stacks.out.contains("debugger") && !stacks.out.contains("(gdb)"), qPrintable(stacks.out));
    QCOMPARE(runPtw({"stop", "latest", "--runs-dir", runs.path()}).code, 0);
    const test::HeadlessRun run = test::finishHeadless(ptw, summary, 30000);
    QCOMPARE(run.summary["status"].toString(), QString("stopped"));
    QCOMPARE(stacksFilesIn(runFolder(runs)), QStringList{"stacks-0.txt"});
  }

  // A process that catches the stacks signal and never answers (a worker whose answering
  // thread is stuck) is read with gdb after kOwnAnswerS, and its section says so.
  void aRankThatDoesNotAnswerIsReadWithGdb() {
    if (QStandardPaths::findExecutable("gdb").isEmpty()) QSKIP("needs gdb, the fallback it checks; install gdb");
    QTemporaryDir dir;
    QProcess silent;
    silent.start("/usr/bin/python3",
                 {"-c", QString("import signal, sys, time\nsignal.signal(%1, lambda *a: None)\nprint('ready', "
                                "flush=True)\nwhile True: time.sleep(0.05)\n")
                            .arg(stacksSignal())});
    QVERIFY(silent.waitForReadyRead(20000));
    StackTarget t;
    t.rank = 0, t.pid = static_cast<int>(silent.processId()), t.nativeFile = dir.filePath("rank0.stacks").toStdString();
    const auto got = StackCollector(20).collect({t});
    silent.kill();
    silent.waitForFinished();
    const QString text = QString::fromStdString(StackCollector::render(got, "title"));
    if (text.contains("not permitted")) QSKIP(qPrintable("ptrace is not permitted here: " + text));
    QVERIFY2(text.contains("native frames (gdb)"), qPrintable(text));
    QVERIFY2(text.contains("did not answer the stacks signal within 1.5 s; read with a debugger"), qPrintable(text));
  }

  // A rank on another host is asked on its control line and answers in the shared run
  // folder; a host whose connection ends while it is asked is named, and nothing waits for it.
  void remoteRanksAreAskedOnTheirControlLine() {
    QTemporaryDir dir;
    int line[2], dropLine[2];
    QVERIFY(::pipe(line) == 0 && ::pipe(dropLine) == 0);
    // Stand-ins for the two ranks' ssh processes: one answers what its control line asks,
    // the other's connection ends as soon as it is asked.
    const QString file = dir.filePath("rank1.stacks");
    QProcess answering, dropping;
    answering.setStandardInputFile(QString("/dev/fd/%1").arg(line[0]));
    answering.start("/bin/sh", {"-c",
                                "read ask && [ \"$ask\" = stacks ] && printf 'Thread 1 (LWP 7 \"ptw-worker\"):\n#0  "
                                "0x1 in ptw::engine::hangInOwnWork() from /x/ptw-worker\n' > " +
                                    file + ".part && mv " + file + ".part " + file + " && sleep 30"});
    dropping.setStandardInputFile(QString("/dev/fd/%1").arg(dropLine[0]));
    dropping.start("/bin/sh", {"-c", "read ask"});
    QVERIFY(answering.waitForStarted() && dropping.waitForStarted());
    ::close(line[0]), ::close(dropLine[0]);
    StackTarget one, two;
    one.rank = 1, one.pid = static_cast<int>(answering.processId()), one.host = "node2", one.remote = true;
    one.nativeFile = file.toStdString(), one.controlFd = line[1];
    two.rank = 2, two.pid = static_cast<int>(dropping.processId()), two.host = "node3", two.remote = true;
    two.nativeFile = dir.filePath("rank2.stacks").toStdString(), two.controlFd = dropLine[1];
    const auto got = StackCollector(20).collect({one, two});
    // `dropping` has exited but is not reaped by QProcess's loop yet: its state says so.
    const QString text = QString::fromStdString(StackCollector::render(got, "title"));
    answering.kill();
    answering.waitForFinished();
    dropping.waitForFinished();
    ::close(line[1]), ::close(dropLine[1]);
    QVERIFY2(section(text, 1).contains("native frames (ptw-worker)"), qPrintable(text));
    QVERIFY2(section(text, 1).contains("in ptw::engine::hangInOwnWork() from"), qPrintable(text));
    QVERIFY2(section(text, 2).contains("(host node3 dropped while its stack was taken"), qPrintable(text));
    QVERIFY(!QFile::exists(file));
  }

  // The counts of collectives name the ranks behind and those waiting for them, exactly; a
  // rank that does not count, or no rank waiting inside a collective, names nobody.
  void collectiveCountsNameTheRankBehind() {
    auto count = [](int rank, std::int64_t entered, std::int64_t completed) {
      return CollectiveCount{rank, true, entered, completed, "all-reduce"};
    };
    QCOMPARE(QString::fromStdString(blameCollectives({count(0, 1043, 1042), count(1, 1043, 1042), count(2, 1043, 1042),
                                                      count(3, 1042, 1042)})
                                        .sentence()),
             QString("rank 3 has not entered all-reduce #1043; ranks 0-2 are waiting inside it"));
    QCOMPARE(QString::fromStdString(
                 blameCollectives({count(0, 9, 7), count(1, 7, 7), count(2, 8, 7), count(3, 7, 7), count(4, 9, 7)})
                     .sentence()),
             QString("ranks 1, 3 have not entered all-reduce #8; ranks 0, 2, 4 are waiting inside it"));
    QVERIFY(blameCollectives({count(0, 5, 5), count(1, 5, 5)}).empty());  // nobody inside one
    QVERIFY(blameCollectives({count(0, 6, 5), count(1, 6, 5)}).empty());  // all inside the same one
    CollectiveCount old{1, false, 0, 0, ""};
    QVERIFY(blameCollectives({count(0, 6, 5), old}).empty());  // a rank that does not count
    QCOMPARE(QString::fromStdString(rankList({0, 1, 2, 4, 5, 7})), QString("0-2, 4, 5, 7"));
  }

  // A run whose ranks end as they should takes no stacks: no file, no "stacks" in the summary,
  // and the hook each program had ready (its file) is gone with it.
  void aFinishedRunTakesNoStacks() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + R"(
ready = os.path.exists("%s.%d" % (os.environ["PTW_STACKS_FILE"], os.getpid()))
open("hook.%d" % RANK, "w").write("ready" if ready else "missing")
for step in range(1, 4):
    report(step)
)",
                              2);
    const QString summary = runs.filePath("summary.json");
    const Result r = runPtw({"--headless", "--runs-dir", runs.path(), "--summary", summary, "--profile",
                             QString::fromStdString(test::writeProfile(dir, p))});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QCOMPARE(readFile(dir.filePath("hook.0")), QString("ready"));
    QCOMPARE(readFile(dir.filePath("hook.1")), QString("ready"));
    QVERIFY(!readSummary(summary).contains("stacks"));
    QCOMPARE(stacksFilesIn(runFolder(runs)), QStringList());
  }

  // ptw's own ranks that end as they should are never asked: no stacks file, none of the
  // ranks' own answers, no "stacks" in the summary.
  void aFinishedNativeRunTakesNoStacks() {
    QTemporaryDir dir, runs;
    Profile p = test::endlessProfile(2);
    p.hyper.maxSteps = 20;
    const QString summary = runs.filePath("summary.json");
    const Result r = runPtw({"--headless", "--runs-dir", runs.path(), "--summary", summary, "--profile",
                             QString::fromStdString(test::writeProfile(dir, p))});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QCOMPARE(readSummary(summary)["status"].toString(), QString("finished"));
    QVERIFY(!readSummary(summary).contains("stacks"));
    QCOMPARE(stacksFilesIn(runFolder(runs)), QStringList());
  }

  // `ptw stacks latest` on a running run of 4 ranks, each waiting for a file the test makes:
  // every rank's frames are printed (the same ones folded), and the run then finishes.
  void stacksOnDemandShowEveryRank() {
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
    Profile p = scriptProfile(dir, script, 4);
    const QString summary = runs.filePath("summary.json");
    QProcess ptw;
    ptw.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "--summary", summary, "--profile",
                                        QString::fromStdString(test::writeProfile(dir, p))});
    auto allReady = [&] {
      for (int r = 0; r < 4; ++r)
        if (!QFile::exists(dir.filePath(QString("ready.%1").arg(r)))) return false;
      return true;
    };
    QTRY_VERIFY_WITH_TIMEOUT(allReady(), 30000);
    const Result stacks = runPtw({"stacks", "latest", "--runs-dir", runs.path()});
    QFile go(dir.filePath("go"));
    go.open(QIODevice::WriteOnly);
    go.close();
    QVERIFY2(stacks.code == 0, qPrintable(stacks.err));
    const QString here = QString("line %1 in wait_for_go").arg(lineOf(script, "every rank waits here"));
    QVERIFY2(section(stacks.out, 0).contains(here), qPrintable(stacks.out));
    for (int r = 1; r < 4; ++r)
      QVERIFY2(section(stacks.out, r).contains("same frames as rank 0") || section(stacks.out, r).contains(here),
               qPrintable(stacks.out));
    QVERIFY2(stacks.out.startsWith("ptw: stacks of every rank, attempt 0: on request\n"), qPrintable(stacks.out));
    const test::HeadlessRun run = test::finishHeadless(ptw, summary, 30000);
    QVERIFY2(run.exitCode == 0, qPrintable(run.output));
    QCOMPARE(run.summary["status"].toString(), QString("finished"));
    const QString file = runFolder(runs) + "/stacks-0.txt";
    QCOMPARE(run.summary["stacks"].toString(), file);
    QCOMPARE(readFile(file), stacks.out);
    for (int r = 0; r < 4; ++r) QCOMPARE(run.summary["ranks"].toArray()[r].toObject()["steps"].toInt(), 2);
  }

  // A run `ptw stacks` cannot ask: one line saying why, exit 2.
  void stacksOfARunNotRunningAreRefused_data() {
    QTest::addColumn<QString>("run");
    QTest::addColumn<QString>("why");
    QTest::newRow("unknown run") << "7"
                                 << "no run with id 7";
    QTest::newRow("finished run") << "latest"
                                  << "run 1 is not running (finished";
    QTest::newRow("no runs") << "none"
                             << "holds no runs";
  }
  void stacksOfARunNotRunningAreRefused() {
    QFETCH(QString, run);
    QFETCH(QString, why);
    QTemporaryDir dir, runs, empty;
    Profile p = scriptProfile(dir, QString(kReport) + "report(1)\n", 1);
    QCOMPARE(runPtw({"--headless", "--runs-dir", runs.path(), "--profile",
                     QString::fromStdString(test::writeProfile(dir, p))})
                 .code,
             0);
    const Result r =
        runPtw({"stacks", run == "none" ? "latest" : run, "--runs-dir", run == "none" ? empty.path() : runs.path()});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(why), qPrintable(r.err));
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY(r.out.isEmpty());
  }

  // Rank 0's program ends when the stacks signal comes (its own handler exits 7) while rank 1
  // hangs: rank 0's section says it ended, and the run is still rank 1's stall.
  void aRankThatEndsWhileTakenIsNamed() {
    QTemporaryDir dir, runs;
    const QString script = QString(kReport) + R"(
def wait_forever():
    while True:
        time.sleep(0.05)  # rank 1 is here

report(1)
if RANK == 1:
    wait_forever()
signal.signal(int(os.environ["PTW_STACKS_SIGNAL"]), lambda *a: os._exit(7))
step = 1
while True:
    step += 1
    report(step)
    time.sleep(0.02)
)";
    Profile p = scriptProfile(dir, script, 2);
    p.run.timeoutS = 3;
    const QString summary = runs.filePath("summary.json");
    const Result r = runPtw({"--headless", "--runs-dir", runs.path(), "--summary", summary, "--profile",
                             QString::fromStdString(test::writeProfile(dir, p))});
    QCOMPARE(r.code, 3);
    const QJsonObject s = readSummary(summary);
    QCOMPARE(s["failed_rank"].toInt(), 1);
    QVERIFY2(s["message"].toString().startsWith("rank 1 stopped making progress"), qPrintable(s["message"].toString()));
    QVERIFY2(s["message"].toString().contains(
                 QString("at wait_forever (script.py:%1)").arg(lineOf(script, "rank 1 is here"))),
             qPrintable(s["message"].toString()));
    const QString stacks = readFile(s["stacks"].toString());
    QVERIFY2(section(stacks, 0).contains("(ended while its stack was taken)"), qPrintable(stacks));
    QVERIFY2(section(stacks, 1).contains("in wait_forever"), qPrintable(stacks));
  }
};

QTEST_GUILESS_MAIN(TestStacks)
#include "test_stacks.moc"
