// SPDX-License-Identifier: GPL-3.0-or-later
// Following and stopping a run over ssh (Note [Reattaching] in launch/follow_source.h): the
// run goes on in this machine's namespace, its runs directory seen by a "host" that is a
// network namespace with an sshd of its own (tests/multihost/netns_hosts.sh, which shares the
// filesystem as a cluster's shared storage does), and `ptw follow --runs-dir HOST:DIR` runs in
// a third namespace. A cut link (down 5 s, then up) is followed through: the follower attaches
// again, and what it printed is the store's records, each once. Needs root (CAP_NET_ADMIN),
// iproute2 and OpenSSH; without them every case is skipped, saying why.
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <unistd.h>

#include <map>
#include <set>
#include <utility>

#include "common/profile.h"
#include "launch/run_store.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

const QString kH1 = QStringLiteral("10.77.1.2");
constexpr int kRanks = 2;
constexpr int kGateStep = 10;  // the script waits here for the gate file

// A step a line with a named scalar; waits at step 10 for the gate, so that what the test does
// mid-run happens mid-run however loaded the machine; a stop ends it at the next step.
const char* kScript = R"(import json, os, sys, time, signal
RANK = int(os.environ["RANK"])
ch = open(os.environ["PTW_METRICS"], "w", buffering=1)
gate, steps = sys.argv[1], int(sys.argv[2])
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
print("hello from rank %d" % RANK, flush=True)
for step in range(steps):
    if step == 10:
        end = time.time() + 60
        while not os.path.exists(gate) and not stop and time.time() < end:
            time.sleep(0.02)
    if stop:
        break
    ch.write(json.dumps({"step": step, "loss": 1.0 / (step + 1), "samples": 8, "grad_norm": 0.5 * step}) + "\n")
    with open("reported.%d" % RANK, "w") as f:
        f.write(str(step + 1))
    time.sleep(0.02)
print("bye from rank %d" % RANK, flush=True)
)";

QString script() { return test::sourcePath(QStringLiteral("tests/multihost/netns_hosts.sh")); }

std::vector<QJsonObject> ofKind(const QByteArray& out, const char* kind) {
  std::vector<QJsonObject> found;
  for (const QByteArray& l : out.split('\n')) {
    const QJsonObject o = QJsonDocument::fromJson(l).object();
    if (o["kind"].toString() == kind) found.push_back(o);
  }
  return found;
}

}  // namespace

class TestAttach : public QObject {
  Q_OBJECT

  struct Hosts {
    QString tag, dir;
    bool up = false;
    void down() {
      if (!up) return;
      QProcess::execute(QStringLiteral("bash"), {script(), QStringLiteral("down"), tag, dir});
      up = false;
    }
    ~Hosts() { down(); }
  };

  QTemporaryDir m_dir{QDir::tempPath() + "/ptw-attach-XXXXXX"};
  Hosts m_hosts;
  QString m_skip;
  int m_runs = 0;

  QString ctl() const { return QStringLiteral("ptwt-ctl-%1").arg(m_hosts.tag); }

  // A profile holding only the ssh options that reach the hosts.
  QString sshProfile() const { return m_hosts.dir + "/ssh.json"; }

  // A 2-rank script run in this namespace, its runs directory in the shared folder.
  struct Run {
    QString work, runs;
    QProcess ptw;
    QString gate() const { return work + "/gate"; }
    bool allAtGate() const {
      for (int r = 0; r < kRanks; ++r) {
        QFile f(QStringLiteral("%1/reported.%2").arg(work).arg(r));
        if (!f.open(QIODevice::ReadOnly) || f.readAll().trimmed().toInt() < kGateStep) return false;
      }
      return true;
    }
    void openGate() const {
      QFile g(gate());
      g.open(QIODevice::WriteOnly);
    }
    int finish() {
      // Finished already when an event loop (QTRY) took its end.
      if (ptw.state() != QProcess::NotRunning && !ptw.waitForFinished(90000)) return -1;
      return ptw.exitStatus() == QProcess::NormalExit ? ptw.exitCode() : -1;
    }
    ~Run() {
      if (ptw.state() == QProcess::NotRunning) return;
      ptw.kill();
      ptw.waitForFinished(10000);
    }
  };

