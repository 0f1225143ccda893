// SPDX-License-Identifier: GPL-3.0-or-later
// `ptw follow` and `ptw stop` beside a headless run (Note [Following a run] in
// launch/run_follower.h, Note [Control channel] in launch/control_channel.h): what a
// follower prints is what the store holds at the end, a follower killed mid-run changes
// nothing, and a stop is the owner's alone. The runs are of a Python script (a command
// profile) that waits at step 10 for a file the test creates, so that whatever the test
// does mid-run happens mid-run, however loaded the machine.
#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QStandardPaths>
#include <QtTest>

#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "common/profile.h"
#include "common/version.h"
#include "launch/follow_stream.h"
#include "launch/headless.h"
#include "launch/run_store.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

constexpr int kRanks = 2;
constexpr int kGateStep = 10;  // the script waits here for the gate file

// Reports a step a line, with a named scalar, and counts what it reported in reported.RANK:
// a stop (SIGINT, SIGTERM) ends it at the next step, so the count is exact.
const char* kScript = R"(import json, os, sys, time, signal
RANK = int(os.environ["RANK"])
ch = open(os.environ["PTW_METRICS"], "w", buffering=1)
gate, steps = sys.argv[1], int(sys.argv[2])
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
print("hello from rank %d" % RANK, flush=True)
done = 0
for step in range(steps):
    if step == 10:
        end = time.time() + 60
        while not os.path.exists(gate) and not stop and time.time() < end:
            time.sleep(0.02)
    if stop:
        break
    ch.write(json.dumps({"step": step, "loss": 1.0 / (step + 1), "samples": 8, "grad_norm": 0.5 * step}) + "\n")
    done += 1
    with open("reported.%d" % RANK, "w") as f:
        f.write(str(done))
    time.sleep(0.01)
print("bye from rank %d after %d steps" % (RANK, done), flush=True)
)";

struct Result {
  int code = -1;
  QByteArray out;
  QString err;
};

// `ptw ARGS` to its end (bounded), as `prefix` (setpriv ... to run it as another user) when given.
Result runPtw(const QStringList& args, const QStringList& prefix = {}) {
  QProcess p;
  if (prefix.isEmpty())
    p.start(test::binDir() + "/ptw", args);
  else
    p.start(prefix.front(), prefix.mid(1) + QStringList{test::binDir() + "/ptw"} + args);
  if (!p.waitForFinished(60000)) {
    p.kill();
    p.waitForFinished(5000);
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
          QString::fromUtf8(p.readAllStandardError())};
}

// A script run: the script and its profile in `work`, the runs in `runs`.
struct ScriptRun {
  QTemporaryDir work, runs;
  QProcess ptw;
  QString gate() const { return work.filePath("gate"); }

  explicit ScriptRun(int steps) {
    QFile f(work.filePath("script.py"));
    f.open(QIODevice::WriteOnly);
    f.write(kScript);
    f.close();
    Profile p = defaultProfile();
    p.name = "follow";
    p.strategy.kind = "command";
    p.strategy.ranks = kRanks;
    p.command.program = "/usr/bin/python3";  // never the first python3 on PATH
    p.command.args = {"script.py", gate().toStdString(), std::to_string(steps)};
    p.command.cwd = work.path().toStdString();
    p.command.stopGraceS = 5;
    p.hyper.maxSteps = 0;
    test::writeProfile(work, p);
  }
  ~ScriptRun() {
    if (ptw.state() != QProcess::NotRunning) {
      ptw.kill();
      ptw.waitForFinished(10000);
    }
  }
  void start() {
    ptw.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "-p", work.filePath("profile.json")});
  }
  QString runFolder() const {
    for (const auto& d : QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot))
      if (d != "runs.blocks") return runs.filePath(d);
    return {};
  }
  QString control() const { return runFolder() + "/supervisor/control"; }
  // Steps each rank's script reported, as it counted them.
  int reported(int rank) const {
    QFile f(work.filePath(QString("reported.%1").arg(rank)));
    return f.open(QIODevice::ReadOnly) ? f.readAll().trimmed().toInt() : 0;
  }
  bool allAtGate() const {
    for (int r = 0; r < kRanks; ++r)
      if (reported(r) < kGateStep) return false;
    return true;
  }
  void openGate() {
    QFile g(gate());
    g.open(QIODevice::WriteOnly);
  }
  int finish() {
    if (!ptw.waitForFinished(90000)) return -1;
    return ptw.exitStatus() == QProcess::NormalExit ? ptw.exitCode() : -1;
  }
};

