// SPDX-License-Identifier: GPL-3.0-or-later
// DDP and scripts through ptw's slurm launcher (docs/multihost.md, Note [SLURM job]) on a
// two-node SLURM cluster that the test starts on this machine (tests/slurm/slurm_node.sh):
// munged, slurmctld and a slurmd for each node with their own key, configuration and state in a temporary folder, over
// 127.0.0.1 only, in a PID namespace that ends with the test. Needs root and Debian's slurmctld, slurmd, slurm-client
// and munge; without them every case is skipped, saying why (CTest reports it skipped, not passed).
#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <unistd.h>

#include <functional>
#include <map>

#include <torch/torch.h>

#include "common/version.h"
#include "engine_support.h"
#include "launch/run_store.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;
using ptw::test::maxAbsDiff;
using ptw::test::referenceParameters;

namespace {

const QString kNode = QStringLiteral("ptwnode1");   // the cluster's first node (slurm_node.sh)
const QString kNode2 = QStringLiteral("ptwnode2");  // its second, which cannot see DIR/hidden

QString script() { return test::sourcePath(QStringLiteral("tests/slurm/slurm_node.sh")); }

// The loss of each step of each rank that the run in `runDir` stored in `runsDir`.
std::map<int, std::map<std::int64_t, double>> storedLosses(const QString& runsDir, const QString& runDir) {
  RunStore store(runsDir.toStdString());
  std::map<int, std::map<std::int64_t, double>> out;
  for (const auto& run : store.runs())
    if (QFileInfo(QString::fromStdString(run.dir)).canonicalFilePath() == QFileInfo(runDir).canonicalFilePath())
      for (const auto& s : store.steps(run.id)) out[s.rank][s.step] = s.loss;
  return out;
}

}  // namespace

class TestSlurm : public QObject {
  Q_OBJECT

  // Stops the cluster however the test ends (a failed QVERIFY returns early; the destructor
  // runs at exit too; slurm_node.sh's guard, if the test is killed outright).
  struct Cluster {
    QString dir;
    bool up = false;
    void down() {
      if (!up) return;
      QProcess::execute(QStringLiteral("bash"), {script(), QStringLiteral("down"), dir});
      up = false;
    }
    ~Cluster() { down(); }
  };

  QTemporaryDir m_dir{QDir::tempPath() + "/ptw-slurm-XXXXXX"};
  Cluster m_cluster;
  QString m_skip;
  QString m_runsDir;  ///< the next run's runs directory, when not DIR/runs-NAME

