// SPDX-License-Identifier: GPL-3.0-or-later
// The command strategy held against torchrun itself (Note [Script ranks] in common/command.h):
// a script gets under ptw the environment Debian's `torch.distributed.run --standalone
// --nproc_per_node N` gives it; a rank whose program raised through torch's @record is named
// by what it raised and where, from its error file; and a Python that cannot import torch is
// refused before a run starts. Needs /usr/bin/python3 with torch (python3-torch); skipped,
// saying so, without.
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QProcessEnvironment>
#include <QStandardPaths>
#include <QtTest>

#include <map>
#include <set>
#include <string>

#include "common/command.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

// Debian's Python, with python3-torch; never the first python3 on PATH (a pyenv shim, say).
const QString kPython = "/usr/bin/python3";

struct Ran {
  int code = -1;  ///< -1: killed at the time limit, or did not start
  QString out, err;
};

// Runs `program` in `cwd` with `env`, killed after `limitMs`.
Ran runBounded(const QString& program, const QStringList& args, const QProcessEnvironment& env, const QString& cwd,
               int limitMs) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.setWorkingDirectory(cwd);
  p.start(program, args);
  if (!p.waitForFinished(limitMs)) {
    p.kill();
    p.waitForFinished(5000);
    return {-1, QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError())};
}

// Whether Debian's Python has `module`; asked once per module.
bool pythonHas(const QString& module) {
  static std::map<QString, bool> known;
  const auto found = known.find(module);
  if (found != known.end()) return found->second;
  if (!QFileInfo(kPython).isExecutable()) return known[module] = false;
  return known[module] = runBounded(kPython, {"-c", "import " + module}, QProcessEnvironment::systemEnvironment(),
                                    QDir::tempPath(), 120000)
                             .code == 0;
}

Ran runPtw(const QStringList& args, const QTemporaryDir& runs,
           const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  return runBounded(test::binDir() + "/ptw", QStringList{"--headless", "--runs-dir", runs.path()} + args, env,
                    runs.path(), 180000);
}

void writeFile(const QString& path, const QString& text) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(text.toUtf8());
}

// A profile of `ranks` processes of Debian's Python running `script` (written to `dir`).
Profile scriptProfile(const QTemporaryDir& dir, const QString& script, int ranks = 2) {
  writeFile(dir.filePath("script.py"), script);
  Profile p = defaultProfile();
  p.name = "script";
  p.strategy.kind = "command";
  p.strategy.ranks = ranks;
  p.command.program = kPython.toStdString();
  p.command.args = {"script.py"};
  p.command.cwd = dir.path().toStdString();
  p.command.stopGraceS = 0.5;
  return p;
}

// The one run folder in `runs`; "" when none was made.
QString runFolder(const QTemporaryDir& runs) {
  for (const auto& d : QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot))
    if (d != "runs.blocks") return runs.filePath(d);
  return {};
}

QJsonObject readJson(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QJsonDocument::fromJson(f.readAll()).object();
}

// The 1-based line of `script` that holds `text`.
int lineOf(const QString& script, const QString& text) { return script.left(script.indexOf(text)).count('\n') + 1; }

// Each rank's environment as a JSON object, in OUT/env.RANK.json (OUT: the first argument).
const char* kDumpEnvironment = R"(import json, os, sys
with open(os.path.join(sys.argv[1], "env.%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(dict(os.environ), f)
)";

// torchrun as Debian 12 ships it (torch 1.13, Python 3.11) fails before starting a process:
// Std.from_str("0") gives None there, as 3.11 no longer iterates a flag's zero member, and
// to_map(None, n) raises. This takes None as Std.NONE, and is torchrun otherwise.
const char* kTorchrun = R"(import sys
import torch.distributed.elastic.multiprocessing as mp
import torch.distributed.elastic.multiprocessing.api as api
from torch.distributed.elastic.multiprocessing.api import Std
original = api.to_map
def to_map(val_or_map, local_world_size):
    return original(Std.NONE if val_or_map is None else val_or_map, local_world_size)
mp.to_map = api.to_map = to_map
import torch.distributed.run
sys.exit(torch.distributed.run.main())
)";