struct Follower {
  QProcess p;
  QByteArray out;
  void start(const QString& runsDir, const QStringList& extra) {
    p.start(test::binDir() + "/ptw", QStringList{"follow", "latest", "--runs-dir", runsDir} + extra);
  }
  // Reads what it printed so far.
  const QByteArray& read() {
    out += p.readAllStandardOutput();
    return out;
  }
  int finish() {
    if (!p.waitForFinished(60000)) {
      p.kill();
      p.waitForFinished(5000);
      return -1;
    }
    read();
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  }
};

std::vector<QJsonObject> jsonLines(const QByteArray& out) {
  std::vector<QJsonObject> lines;
  for (const QByteArray& l : out.split('\n'))
    if (!l.isEmpty()) lines.push_back(QJsonDocument::fromJson(l).object());
  return lines;
}

std::vector<QJsonObject> ofKind(const std::vector<QJsonObject>& lines, const char* kind) {
  std::vector<QJsonObject> out;
  for (const auto& l : lines)
    if (l["kind"].toString() == kind) out.push_back(l);
  return out;
}

// The runs dir's files and a hash of each: what "nothing changed" compares.
std::map<QString, QByteArray> contents(const QString& dir) {
  std::map<QString, QByteArray> out;
  for (const auto& e : QDir(dir).entryInfoList(QDir::Files | QDir::Dirs | QDir::NoDotAndDotDot)) {
    QFile f(e.filePath());
    out[e.fileName()] = e.isDir() || !f.open(QIODevice::ReadOnly)
                            ? QByteArray("dir")
                            : QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256);
  }
  return out;
}

// The program that runs a command as user nobody, or "" where there is none.
QStringList asNobody() {
  if (QFileInfo::exists("/usr/bin/setpriv"))
    return {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  if (QFileInfo::exists("/usr/sbin/runuser")) return {"/usr/sbin/runuser", "-u", "nobody", "--"};
  return {};
}

}  // namespace

class TestFollow : public QObject {
  Q_OBJECT
 private slots:
  // Two followers beside a run, one of each format, and a third killed mid-run: the steps
  // printed are the stored ones, record for record, and the run is as it would be without them.
  void followersPrintWhatIsStored() {
    constexpr int kSteps = 30;
    ScriptRun run(kSteps);
    run.start();
    QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(run.control()), 30000);
    Follower jsonl, frames, killed;
    jsonl.start(run.runs.path(), {"--format", "jsonl"});
    frames.start(run.runs.path(), {});
    killed.start(run.runs.path(), {"--format", "jsonl"});
    // The killed follower has printed a step record when it is killed: it is reading.
    QTRY_VERIFY_WITH_TIMEOUT(killed.read().contains("\"kind\":\"step\""), 30000);
    ::kill(static_cast<pid_t>(killed.p.processId()), SIGKILL);
    QVERIFY(killed.p.waitForFinished(10000));
    QCOMPARE(killed.p.exitStatus(), QProcess::CrashExit);
    run.openGate();

    QCOMPARE(run.finish(), 0);
    QCOMPARE(jsonl.finish(), 0);
    QCOMPARE(frames.finish(), 0);

    RunStore store(run.runs.path().toStdString());
    const auto row = store.runs().back();
    QCOMPARE(QString::fromStdString(row.status), QString("finished"));
    const auto steps = store.steps(row.id);
    QCOMPARE(store.stepCount(row.id), std::int64_t{kRanks * kSteps});  // the killed follower took nothing
    QCOMPARE(static_cast<int>(steps.size()), kRanks * kSteps);