  void startRun(Run& run, int steps) {
    const QString name = QStringLiteral("run%1").arg(++m_runs);
    run.work = m_hosts.dir + "/" + name;
    run.runs = m_hosts.dir + "/" + name + "-runs";
    QDir().mkpath(run.work);
    QFile f(run.work + "/script.py");
    f.open(QIODevice::WriteOnly);
    f.write(kScript);
    f.close();
    Profile p = defaultProfile();
    p.name = "attach";
    p.strategy.kind = "command";
    p.strategy.ranks = kRanks;
    p.command.program = "/usr/bin/python3";  // never the first python3 on PATH
    p.command.args = {"script.py", run.gate().toStdString(), std::to_string(steps)};
    p.command.cwd = run.work.toStdString();
    p.command.stopGraceS = 5;
    p.hyper.maxSteps = 0;
    saveProfile(p, (run.work + "/profile.json").toStdString());
    run.ptw.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", run.runs, "-p", run.work + "/profile.json"});
  }

  // `ptw ARGS` in the control namespace (bounded: 60 s).
  QProcess* ptwInCtl(const QStringList& args) {
    auto* p = new QProcess(this);
    p->start(QStringLiteral("ip"), QStringList{"netns", "exec", ctl(), test::binDir() + "/ptw"} + args);
    return p;
  }
  static int finish(QProcess* p, int ms = 60000) {
    if (p->state() != QProcess::NotRunning && !p->waitForFinished(ms)) {
      p->kill();
      p->waitForFinished(5000);
      return -1;
    }
    return p->exitStatus() == QProcess::NormalExit ? p->exitCode() : -1;
  }

  // The run's step records as printed, (rank, step) → how many times; and the store's.
  static std::map<std::pair<int, qint64>, int> printedSteps(const QByteArray& out) {
    std::map<std::pair<int, qint64>, int> n;
    for (const auto& s : ofKind(out, "step")) ++n[{s["rank"].toInt(), s["step"].toInteger()}];
    return n;
  }
  static std::map<std::pair<int, qint64>, int> storedSteps(const QString& runs, std::int64_t& id) {
    RunStore store(runs.toStdString());
    id = store.runs().back().id;
    std::map<std::pair<int, qint64>, int> n;
    for (const auto& s : store.steps(id)) ++n[{s.rank, s.step}];
    return n;
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    QProcess check;
    check.setProcessChannelMode(QProcess::MergedChannels);
    check.start(QStringLiteral("bash"), {script(), QStringLiteral("check")});
    check.waitForFinished(20000);
    if (check.exitCode() != 0) {
      m_skip = "attach test not run: " + QString::fromUtf8(check.readAll()).trimmed();
      return;
    }
    // Only root gets here (check), and the hosts' sshd logs in as root: the folder is its own.
    m_hosts.tag = QStringLiteral("at%1").arg(::getpid());
    m_hosts.dir = m_dir.path();
    m_hosts.up = true;
    QProcess up;
    up.setProcessChannelMode(QProcess::MergedChannels);
    up.start(QStringLiteral("bash"), {script(), QStringLiteral("up"), m_hosts.tag, m_hosts.dir});
    if (!up.waitForFinished(60000) || up.exitCode() != 0) {
      m_skip = "attach test not run: the namespaces did not come up: " + QString::fromUtf8(up.readAll()).trimmed();
      m_hosts.down();
      return;
    }
    Profile p = defaultProfile();
    p.hosts.sshConfig = (m_hosts.dir + "/ssh_config").toStdString();
    p.hosts.aliveIntervalS = 1;
    saveProfile(p, sshProfile().toStdString());
  }
  void cleanupTestCase() { m_hosts.down(); }
  void init() {
    if (!m_skip.isEmpty()) QSKIP(qPrintable(m_skip));
  }