// A python3 that is Debian's but for torch, which it cannot import: a module of that name
// first on its path raises as a missing module does, unless STAND_IN_HAS_TORCH is 1.
const char* kTorchShadow = R"(import os
if os.environ.get("STAND_IN_HAS_TORCH") != "1":
    raise ImportError("no torch in this stand-in Python")
)";

// `dir`/bin/python3, that stand-in; returns the bin folder.
QString standInPython(const QTemporaryDir& dir) {
  QDir(dir.path()).mkpath("bin");
  QDir(dir.path()).mkpath("shadow/torch");
  writeFile(dir.filePath("shadow/torch/__init__.py"), kTorchShadow);
  const QString python = dir.filePath("bin/python3");
  writeFile(python, "#!/bin/sh\nPYTHONPATH=\"" + dir.filePath("shadow") + "${PYTHONPATH:+:$PYTHONPATH}\" exec " +
                        kPython + " \"$@\"\n");
  QFile::setPermissions(python, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  return dir.filePath("bin");
}

// The line ptw says when the stand-in is command.program.
QString refusal(const QString& binDir) {
  return "ptw: command.program: " + binDir +
         "/python3 cannot import torch (ImportError: no torch in this stand-in Python); set command.program to a "
         "Python that has torch, e.g. /usr/bin/python3\n";
}

// What headless said on stderr but its warnings (too few cores, say), which depend on the host.
QString withoutWarnings(const QString& err) {
  QString kept;
  for (const auto& line : err.split('\n', Qt::SkipEmptyParts))
    if (!line.startsWith("ptw: warning: ")) kept += line + "\n";
  return kept;
}

}  // namespace

class TestTorchrunEnv : public QObject {
  Q_OBJECT
 private slots:
  void init() {
    if (!pythonHas("torch.distributed.run")) QSKIP("needs /usr/bin/python3 with torch (python3-torch)");
  }

  // The same script under torchrun and under ptw, 2 processes each: the same variables, with the
  // same values but for those each run picks anew.
  void torchrunAndPtwGiveTheSameEnvironment() {
    QTemporaryDir dir, runs;
    QDir(dir.path()).mkpath("torchrun");
    QDir(dir.path()).mkpath("ptw");
    writeFile(dir.filePath("torchrun.py"), kTorchrun);
    Profile p = scriptProfile(dir, kDumpEnvironment);
    p.command.args = {"script.py", dir.filePath("ptw").toStdString()};
    // Both start from this environment; ptw puts its own PYTHONPATH and PYTHONUNBUFFERED first.
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("PYTHONPATH");
    env.remove("PYTHONUNBUFFERED");
    env.remove("PYTHONFAULTHANDLER");
    const Ran torchrun = runBounded(
        kPython, {"torchrun.py", "--standalone", "--nproc_per_node", "2", "script.py", dir.filePath("torchrun")}, env,
        dir.path(), 120000);
    QVERIFY2(torchrun.code == 0, qPrintable(torchrun.out + torchrun.err));
    const Ran ptw = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs, env);
    QVERIFY2(ptw.code == 0, qPrintable(ptw.out + ptw.err));