    // jsonl: every stored record once, with its fields.
    const auto lines = jsonLines(jsonl.out);
    QVERIFY(!lines.empty());
    QCOMPARE(lines.front()["kind"].toString(), QString("run"));
    QCOMPARE(lines.front()["run"].toInteger(), qint64(row.id));
    std::map<std::pair<int, qint64>, double> printed;
    for (const auto& s : ofKind(lines, "step"))
      printed[{s["rank"].toInt(), s["step"].toInteger()}] = s["loss"].toDouble();
    QCOMPARE(static_cast<int>(ofKind(lines, "step").size()), kRanks * kSteps);
    std::map<std::pair<int, qint64>, double> stored;
    for (const auto& s : steps) stored[{s.rank, s.step}] = s.loss;
    QVERIFY(printed == stored);
    QCOMPARE(ofKind(lines, "scalar").size(), store.scalars(row.id).size());
    std::set<std::pair<int, QString>> logs;
    for (const auto& l : ofKind(lines, "log")) logs.insert({l["rank"].toInt(), l["line"].toString()});
    for (int r = 0; r < kRanks; ++r) {
      QVERIFY(logs.count({r, QString("hello from rank %1").arg(r)}));
      QVERIFY(logs.count({r, QString("bye from rank %1 after %2 steps").arg(r).arg(kSteps)}));
    }
    QCOMPARE(lines.back()["kind"].toString(), QString("end"));
    QCOMPARE(lines.back()["status"].toString(), QString("finished"));
    QCOMPARE(lines.back()["exit_code"].toInt(), 0);

    // frames: the header line, then as many step records, the same logs, and the end.
    const int newline = frames.out.indexOf('\n');
    QVERIFY(newline > 0);
    const QByteArray header = frames.out.left(newline);
    QVERIFY2(
        header.startsWith("ptw-follow 1 ptw=" + QByteArray(kVersion) + " run=" + QByteArray::number(qint64(row.id))),
        header.constData());
    FollowStream::Decoded decoded;
    bool malformed = false;
    const std::string_view body(frames.out.constData() + newline + 1, frames.out.size() - newline - 1);
    QCOMPARE(FollowStream::decode(body, decoded, malformed), body.size());
    QVERIFY(!malformed);
    std::map<std::pair<int, qint64>, double> decodedSteps;
    std::size_t scalars = 0;
    for (const auto& r : decoded.records) {
      if (r.kind == Record::Kind::Step) decodedSteps[{r.step.rank, r.step.step}] = r.step.loss;
      scalars += r.kind == Record::Kind::Scalar;
    }
    QCOMPARE(static_cast<int>(std::count_if(decoded.records.begin(), decoded.records.end(),
                                            [](const Record& r) { return r.kind == Record::Kind::Step; })),
             kRanks * kSteps);
    QVERIFY(decodedSteps == stored);
    QCOMPARE(scalars, store.scalars(row.id).size());
    QCOMPARE(decoded.logs.size(), ofKind(lines, "log").size());
    QVERIFY(decoded.end.has_value());
    QCOMPARE(decoded.end->first, 0);
    QVERIFY(decoded.end->second.rfind("finished\t", 0) == 0);

    // After the end, from the store alone: --from-step leaves out the steps below it.
    Follower late;
    late.start(run.runs.path(), {"--format", "jsonl", "--from-step", "25"});
    QCOMPARE(late.finish(), 0);
    const auto lateSteps = ofKind(jsonLines(late.out), "step");
    const auto wanted = std::count_if(steps.begin(), steps.end(), [](const StepRecord& s) { return s.step >= 25; });
    QCOMPARE(static_cast<long>(lateSteps.size()), static_cast<long>(wanted));
    for (const auto& s : lateSteps) QVERIFY(s["step"].toInteger() >= 25);