  // Over ssh from another namespace, with the link cut for 5 s mid-run: the follower says it is
  // detached, attaches again, and has printed every stored step record once, no gap, and each
  // log line once.
  void aCutConnectionLosesNothing() {
    Run run;
    startRun(run, 40);
    QTRY_VERIFY_WITH_TIMEOUT(run.allAtGate(), 30000);
    std::int64_t id = 0;
    storedSteps(run.runs, id);
    QProcess* follower = ptwInCtl(
        {"follow", QString::number(id), "--runs-dir", kH1 + ":" + run.runs, "-p", sshProfile(), "--format", "jsonl"});
    QByteArray out;
    QTRY_VERIFY_WITH_TIMEOUT((out += follower->readAllStandardOutput(), printedSteps(out).size() >= kRanks * kGateStep),
                             30000);
    QCOMPARE(QProcess::execute("ip", {"-n", ctl(), "link", "set", "m1", "down"}), 0);
    QElapsedTimer cut;
    cut.start();
    run.openGate();  // the run goes on while the follower is cut off
    QByteArray err;
    QTRY_VERIFY_WITH_TIMEOUT((err += follower->readAllStandardError()).contains("detached"), 20000);
    while (cut.elapsed() < 5000) QTest::qWait(100);
    QCOMPARE(QProcess::execute("ip", {"-n", ctl(), "link", "set", "m1", "up"}), 0);
    QCOMPARE(run.finish(), 0);
    QCOMPARE(finish(follower, 90000), 0);
    out += follower->readAllStandardOutput();

    const auto stored = storedSteps(run.runs, id);
    QCOMPARE(static_cast<int>(stored.size()), kRanks * 40);
    QVERIFY(printedSteps(out) == stored);  // each once: no duplicate, no gap
    std::map<std::pair<int, QString>, int> logs;
    for (const auto& l : ofKind(out, "log")) ++logs[{l["rank"].toInt(), l["line"].toString()}];
    for (int r = 0; r < kRanks; ++r) {
      QCOMPARE(logs[std::make_pair(r, QString("hello from rank %1").arg(r))], 1);
      QCOMPARE(logs[std::make_pair(r, QString("bye from rank %1").arg(r))], 1);
    }
    std::map<std::pair<int, qint64>, int> scalars;
    for (const auto& s : ofKind(out, "scalar")) ++scalars[{s["rank"].toInt(), s["step"].toInteger()}];
    QCOMPARE(static_cast<int>(scalars.size()), kRanks * 40);
    for (const auto& [key, n] : scalars) QCOMPARE(n, 1);
    QCOMPARE(ofKind(out, "end").size(), std::size_t{1});
    QCOMPARE(ofKind(out, "end").front()["status"].toString(), QString("finished"));

    // After the end, over ssh from the store alone: --from-step leaves out the steps below it.
    QProcess* late = ptwInCtl({"follow", QString::number(id), "--runs-dir", kH1 + ":" + run.runs, "-p", sshProfile(),
                               "--format", "jsonl", "--from-step", "25"});
    QCOMPARE(finish(late), 0);
    const auto lateSteps = printedSteps(late->readAllStandardOutput());
    QCOMPARE(static_cast<int>(lateSteps.size()), kRanks * (40 - 25));
    QVERIFY(lateSteps.begin()->first.second == 25);
  }

  // `ptw stop --runs-dir HOST:DIR` from another namespace: the host's ptw asks the supervisor,
  // and the run stops as on Ctrl-C, exit 5.
  void stopOverSsh() {
    Run run;
    startRun(run, 1000);
    QTRY_VERIFY_WITH_TIMEOUT(run.allAtGate(), 30000);  // the gate stays shut: only the stop ends it
    QProcess* stop = ptwInCtl({"stop", "latest", "--runs-dir", kH1 + ":" + run.runs, "-p", sshProfile()});
    QCOMPARE(finish(stop), 0);
    QVERIFY2(stop->readAllStandardOutput().contains("asked run"), "ptw stop said nothing of the run");
    QCOMPARE(run.finish(), 5);
    RunStore store(run.runs.toStdString());
    QCOMPARE(QString::fromStdString(store.runs().back().status), QString("stopped"));
  }

  // Bad input over ssh: one line naming the host or folder, exit 2, nothing written.
  void badInputOverSsh_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("said");
    QTest::newRow("unreachable host") << QStringList{"follow", "latest", "--runs-dir", "10.77.9.9:/tmp"}
                                      << "10.77.9.9: ssh cannot reach it";
    QTest::newRow("no runs there") << QStringList{"follow", "latest", "--runs-dir", kH1 + ":" + "EMPTY"}
                                   << "holds no runs";
    QTest::newRow("stop: unreachable") << QStringList{"stop", "latest", "--runs-dir", "10.77.9.9:/tmp"}
                                       << "10.77.9.9: ssh cannot reach it";
    QTest::newRow("stop: no runs there") << QStringList{"stop", "latest", "--runs-dir", kH1 + ":" + "EMPTY"}
                                         << "holds no runs";
  }
  void badInputOverSsh() {
    QFETCH(QStringList, args);
    QFETCH(QString, said);
    const QString empty = m_hosts.dir + "/empty";
    QDir().mkpath(empty);
    args.replaceInStrings("EMPTY", empty);
    QProcess* p = ptwInCtl(args + QStringList{"-p", sshProfile()});
    QCOMPARE(finish(p), 2);
    const QString err = QString::fromUtf8(p->readAllStandardError());
    QVERIFY2(err.contains(said), qPrintable(err));
    QCOMPARE(err.trimmed().count('\n'), 0);
    QVERIFY(p->readAllStandardOutput().isEmpty());
    QVERIFY(QDir(empty).isEmpty());
  }
};

QTEST_GUILESS_MAIN(TestAttach)
#include "test_attach.moc"