    // ptw's own: what it reads records from and finds strays by, and what makes a script's
    // output and ptw_metrics reach it.
    const std::map<QString, QString> ptwOnly = {
        {"PTW_METRICS", "the FIFO ptw reads records from"},
        {"PTW_RUN_TOKEN", "marks the run's processes for the sweep at its end"},
        {"PYTHONUNBUFFERED", "printed lines reach the log and a pattern as they are printed"},
        {"PYTHONPATH", "puts ptw_metrics on the path"},
        {"PTW_STACKS_FILE", "where a Python process writes its stacks when ptw takes them"},
        {"PTW_STACKS_SIGNAL", "the signal it writes them on"},
        {"PYTHONFAULTHANDLER", "a crash prints the Python frames it happened in"},
    };
    // Named by both, with values each run picks for itself.
    const std::map<QString, QString> runSpecific = {
        {"MASTER_PORT", "a port free when the run started"},
        {"MASTER_ADDR", "torchrun --standalone gives its host's name (localhost); ptw 127.0.0.1, loopback alone"},
        {"TORCHELASTIC_RUN_ID", "a uuid under torchrun, the run folder's name under ptw"},
        {"TORCHELASTIC_ERROR_FILE", "a file in each launcher's own folder"},
    };
    const QString folder = runFolder(runs);
    for (int rank = 0; rank < 2; ++rank) {
      const QJsonObject theirs = readJson(dir.filePath(QString("torchrun/env.%1.json").arg(rank)));
      const QJsonObject ours = readJson(dir.filePath(QString("ptw/env.%1.json").arg(rank)));
      QVERIFY2(!theirs.isEmpty() && !ours.isEmpty(), "a rank wrote no environment");
      for (const auto& name : theirs.keys())
        QVERIFY2(ours.contains(name), qPrintable("ptw lacks " + name + ", which torchrun sets"));
      for (const auto& name : ours.keys()) {
        if (ptwOnly.count(name)) {
          QVERIFY2(!theirs.contains(name), qPrintable(name + " is no longer ptw's alone"));
          continue;
        }
        QVERIFY2(theirs.contains(name), qPrintable("ptw sets " + name + ", which torchrun does not"));
        if (!runSpecific.count(name))
          QVERIFY2(ours[name] == theirs[name],
                   qPrintable(name + ": ptw " + ours[name].toString() + ", torchrun " + theirs[name].toString()));
      }
      // The run-specific ones, as ptw's run has them.
      QCOMPARE(ours["MASTER_ADDR"].toString(), QString("127.0.0.1"));
      QCOMPARE(ours["TORCHELASTIC_RUN_ID"].toString(), QFileInfo(folder).fileName());
      QCOMPARE(ours["TORCHELASTIC_ERROR_FILE"].toString(), folder + QString("/rank%1.error.json").arg(rank));
      QCOMPARE(ours["PYTHONPATH"].toString(), QFileInfo(test::sourcePath("resources/python")).canonicalFilePath());
      QCOMPARE(ours["PYTHONUNBUFFERED"].toString(), QString("1"));
      QVERIFY(ours["PTW_METRICS"].toString().startsWith(folder + "/"));
      QCOMPARE(ours["PTW_STACKS_FILE"].toString(), folder + QString("/rank%1.pystacks").arg(rank));
      const int port = ours["MASTER_PORT"].toString().toInt();
      QVERIFY2(port > 0 && port < 65536, qPrintable(ours["MASTER_PORT"].toString()));
      // Every value that is the rank's own differs between the ranks as torchrun's do.
      QCOMPARE(ours["RANK"].toString(), QString::number(rank));
    }
    // One run: each run-specific value is the same for every rank, under both.
    for (const QString sub : {"torchrun", "ptw"}) {
      const QJsonObject r0 = readJson(dir.filePath(sub + "/env.0.json"));
      const QJsonObject r1 = readJson(dir.filePath(sub + "/env.1.json"));
      for (const QString name : {"MASTER_PORT", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"})
        QVERIFY2(r0[name] == r1[name], qPrintable(sub + ": " + name + " differs between the ranks"));
    }
  }

  // A program that raised through torch's @record is named by what it raised and where, in the
  // run's message (before its last lines) and in the summary.
  void theErrorFileNamesWhatTheProgramRaised() {
    QTemporaryDir dir, runs;
    const QString script = R"(import os, time
from torch.distributed.elastic.multiprocessing.errors import record

def load_batch(n):
    raise ValueError("bad batch %d" % n)

@record
def main():
    if os.environ["RANK"] == "1":
        load_batch(7)
    time.sleep(120)

main()
)";
    Profile p = scriptProfile(dir, script);
    const QString summary = runs.filePath("summary.json");
    const Ran r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p)), "--summary", summary}, runs);
    QCOMPARE(r.code, 3);
    const QString expected = "rank 1 failed with exit code 1: ValueError: bad batch 7 (at " +
                             QFileInfo(dir.path()).canonicalFilePath() +
                             "/script.py:" + QString::number(lineOf(script, "raise ValueError")) + ", in load_batch)";
    QCOMPARE(readJson(summary)["message"].toString(), expected);
    const QString failed = "ptw: run failed: " + expected + "\n";
    QVERIFY2(r.err.contains(failed), qPrintable(r.err));
    const auto lastLines = r.err.indexOf("log line(s) of rank 1:");
    QVERIFY2(lastLines > r.err.indexOf(failed), qPrintable(r.err));
    // The traceback Python printed is among them, as before.
    QVERIFY2(r.err.indexOf("Traceback (most recent call last)", lastLines) > lastLines, qPrintable(r.err));
  }

  // The error file is removed before each attempt: a restarted rank that fails without @record
  // is named by its exit, not by what the attempt before raised. TORCHELASTIC_RESTART_COUNT
  // tells the script which attempt it is.
  void aRestartDoesNotBlameTheLastAttemptsError() {
    QTemporaryDir dir, runs;
    const QString script = R"py(import os, sys, time
from torch.distributed.elastic.multiprocessing.errors import record

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print("attempt %d, at most %s restart(s)" % (attempt, os.environ["TORCHELASTIC_MAX_RESTARTS"]), flush=True)
if os.environ["RANK"] == "1" and attempt == 1:
    print("no error file this time", flush=True)
    sys.exit(3)

def load_batch(n):
    raise ValueError("bad batch %d" % n)

@record
def main():
    if os.environ["RANK"] == "1":
        load_batch(7)
    time.sleep(120)

main()
)py";
    Profile p = scriptProfile(dir, script);
    p.run.maxRestarts = 1;
    const QString summary = runs.filePath("summary.json");
    const Ran r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p)), "--summary", summary}, runs);
    QCOMPARE(r.code, 3);
    QCOMPARE(readJson(summary)["message"].toString(), QString("rank 1 failed with exit code 1"));
    QVERIFY2(r.err.contains("ptw: run failed: rank 1 failed with exit code 1\n"), qPrintable(r.err));
    QVERIFY2(r.err.contains("/usr/bin/python3 script.py exited with code 3"), qPrintable(r.err));
    QVERIFY2(r.err.contains("no error file this time"), qPrintable(r.err));
    // The first attempt's failure was named by its error file.
    QVERIFY2(r.out.contains("ptw: restarting (attempt 2 of 2) from the start after: rank 1 failed with exit code 1: "
                            "ValueError: bad batch 7 (at "),
             qPrintable(r.out));
    QFile log(runFolder(runs) + "/rank1.log");
    QVERIFY(log.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(log.readAll());
    QVERIFY2(text.contains("attempt 0, at most 1 restart(s)") && text.contains("attempt 1, at most 1 restart(s)"),
             qPrintable(text));
  }

  void pythonsAreKnownByName_data() {
    QTest::addColumn<QString>("program");
    QTest::addColumn<bool>("python");
    QTest::newRow("python3") << "python3" << true;
    QTest::newRow("python") << "python" << true;
    QTest::newRow("a version") << "python3.11" << true;
    QTest::newRow("a path") << "/root/.pyenv/shims/python3" << true;
    QTest::newRow("a venv") << "./venv/bin/python" << true;
    QTest::newRow("mpirun") << "mpirun" << false;
    QTest::newRow("python2") << "python2" << false;
    QTest::newRow("ipython") << "ipython" << false;
    QTest::newRow("python3-config") << "python3-config" << false;
    QTest::newRow("a folder named python3") << "/opt/python3/bin/train" << false;
  }
  void pythonsAreKnownByName() {
    QFETCH(QString, program);
    QFETCH(bool, python);
    QCOMPARE(isPythonProgram(program.toStdString()), python);
  }

  // What torch 1.13's ErrorHandler.record_exception writes, and files that are not that.
  void anErrorFileGivesTheExceptionAndWhere_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("expected");
    auto errorFile = [](const QString& message, const QString& callstack) {
      const QJsonObject extra{{"py_callstack", callstack}, {"timestamp", "1700000000"}};
      const QJsonObject inner{{"message", message}, {"extraInfo", extra}};
      return QString::fromUtf8(QJsonDocument(QJsonObject{{"message", inner}}).toJson());
    };
    const QString callstack =
        "Traceback (most recent call last):\n"
        "  File \"/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/"
        "errors/__init__.py\", line 346, in wrapper\n"
        "    return f(*args, **kwargs)\n"
        "           ^^^^^^^^^^^^^^^^^^\n"
        "  File \"/w/train.py\", line 10, in main\n"
        "    load_batch(7)\n"
        "  File \"/w/train.py\", line 5, in load_batch\n"
        "    raise ValueError(\"bad batch %d\" % n)\n"
        "ValueError: bad batch 7\n";
    QTest::newRow("torch 1.13") << errorFile("ValueError: bad batch 7", callstack)
                                << "ValueError: bad batch 7 (at /w/train.py:5, in load_batch)";
    QTest::newRow("many lines") << errorFile("RuntimeError: first\nsecond", "") << "RuntimeError: first";
    QTest::newRow("a plain message") << QString::fromUtf8(
                                            QJsonDocument(QJsonObject{{"message", "KeyError: 'x'"}}).toJson())
                                     << "KeyError: 'x'";
    QTest::newRow("not json") << "Traceback (most recent call last):"
                              << "";
    QTest::newRow("no message") << QString::fromUtf8(QJsonDocument(QJsonObject{{"error", "x"}}).toJson()) << "";
    QTest::newRow("empty") << ""
                           << "";
  }
  void anErrorFileGivesTheExceptionAndWhere() {
    QFETCH(QString, file);
    QFETCH(QString, expected);
    QCOMPARE(QString::fromStdString(errorFileCause(file.toStdString())), expected);
  }

  // command.program a Python without torch: one line naming it and the fix, exit 2, and no
  // process started.
  void aPythonWithoutTorchIsRefusedBeforeTheRun() {
    QTemporaryDir dir, runs;
    const QString bin = standInPython(dir);
    Profile p = scriptProfile(dir, "open('started', 'w').close()\n");
    p.command.program = "python3";
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("PATH", bin + ":/usr/bin:/bin");
    const Ran r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs, env);
    QCOMPARE(r.code, 2);
    QCOMPARE(withoutWarnings(r.err), refusal(bin));
    QVERIFY(!QFile::exists(dir.filePath("started")));
    QCOMPARE(runFolder(runs), QString());
    // The profile's command.env reaches the check as it reaches the ranks: here it lets the
    // stand-in import its torch, and the run goes on.
    p.command.env = {"STAND_IN_HAS_TORCH=1"};
    const Ran fixed = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs, env);
    QVERIFY2(fixed.code == 0, qPrintable(fixed.out + fixed.err));
    QVERIFY(QFile::exists(dir.filePath("started")));
  }

  // The shipped script profiles with that Python first on PATH: those whose program is python3
  // stop with the line; mpirun's, whose scripts need no torch, runs.
  void theShippedProfilesRunOrSayWhichPython_data() {
    QTest::addColumn<QString>("profile");
    QTest::addColumn<bool>("refused");
    QTest::newRow("ddp") << "script-ddp.json" << true;
    QTest::newRow("ddp, pattern") << "script-ddp-pattern.json" << true;
    QTest::newRow("mpirun") << "script-mpi.json" << false;
  }
  void theShippedProfilesRunOrSayWhichPython() {
    QFETCH(QString, profile);
    QFETCH(bool, refused);
    if (!refused && (QStandardPaths::findExecutable("mpirun", {"/usr/bin"}).isEmpty() || !pythonHas("mpi4py")))
      QSKIP("needs mpirun (openmpi-bin) and mpi4py (python3-mpi4py)");
    QTemporaryDir dir, runs;
    const QString bin = standInPython(dir);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("PATH", bin + ":/usr/bin:/bin");
    const Ran r = runPtw(
        {"--profile", test::sourcePath("resources/profiles/" + profile), "--set", "hyper.max_steps=30"}, runs, env);
    if (refused) {
      QCOMPARE(r.code, 2);
      QCOMPARE(withoutWarnings(r.err), refusal(bin));
    } else {
      QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
      QVERIFY2(r.out.contains("all 1 ranks finished"), qPrintable(r.out));
    }
  }
};

QTEST_GUILESS_MAIN(TestTorchrunEnv)
#include "test_torchrun_env.moc"