    // The nodes a SLURM job gave the ranks, which its supervisor writes into the run folder:
    // a follower tells them once, in either form.
    Profile placed = loadProfile(row.dir + "/profile.json");
    placed.hosts.launcher = "slurm";
    placed.hosts.hosts = {"nodeA:1", "nodeB:1"};
    saveProfile(placed, row.dir + "/profile.nodes.json");
    Follower told, toldFrames;
    told.start(run.runs.path(), {"--format", "jsonl"});
    toldFrames.start(run.runs.path(), {});
    QCOMPARE(told.finish(), 0);
    QCOMPARE(toldFrames.finish(), 0);
    const auto hosts = ofKind(jsonLines(told.out), "hosts");
    QCOMPARE(hosts.size(), std::size_t{1});
    QCOMPARE(hosts.front()["hosts"].toVariant().toStringList(), QStringList({"nodeA", "nodeB"}));
    FollowStream::Decoded toldDecoded;
    const int toldHeader = toldFrames.out.indexOf('\n');
    const std::string_view toldBody(toldFrames.out.constData() + toldHeader + 1,
                                    toldFrames.out.size() - toldHeader - 1);
    QCOMPARE(FollowStream::decode(toldBody, toldDecoded, malformed), toldBody.size());
    QVERIFY(!malformed && toldDecoded.hosts.has_value());
    QCOMPARE(*toldDecoded.hosts, std::vector<std::string>({"nodeA", "nodeB"}));
  }

  // `ptw stop` by the owner: the run stops as on SIGINT, every reported record stored.
  void stopByTheOwner() {
    ScriptRun run(1000);
    run.start();
    QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(run.control()), 30000);
    QTRY_VERIFY_WITH_TIMEOUT(run.allAtGate(), 30000);  // the gate stays shut: only a stop ends the run
    const Result stop = runPtw({"stop", "latest", "--runs-dir", run.runs.path()});
    QVERIFY2(stop.code == 0, qPrintable(stop.err));
    QVERIFY(stop.out.contains("asked run 1 to stop"));
    QCOMPARE(run.finish(), int(kExitInterrupted));
    QVERIFY(!QFileInfo::exists(run.control()));  // gone with the run

    RunStore store(run.runs.path().toStdString());
    const auto row = store.runs().back();
    QCOMPARE(QString::fromStdString(row.status), QString("stopped"));
    QCOMPARE(store.stepCount(row.id), std::int64_t(run.reported(0) + run.reported(1)));
    QCOMPARE(run.reported(0), kGateStep);

    // Again, now that it has ended: said, and nothing to do.
    const Result again = runPtw({"stop", "1", "--runs-dir", run.runs.path()});
    QCOMPARE(again.code, 2);
    QVERIFY2(again.err.contains("run 1 is not running (stopped"), qPrintable(again.err));
  }

  // Another user cannot open the run's control channel: refused with a message, and the
  // run goes on to its end.
  void stopByAnotherUserIsRefused() {
    if (::geteuid() != 0) QSKIP("runs `ptw stop` as user nobody, which needs root");
    const QStringList nobody = asNobody();
    if (nobody.isEmpty()) QSKIP("neither setpriv nor runuser is installed to run `ptw stop` as nobody");
    if (runPtw({"--version"}, nobody).code != 0)
      QSKIP("user nobody cannot run ptw from its build folder (a folder above it is not world-readable)");
    constexpr int kSteps = 20;
    ScriptRun run(kSteps);
    // The store readable by all, as a shared runs folder is: only the channel is the owner's.
    QFile::setPermissions(run.runs.path(), QFile::permissions(run.runs.path()) | QFile::ReadOther | QFile::ExeOther |
                                               QFile::ReadGroup | QFile::ExeGroup);
    run.start();
    QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(run.control()), 30000);
    QTRY_VERIFY_WITH_TIMEOUT(run.allAtGate(), 30000);
    const Result stop = runPtw({"stop", "latest", "--runs-dir", run.runs.path()}, nobody);
    QCOMPARE(stop.code, 2);
    QVERIFY2(stop.err.contains("only the user who started the run can stop it"), qPrintable(stop.err));
    QVERIFY2(stop.err.contains("Permission denied"), qPrintable(stop.err));
    QCOMPARE(run.ptw.state(), QProcess::Running);
    run.openGate();

    QCOMPARE(run.finish(), 0);
    RunStore store(run.runs.path().toStdString());
    const auto row = store.runs().back();
    QCOMPARE(QString::fromStdString(row.status), QString("finished"));
    QCOMPARE(store.stepCount(row.id), std::int64_t{kRanks * kSteps});
  }

  // Bad input: one line naming what is wrong, exit 2, and the runs folder as it was.
  void unreachableHostIsSaid_data();
  void unreachableHostIsSaid();

  void badInputChangesNothing_data() {
    QTest::addColumn<QString>("setup");  // empty | no-runs | ended | other-version
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("said");
    QTest::newRow("no store") << "empty" << QStringList{"follow", "latest"} << "holds no runs (no runs.sqlite there)";
    QTest::newRow("store without runs") << "no-runs" << QStringList{"follow", "latest"} << "holds no runs yet";
    QTest::newRow("unknown run") << "ended" << QStringList{"follow", "99"} << "no run with id 99";
    QTest::newRow("not a run id") << "ended" << QStringList{"follow", "last"}
                                  << "RUN: expected a run id (see `ptw runs`), `latest` or a run folder, got 'last'";
    QTest::newRow("another version") << "other-version" << QStringList{"follow", "1", "--format", "jsonl"}
                                     << "run 1 was made by ptw 0.0.1-other, not by this ptw";
    QTest::newRow("stop: no store") << "empty" << QStringList{"stop", "latest"} << "holds no runs";
    QTest::newRow("stop: unknown run") << "ended" << QStringList{"stop", "7"} << "no run with id 7";
    QTest::newRow("stop: ended run") << "ended" << QStringList{"stop", "latest"} << "run 1 is not running (finished";
    QTest::newRow("unknown run folder") << "ended" << QStringList{"follow", "/no/such/run"}
                                        << "has the folder /no/such/run";
    QTest::newRow("submit: not SLURM") << "empty" << QStringList{"submit"}
                                       << "hosts.launcher: ptw submit runs a SLURM profile as a job";
  }
  void badInputChangesNothing() {
    QFETCH(QString, setup);
    QFETCH(QStringList, args);
    QFETCH(QString, said);
    QTemporaryDir runs;
    if (setup != "empty") {
      RunStore store(runs.path().toStdString());
      if (setup != "no-runs") {
        const auto id = store.beginRun(runs.filePath("a-run").toStdString(), defaultProfile());
        store.endRun(id, "finished", "", std::nan(""), std::nan(""), 1);
      }
    }
    if (setup == "other-version") {
      sqlite3* db = nullptr;
      QCOMPARE(sqlite3_open(runs.filePath("runs.sqlite").toUtf8().constData(), &db), SQLITE_OK);
      QCOMPARE(sqlite3_exec(db, "UPDATE runs SET ptw_version = '0.0.1-other'", nullptr, nullptr, nullptr), SQLITE_OK);
      sqlite3_close(db);
    }
    const auto before = contents(runs.path());
    const Result r = runPtw(args + QStringList{"--runs-dir", runs.path()});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(said), qPrintable(r.err));
    QCOMPARE(r.err.trimmed().count('\n'), 0);
    QVERIFY(r.out.isEmpty());
    QVERIFY(contents(runs.path()) == before);
  }
};