  // ptw's environment: the test cluster's configuration, and no allocation of the test's own.
  QProcessEnvironment environment() const {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const auto& key : env.keys())
      if (key.startsWith(QLatin1String("SLURM_")) || key.startsWith(QLatin1String("SBATCH_")) ||
          key.startsWith(QLatin1String("SALLOC_")) || key.startsWith(QLatin1String("SRUN_")))
        env.remove(key);
    env.insert(QStringLiteral("SLURM_CONF"), m_cluster.dir + "/slurm.conf");
    env.insert(QStringLiteral("PATH"), m_cluster.dir + "/bin:" + env.value(QStringLiteral("PATH")));
    return env;
  }

  // Every srun ptw runs, first on its PATH: SLURM's own, each command line written down.
  bool writeSrunRecorder() const {
    const QString srun = QStandardPaths::findExecutable(QStringLiteral("srun"));
    QDir().mkpath(m_cluster.dir + "/bin");
    QFile f(m_cluster.dir + "/bin/srun");
    if (srun.isEmpty() || !f.open(QIODevice::WriteOnly)) return false;
    f.write("#!/bin/sh\nprintf '%s\\n' \"$*\" >>'" + srunLog().toUtf8() + "'\nexec '" + srun.toUtf8() + "' \"$@\"\n");
    f.close();
    return f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  }
  QString srunLog() const { return m_cluster.dir + "/srun-calls.log"; }
  // The sruns started since the log was last removed that ran host agents.
  QStringList agentSteps() const {
    QFile f(srunLog());
    QStringList steps;
    if (f.open(QIODevice::ReadOnly))
      for (const QString& l : QString::fromUtf8(f.readAll()).split('\n'))
        if (l.endsWith(QLatin1String(" --agent"))) steps << l;
    return steps;
  }

  // While ptw runs: submits the job.sbatch it writes under `runs` (bounded: the script is there
  // within 30 s, or the run is judged as it is); `submitted` takes what sbatch said.
  std::function<void(QProcess&)> submitOnceWritten(const QString& runs, QString& submitted) const {
    return [this, runs, &submitted](QProcess& ptw) {
      QElapsedTimer t;
      t.start();
      QString file;
      while (file.isEmpty() && t.elapsed() < 30000 && ptw.state() == QProcess::Running) {
        QDirIterator it(runs, {QStringLiteral("job.sbatch")}, QDir::Files, QDirIterator::Subdirectories);
        if (it.hasNext()) file = it.next();
        ptw.waitForFinished(100);
      }
      if (file.isEmpty()) return;
      QProcess sbatch;
      sbatch.setProcessEnvironment(environment());
      sbatch.setProcessChannelMode(QProcess::MergedChannels);
      sbatch.start(QStringLiteral("sbatch"), {file});
      sbatch.waitForFinished(20000);
      submitted = QString::fromUtf8(sbatch.readAll()).trimmed();
    };
  }

  // resources/examples/ddp_train.py (DDP over Gloo, reporting through ptw_metrics) as a
  // command of 2 ranks through the slurm launcher, meeting on loopback.
  Profile scriptProfile(std::int64_t steps, int ranks = 2) const {
    Profile p = test::ddpScriptProfile("script-slurm", ranks, steps);
    p.hosts = slurmProfile(steps).hosts;
    return p;
  }

  // The losses `run` stored, rank by rank and step by step, equal those of the same profile
  // run on this machine by the local launcher; the ranks ran on the node, which the profile
  // they were given names (the host column's source).
  void checkScriptEqualsOneHost(const test::HeadlessRun& run, const Profile& p, const QString& name,
                                const std::vector<std::string>& nodes = {kNode.toStdString(), kNode.toStdString()},
                                const QString& nodesLine = kNode + " (ranks 0-1)") {
    QVERIFY2(run.exitCode == 0, qPrintable(run.output));
    QCOMPARE(run.summary.value("status").toString(), QStringLiteral("finished"));
    Profile local = p;
    local.hosts = HostsSpec{};
    const test::HeadlessRun one = runPtw(local, name + "-one", {});
    QVERIFY2(one.exitCode == 0, qPrintable(one.output));
    const auto onSlurm = storedLosses(m_cluster.dir + "/runs-" + name, run.summary.value("run_dir").toString());
    const auto oneHost =
        storedLosses(m_cluster.dir + "/runs-" + name + "-one", one.summary.value("run_dir").toString());
    QCOMPARE(onSlurm.size(), nodes.size());
    for (int r = 0; r < static_cast<int>(nodes.size()); ++r) {
      QCOMPARE(onSlurm.at(r).size(), static_cast<std::size_t>(p.hyper.maxSteps));
      QCOMPARE(onSlurm.at(r), oneHost.at(r));
    }
    // The nodes the ranks were given: the job's, or the run's own hosts.hosts where it names them.
    const QString runDir = run.summary.value("run_dir").toString();
    const QString nodesFile = runDir + "/profile.nodes.json";
    const Profile given = loadProfile((QFile::exists(nodesFile) ? nodesFile : runDir + "/profile.json").toStdString());
    QCOMPARE(rankHosts(given), nodes);
    // ...and the observers learn them where the profile did not name them: the window's host
    // column, here headless's line.
    if (p.hosts.hosts.empty())
      QVERIFY2(run.output.contains("ptw: the ranks' nodes: " + nodesLine + "\n"), qPrintable(run.output));
    checkNoProcessLeft();
  }

  // A 2-rank DDP profile over Gloo through the slurm launcher; the ranks meet on loopback.
  Profile slurmProfile(std::int64_t steps) const {
    Profile p = test::mlpProfile(8, {16, 16}, 3, 96);
    p.strategy.ranks = 2;
    p.strategy.backend = "gloo";
    p.hyper.maxSteps = steps;
    p.run.timeoutS = 20;
    p.hosts.launcher = "slurm";
    p.hosts.address = "127.0.0.1";
    return p;
  }

  using Run = test::HeadlessRun;

  // `program args...`, then ptw --headless; `during` runs while it does (bounded: 120 s in all).
  Run runPtw(const Profile& p, const QString& name, const QStringList& before, const QStringList& extra = {},
             const std::function<void(QProcess&)>& during = {}) {
    const QString profile = m_cluster.dir + "/" + name + ".json";
    saveProfile(p, profile.toStdString());
    const QString summary = m_cluster.dir + "/" + name + ".summary.json";
    QProcess ptw;
    ptw.setProcessEnvironment(environment());
    ptw.setProcessChannelMode(QProcess::MergedChannels);
    QStringList args = before;
    args << test::binDir() + "/ptw" << QStringLiteral("--headless") << QStringLiteral("-p") << profile
         << QStringLiteral("--runs-dir") << (m_runsDir.isEmpty() ? m_cluster.dir + "/runs-" + name : m_runsDir)
         << QStringLiteral("--summary") << summary << extra;
    const QString program = args.takeFirst();
    ptw.start(program, args);
    if (!ptw.waitForStarted(10000)) return {};
    if (during) during(ptw);
    return test::finishHeadless(ptw, summary, 120000);
  }

  // salloc's command line: the allocation ptw then runs in.
  QStringList salloc(const QString& name) const {
    return {QStringLiteral("salloc"), QStringLiteral("--nodes=1"), QStringLiteral("--ntasks=2"),
            QStringLiteral("--job-name=test-") + name, QStringLiteral("--quiet")};
  }

  // An allocation of `nodes` nodes, `perNode` tasks on each.
  QStringList sallocNodes(const QString& name, int nodes, int perNode) const {
    return {QStringLiteral("salloc"), QStringLiteral("--nodes=%1").arg(nodes),
            QStringLiteral("--ntasks-per-node=%1").arg(perNode), QStringLiteral("--job-name=test-") + name,
            QStringLiteral("--quiet")};
  }
  // salloc's command line for an allocation of both nodes, one rank on each.
  QStringList sallocBothNodes(const QString& name) const { return sallocNodes(name, 2, 1); }

  // The run folders under `runs` (not the store's own files).
  static int runFolders(const QString& runs) {
    return static_cast<int>(QDir(runs).entryList({QStringLiteral("????????T??????Z-*")}, QDir::Dirs).size());
  }

  // Both ranks end with the parameters one process trains on the same global batches, and
  // each rank's records came back through its srun.
  void checkEqualsOneProcess(const Run& run, const Profile& p) {
    QVERIFY2(run.exitCode == 0, qPrintable(run.output));
    QCOMPARE(run.summary.value("status").toString(), QStringLiteral("finished"));
    const QJsonArray ranks = run.summary.value("ranks").toArray();
    QCOMPARE(ranks.size(), 2);
    for (const auto& r : ranks) QCOMPARE(r.toObject().value("steps").toInt(), static_cast<int>(p.hyper.maxSteps));
    const QString runDir = run.summary.value("run_dir").toString();
    std::vector<std::vector<torch::Tensor>> params(2);
    for (int r = 0; r < 2; ++r)
      torch::load(params[static_cast<std::size_t>(r)],
                  QStringLiteral("%1/rank%2.final.pt").arg(runDir).arg(r).toStdString());
    QCOMPARE(maxAbsDiff(params[0], params[1]), 0.0);
    const double diff = maxAbsDiff(params[0], referenceParameters(p, 2));
    QVERIFY2(diff < 1e-5, qPrintable(QStringLiteral("max |2 SLURM ranks - one process| = %1").arg(diff)));
  }

  // No ptw-worker (agent or rank), python3 or srun of this test's runs left within `seconds`:
  // SLURM passes ptw's environment on to what it starts, this cluster's SLURM_CONF included.
  bool noProcessLeft(int seconds, QString& left) const {
    const QByteArray conf = "SLURM_CONF=" + m_cluster.dir.toUtf8() + "/slurm.conf";
    const auto ours = [&] {
      left.clear();
      for (const QString& entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs)) {
        bool ok = false;
        const int pid = entry.toInt(&ok);
        if (!ok || pid == ::getpid()) continue;
        QFile comm(QStringLiteral("/proc/%1/comm").arg(pid));
        QFile environ(QStringLiteral("/proc/%1/environ").arg(pid));
        if (!comm.open(QIODevice::ReadOnly) || !environ.open(QIODevice::ReadOnly)) continue;
        const QByteArray name = comm.readAll().trimmed();
        if ((name == "ptw-worker" || name == "python3" || name == "srun") &&
            environ.readAll().split('\0').contains(conf) && test::processAlive(pid))
          left += QStringLiteral(" %1 (%2)").arg(pid).arg(QString::fromUtf8(name));
      }
      return !left.isEmpty();
    };
    QElapsedTimer t;
    t.start();
    while (ours()) {
      if (t.elapsed() > seconds * 1000) return false;
      QThread::msleep(100);
    }
    return true;
  }
  // The host agent of this test cluster's `node`, or -1.
  pid_t agentOn(const QString& node) const {
    const QByteArray conf = "SLURM_CONF=" + m_cluster.dir.toUtf8() + "/slurm.conf";
    for (const QString& entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs)) {
      bool ok = false;
      const int pid = entry.toInt(&ok);
      QFile cmdline(QStringLiteral("/proc/%1/cmdline").arg(pid));
      QFile environ(QStringLiteral("/proc/%1/environ").arg(pid));
      if (!ok || !cmdline.open(QIODevice::ReadOnly) || !environ.open(QIODevice::ReadOnly)) continue;
      const QList<QByteArray> args = cmdline.readAll().split('\0');
      const QList<QByteArray> env = environ.readAll().split('\0');
      // An agent's command line is "ptw-worker --agent" (the check before the run adds --version).
      if (args.size() == 3 && args[0].endsWith("ptw-worker") && args[1] == "--agent" && env.contains(conf) &&
          env.contains("SLURMD_NODENAME=" + node.toUtf8()))
        return pid;
    }
    return -1;
  }
  void checkNoProcessLeft() {
    QString left;
    QVERIFY2(noProcessLeft(10, left), qPrintable("left running:" + left));
  }

  // The test cluster's jobs that have not ended.
  QString liveJobs() const {
    QProcess squeue;
    squeue.setProcessEnvironment(environment());
    squeue.start(QStringLiteral("squeue"), {QStringLiteral("-h"), QStringLiteral("-o"), QStringLiteral("%i %j %T")});
    squeue.waitForFinished(10000);
    return QString::fromUtf8(squeue.readAllStandardOutput()).trimmed();
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    QProcess check;
    check.setProcessChannelMode(QProcess::MergedChannels);
    check.start(QStringLiteral("bash"), {script(), QStringLiteral("check")});
    check.waitForFinished(20000);
    if (check.exitCode() != 0) {
      m_skip = "SLURM test not run: " + QString::fromUtf8(check.readAll()).trimmed();
      return;
    }
    m_cluster.dir = m_dir.path();
    QVERIFY(writeSrunRecorder());
    m_cluster.up = true;  // from here on, whatever was started is stopped
    QProcess up;
    up.setProcessChannelMode(QProcess::MergedChannels);
    up.start(QStringLiteral("bash"), {script(), QStringLiteral("up"), QString::number(::getpid()), m_cluster.dir});
    if (!up.waitForFinished(60000) || up.exitCode() != 0) {
      // Daemons that cannot run here (a container without what slurmd needs) skip, saying why.
      m_skip = "SLURM test not run: the test cluster did not start: " + QString::fromUtf8(up.readAll()).trimmed();
      m_cluster.down();
    }
  }
  void cleanupTestCase() { m_cluster.down(); }
  void init() {
    if (!m_skip.isEmpty()) QSKIP(qPrintable(m_skip));
  }

  // Inside an allocation (salloc runs ptw): each rank a step of it, on the allocation's node.
  void insideAnAllocationEqualsOneProcess() {
    const Profile p = slurmProfile(20);
    const Run run = runPtw(p, QStringLiteral("inside"), salloc(QStringLiteral("inside")));
    checkEqualsOneProcess(run, p);
    QVERIFY2(run.output.contains("as one SLURM job step through srun, one agent a node"), qPrintable(run.output));
    checkNoProcessLeft();
  }

  // Outside an allocation: ptw writes RUN/job.sbatch and waits; the test submits it; ptw
  // starts the ranks in the job and cancels it at the end.
  void outsideAnAllocationAttachesToTheJob() {
    const Profile p = slurmProfile(20);
    const QString runs = m_cluster.dir + "/runs-outside";
    QString submitted;
    const Run run = runPtw(p, QStringLiteral("outside"), {}, {}, submitOnceWritten(runs, submitted));
    QVERIFY2(submitted.startsWith("Submitted batch job"), qPrintable(submitted + "\n" + run.output));
    QVERIFY2(run.output.contains("submit it with: sbatch " + runs), qPrintable(run.output));
    checkEqualsOneProcess(run, p);
    checkNoProcessLeft();
    // Released: the job is gone within 10 s (the release file, scancel).
    QElapsedTimer t;
    t.start();
    while (liveJobs().contains("ptw-") && t.elapsed() < 10000) QThread::msleep(200);
    QVERIFY2(!liveJobs().contains("ptw-"), qPrintable(liveJobs()));
  }

  // ptw submit (Note [Submitted runs]): it prints the job and the run folder and is done; the
  // job runs the run inside its allocation, and the run, followed by its folder, equals one
  // process.
  void submitRunsTheRunInsideTheJob() {
    const Profile p = slurmProfile(20);
    const QString profile = m_cluster.dir + "/submit.json";
    saveProfile(p, profile.toStdString());
    const QString runs = m_cluster.dir + "/runs-submit";
    QProcess submit;
    submit.setProcessEnvironment(environment());
    submit.start(test::binDir() + "/ptw", {"submit", "-p", profile, "--runs-dir", runs});
    QVERIFY(submit.waitForFinished(60000));
    const QString said = QString::fromUtf8(submit.readAllStandardOutput());
    QVERIFY2(submit.exitCode() == 0, qPrintable(said + submit.readAllStandardError()));
    const QRegularExpressionMatch m =
        QRegularExpression(QStringLiteral("^job (\\d+)\nrun folder (\\S+)\n$")).match(said);
    QVERIFY2(m.hasMatch(), qPrintable(said));
    const QString folder = m.captured(2);
    QVERIFY(QFile::exists(folder + "/submit.sbatch"));
    QVERIFY(QFile::exists(folder + "/profile.json"));
    // Followed by its folder: refused (exit 2) until the job has started and recorded the run.
    QByteArray out;
    int code = -1;
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 90000) {
      QProcess follow;
      follow.setProcessEnvironment(environment());
      follow.start(test::binDir() + "/ptw", {"follow", folder, "--runs-dir", runs, "--format", "jsonl"});
      if (!follow.waitForFinished(100000)) break;
      code = follow.exitCode();
      out = follow.readAllStandardOutput();
      if (code != 2) break;
      QVERIFY2(follow.readAllStandardError().contains("once its job starts"), "follow refused for another reason");
      QThread::msleep(300);
    }
    QVERIFY2(code == 0, out.constData());
    QVERIFY(out.contains("\"kind\":\"end\",\"run\":1,\"status\":\"finished\""));
    QCOMPARE(static_cast<int>(out.count("\"kind\":\"step\"")), 2 * static_cast<int>(p.hyper.maxSteps));
    std::vector<torch::Tensor> params;
    torch::load(params, (folder + "/rank0.final.pt").toStdString());
    const double diff = maxAbsDiff(params, referenceParameters(p, 2));
    QVERIFY2(diff < 1e-5, qPrintable(QStringLiteral("max |submitted run - one process| = %1").arg(diff)));
    QFile jobOut(folder + "/slurm-" + m.captured(1) + ".out");  // the job's ptw, inside the allocation
    QVERIFY(jobOut.open(QIODevice::ReadOnly));
    const QByteArray jobSaid = jobOut.readAll();
    QVERIFY2(
        jobSaid.contains("as one SLURM job step through srun") && jobSaid.contains("run folder " + folder.toUtf8()),
        jobSaid.constData());
  }

  // A PyTorch DDP script inside an allocation: each rank started by the node's agent with
  // torchrun's variables, storing what the same profile stores on one host.
  void aScriptInsideAnAllocationStoresWhatItDoesOnOneHost() {
    const Profile p = scriptProfile(10);
    const Run run = runPtw(p, QStringLiteral("script-inside"), salloc(QStringLiteral("script-inside")));
    checkScriptEqualsOneHost(run, p, QStringLiteral("script-inside"));
  }

  // The same script through the job ptw writes (job.sbatch) for both nodes, submitted while
  // ptw waits: a rank on each node.
  void aScriptThroughTheJobItWritesStoresWhatItDoesOnOneHost() {
    Profile p = scriptProfile(10);
    p.hosts.hosts = {kNode.toStdString() + ":1", kNode2.toStdString() + ":1"};
    QString submitted;
    const Run run = runPtw(p, QStringLiteral("script-outside"), {}, {},
                           submitOnceWritten(m_cluster.dir + "/runs-script-outside", submitted));
    QVERIFY2(submitted.startsWith("Submitted batch job"), qPrintable(submitted + "\n" + run.output));
    checkScriptEqualsOneHost(run, p, QStringLiteral("script-outside"), {kNode.toStdString(), kNode2.toStdString()});
  }

  // The script on two nodes, two ranks on each (Note [One step for all nodes]): the agents of
  // both nodes are one srun step, and the run stores what it stores on one host.
  void aScriptOnTwoNodesIsOneStepAndStoresWhatItDoesOnOneHost() {
    const Profile p = scriptProfile(8, 4);
    QFile::remove(srunLog());
    const Run run = runPtw(p, QStringLiteral("script-nodes"), sallocNodes(QStringLiteral("script-nodes"), 2, 2));
    const QStringList steps = agentSteps();
    QVERIFY2(steps.size() == 1, qPrintable(steps.join('\n') + "\n" + run.output));
    QVERIFY2(steps.front().contains("--nodes=2 --ntasks=2 --ntasks-per-node=1 --nodelist=ptwnode1,ptwnode2"),
             qPrintable(steps.front()));
    checkScriptEqualsOneHost(run, p, QStringLiteral("script-nodes"), {"ptwnode1", "ptwnode1", "ptwnode2", "ptwnode2"},
                             QStringLiteral("ptwnode1 (ranks 0-1), ptwnode2 (ranks 2-3)"));
  }

  // Inside an allocation of both nodes, each rank on its own: the ranks meet across the nodes
  // (the check of every node passes) and end as one process does.
  void onBothNodesEqualsOneProcess() {
    const Profile p = slurmProfile(20);
    const Run run = runPtw(p, QStringLiteral("both"), sallocBothNodes(QStringLiteral("both")));
    checkEqualsOneProcess(run, p);
    QVERIFY2(run.output.contains("ptw: the ranks' nodes: " + kNode + " (rank 0), " + kNode2 + " (rank 1)\n"),
             qPrintable(run.output));
    checkNoProcessLeft();
  }

  // Note [SLURM node check]: a path the ranks need that the second node cannot see (under
  // DIR/hidden, an empty mount of its own there) is named with its field, the node and the
  // path before anything starts: exit 2, no run folder, no rank.
  void aPathTheSecondNodeCannotSeeIsNamedBeforeStart_data() {
    QTest::addColumn<QString>("field");
    QTest::newRow("command.cwd") << "command.cwd";
    QTest::newRow("command.program") << "command.program";
    QTest::newRow("runs directory") << "runs directory";
  }
  void aPathTheSecondNodeCannotSeeIsNamedBeforeStart() {
    QFETCH(QString, field);
    const QString hidden = m_cluster.dir + "/hidden/" + QString(field).replace(' ', '-');
    QVERIFY(QDir().mkpath(hidden + "/work") && QDir().mkpath(hidden + "/runs"));
    QFile program(hidden + "/work/train.py");  // here, it is there
    QVERIFY(program.open(QIODevice::WriteOnly));
    program.close();
    Profile p = scriptProfile(10);
    QString path = hidden + "/runs";
    if (field == "command.cwd") p.command.cwd = (path = hidden + "/work").toStdString();
    if (field == "command.program") p.command.program = (path = hidden + "/work/train.py").toStdString();
    const QString runs = field == "runs directory" ? path : m_cluster.dir + "/runs-unseen";
    m_runsDir = runs;
    const Run run = runPtw(p, QStringLiteral("unseen"), sallocBothNodes(QStringLiteral("unseen")));
    m_runsDir.clear();
    QCOMPARE(run.exitCode, 2);
    const QString expected = field + ": host " + kNode2 + " cannot see " + path +
                             "; every host needs it at the same path, on a filesystem they share (docs/multihost.md)";
    QVERIFY2(run.output.contains(expected), qPrintable(run.output));
    QCOMPARE(runFolders(runs), 0);
    checkNoProcessLeft();
  }

  // A node whose worker is another build is named with both versions before a rank starts:
  // inside an allocation before the run folder is made; in the job ptw waited for, once the
  // job runs (its nodes are known only then), and the job is released. hosts.worker is a
  // wrapper that is this build on the first node and another on the second.
  void aNodeWithAnotherBuildIsNamedBeforeStart_data() {
    QTest::addColumn<bool>("inside");
    QTest::newRow("inside an allocation") << true;
    QTest::newRow("in the job ptw waited for") << false;
  }
  void aNodeWithAnotherBuildIsNamedBeforeStart() {
    QFETCH(bool, inside);
    const QString wrapper = m_cluster.dir + "/other-worker";
    QFile w(wrapper);
    QVERIFY(w.open(QIODevice::WriteOnly));
    w.write("#!/bin/sh\n[ \"$SLURMD_NODENAME\" = " + kNode2.toUtf8() +
            " ] && { echo ptw-worker 0.0.0-other; exit 0; }\nexec " + test::binDir().toUtf8() + "/ptw-worker \"$@\"\n");
    w.close();
    w.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    Profile p = slurmProfile(20);
    p.hosts.worker = wrapper.toStdString();
    const QString name = inside ? QStringLiteral("other-inside") : QStringLiteral("other-outside");
    const QString runs = m_cluster.dir + "/runs-" + name;
    Run run;
    if (inside) {
      run = runPtw(p, name, sallocBothNodes(name));
    } else {
      p.hosts.hosts = {kNode.toStdString() + ":1", kNode2.toStdString() + ":1"};
      QString submitted;
      run = runPtw(p, name, {}, {}, submitOnceWritten(runs, submitted));
      QVERIFY2(submitted.startsWith("Submitted batch job"), qPrintable(submitted + "\n" + run.output));
    }
    QCOMPARE(run.exitCode, 2);
    const QString expected = "hosts.hosts: host " + kNode2 + " runs ptw-worker 0.0.0-other, this machine ptw-worker " +
                             QString(kVersion) + "; every host needs the same ptw build";
    QVERIFY2(run.output.contains(expected), qPrintable(run.output));
    QVERIFY2(!run.output.contains("ptw: the ranks' nodes"), qPrintable(run.output));
    if (inside) QCOMPARE(runFolders(runs), 0);
    checkNoProcessLeft();
    QElapsedTimer t;  // released: the job is gone within 10 s
    t.start();
    while (liveJobs().contains("ptw-") && t.elapsed() < 10000) QThread::msleep(200);
    QVERIFY2(!liveJobs().contains("ptw-"), qPrintable(liveJobs()));
  }

  // A node the allocation does not hold (hosts.hosts names it): srun cannot make the check's
  // step, and what it says is the message, before anything starts.
  void aNodeOutsideTheAllocationIsNamedBeforeStart() {
    Profile p = slurmProfile(20);
    p.hosts.hosts = {kNode.toStdString() + ":1", kNode2.toStdString() + ":1"};
    const Run run = runPtw(p, QStringLiteral("outside-nodes"),
                           {QStringLiteral("salloc"), QStringLiteral("--nodes=1"), "--nodelist=" + kNode,
                            QStringLiteral("--ntasks=2"), QStringLiteral("--quiet")});
    QCOMPARE(run.exitCode, 2);
    const QRegularExpression expected("hosts.hosts: srun could not check node\\(s\\) " + kNode + "," + kNode2 +
                                      " in SLURM job \\d+: srun: error: [^\n]+; check that the job holds them");
    QVERIFY2(expected.match(run.output).hasMatch(), qPrintable(run.output));
    QCOMPARE(runFolders(m_cluster.dir + "/runs-outside-nodes"), 0);
    checkNoProcessLeft();
  }

  // A rank killed by a signal on the second node is named with its node; the other is
  // stopped; nothing is left.
  void aRankKilledIsNamed() {
    const Run run = runPtw(slurmProfile(1000000), QStringLiteral("killed"), sallocNodes(QStringLiteral("killed"), 2, 1),
                           {QStringLiteral("--worker-arg=--fault=kill-at-step:1:5")});
    QVERIFY2(run.exitCode != 0, qPrintable(run.output));
    const QString message = run.summary.value("message").toString();
    QVERIFY2(message.startsWith("rank 1 on host ptwnode2 failed with signal 9"), qPrintable(message));
    checkNoProcessLeft();
  }

  // A rank lost on the second node, and run.max_restarts 1: the restart is a new step of
  // agents on both nodes, which resumes from the checkpoint and ends as one process does.
  void aRestartStartsTheAgentsAgain() {
    Profile p = slurmProfile(20);
    p.run.checkpointEvery = 5;
    p.run.maxRestarts = 1;
    QFile::remove(srunLog());
    const Run run = runPtw(p, QStringLiteral("restart"), sallocNodes(QStringLiteral("restart"), 2, 1),
                           {QStringLiteral("--worker-arg=--fault=kill-at-step:1:8")});
    QCOMPARE(run.summary.value("attempts").toInt(), 2);
    QCOMPARE(agentSteps().size(), 2);
    checkEqualsOneProcess(run, p);
    checkNoProcessLeft();
  }

  // ptw killed outright mid-run, in the job it wrote (which outlives it until its keep-alive
  // goes stale), while rank 1 hangs and rank 0 waits for it: its srun, told SIGTERM by the
  // kernel as ptw dies (RankCommand::endSignal), cancels the agents' step, and nothing of the
  // run is left on either node.
  void ptwKilledLeavesNothingOnTheNodes() {
    Profile p = slurmProfile(1000000);
    p.hosts.hosts = {kNode.toStdString() + ":1", kNode2.toStdString() + ":1"};
    const QString runs = m_cluster.dir + "/runs-ptw-killed";
    QString submitted;
    const auto submit = submitOnceWritten(runs, submitted);
    runPtw(p, QStringLiteral("ptw-killed"), {}, {QStringLiteral("--worker-arg=--fault=hang-at-step:1:3")},
           [&](QProcess& ptw) {
             submit(ptw);
             QElapsedTimer t;
             t.start();
             while (t.elapsed() < 60000 && ptw.state() == QProcess::Running && agentOn(kNode2) < 0)
               ptw.waitForFinished(200);
             ptw.waitForFinished(4000);  // the ranks started, and stopped at the hang
             ::kill(static_cast<pid_t>(ptw.processId()), SIGKILL);
           });
    QVERIFY2(submitted.startsWith("Submitted batch job"), qPrintable(submitted));
    QString left;
    const bool clean = noProcessLeft(10, left);
    for (const QString& job : liveJobs().split('\n', Qt::SkipEmptyParts)) {  // the job ptw can no longer release
      QProcess scancel;
      scancel.setProcessEnvironment(environment());
      scancel.start(QStringLiteral("scancel"), {job.section(' ', 0, 0)});
      scancel.waitForFinished(10000);
    }
    QVERIFY2(clean, qPrintable("left running:" + left));
  }

  // The agent of the second node killed outright (the node lost, as far as the run can
  // tell): srun's word on it ends that node's rank, which is named; the other is stopped.
  void anAgentKilledOnANodeIsNamed() {
    const Run run = runPtw(slurmProfile(1000000), QStringLiteral("agent-killed"),
                           sallocNodes(QStringLiteral("agent-killed"), 2, 1), {}, [&](QProcess& ptw) {
                             QElapsedTimer t;
                             t.start();
                             pid_t agent = -1;
                             while (t.elapsed() < 60000 && ptw.state() == QProcess::Running && agent < 0) {
                               agent = agentOn(kNode2);
                               ptw.waitForFinished(200);
                             }
                             ptw.waitForFinished(3000);  // its ranks started and training
                             if (agent > 0) ::kill(agent, SIGKILL);
                           });
    QVERIFY2(run.exitCode != 0, qPrintable(run.output));
    const QString message = run.summary.value("message").toString();
    QVERIFY2(message.startsWith("rank 1 on host ptwnode2 failed with signal 9"), qPrintable(message));
    checkNoProcessLeft();
  }

  // A stop (SIGTERM to ptw) while it waits for its job ends the wait: nothing starts.
  void aStopWhileWaitingEndsTheRun() {
    const Run run = runPtw(slurmProfile(20), QStringLiteral("waiting"), {}, {}, [&](QProcess& ptw) {
      QElapsedTimer t;
      t.start();
      while (t.elapsed() < 30000 && ptw.state() == QProcess::Running &&
             !QString::fromUtf8(ptw.peek(1 << 20)).contains("waiting for the job to start"))
        ptw.waitForReadyRead(200);
      ::kill(static_cast<pid_t>(ptw.processId()), SIGTERM);
    });
    QCOMPARE(run.summary.value("status").toString(), QStringLiteral("stopped"));
    QVERIFY2(run.summary.value("message").toString().contains("waiting for the SLURM job"), qPrintable(run.output));
  }
};

QTEST_GUILESS_MAIN(TestSlurm)
#include "test_slurm.moc"