// A HOST:DIR whose host ssh cannot reach (a name that resolves nowhere): one line naming
// the host, exit 2, for follow, stop and runs alike; nothing is retried before a first stream.
void TestFollow::unreachableHostIsSaid_data() {
  QTest::addColumn<QStringList>("args");
  const QString remote = "ptw-no-such-host.invalid:/tmp/runs";
  QTest::newRow("follow") << QStringList{"follow", "latest", "--runs-dir", remote};
  QTest::newRow("stop") << QStringList{"stop", "latest", "--runs-dir", remote};
  QTest::newRow("runs") << QStringList{"runs", "--runs-dir", remote};
}
void TestFollow::unreachableHostIsSaid() {
  QFETCH(QStringList, args);
  if (QStandardPaths::findExecutable("ssh").isEmpty()) QSKIP("needs OpenSSH's ssh (openssh-client)");
  const Result r = runPtw(args);
  QCOMPARE(r.code, 2);
  QVERIFY2(r.err.startsWith("ptw: ptw-no-such-host.invalid: ssh cannot reach it"), qPrintable(r.err));
  QCOMPARE(r.err.trimmed().count('\n'), 0);
  QVERIFY(r.out.isEmpty());
}

QTEST_GUILESS_MAIN(TestFollow)
#include "test_follow.moc"
