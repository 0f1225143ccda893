// SPDX-License-Identifier: GPL-3.0-or-later
// DDP across hosts through ptw's ssh launcher (docs/multihost.md), on one machine: two "hosts"
// are network namespaces with an sshd each (tests/multihost/netns_hosts.sh), and ptw runs in a
// third. Needs root (CAP_NET_ADMIN), iproute2 and OpenSSH; without them every case is skipped,
// saying why (CTest reports it skipped, not passed). Traffic goes only between the namespaces
// made here, to their 10.77.x.y addresses; they are removed when the test ends, failed or not.
#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <signal.h>
#include <unistd.h>

#include <limits>
#include <map>
#include <memory>
#include <thread>

#include <torch/torch.h>

#include "common/version.h"
#include "engine/sampler.h"
#include "engine/strategy.h"
#include "engine/trainer.h"
#include "engine_support.h"
#include "launch/run_catalog.h"
#include "launch/run_store.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;
using ptw::test::maxAbsDiff;
using ptw::test::referenceParameters;

namespace {

const QString kH1 = QStringLiteral("10.77.1.2"), kH2 = QStringLiteral("10.77.2.2");

QString script() { return test::sourcePath(QStringLiteral("tests/multihost/netns_hosts.sh")); }

// The pids of processes named `name` (ptw-worker, python3: a run's ranks and their programs)
// in network namespace `ns`.
QStringList processesIn(const QString& ns, const QByteArray& name) {
  QProcess ip;
  ip.start(QStringLiteral("ip"), {QStringLiteral("netns"), QStringLiteral("pids"), ns});
  ip.waitForFinished(10000);
  QStringList found;
  for (const auto& pid : QString::fromLatin1(ip.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts)) {
    QFile comm(QStringLiteral("/proc/%1/comm").arg(pid.trimmed()));
    if (comm.open(QIODevice::ReadOnly) && comm.readAll().trimmed() == name) found << pid.trimmed();
  }
  return found;
}
QStringList workersIn(const QString& ns) { return processesIn(ns, "ptw-worker"); }

// The pid of the process in `pids` whose environment has RANK=`rank`; "" when none has.
QString pidOfRank(const QStringList& pids, int rank) {
  for (const auto& pid : pids) {
    QFile env(QStringLiteral("/proc/%1/environ").arg(pid));
    if (env.open(QIODevice::ReadOnly) && env.readAll().split('\0').contains("RANK=" + QByteArray::number(rank)))
      return pid;
  }
  return {};
}

// Whether process `pid` holds the descriptor of the profile its host's agent handed down
// (Note [Agent profile]).
bool holdsAgentProfile(const QString& pid) {
  QDir fds(QStringLiteral("/proc/%1/fd").arg(pid));
  for (const auto& fd : fds.entryList(QDir::AllEntries | QDir::System | QDir::NoDotAndDotDot))
    if (QFile::symLinkTarget(fds.filePath(fd)).contains(QStringLiteral("memfd:ptw-profile"))) return true;
  return false;
}

// rank -> step -> loss, as the run in `runsDir` whose folder is `runDir` stored them.
std::map<int, std::map<std::int64_t, double>> storedLosses(const QString& runsDir, const QString& runDir) {
  RunStore store(runsDir.toStdString());
  std::map<int, std::map<std::int64_t, double>> out;
  for (const auto& run : store.runs())
    if (QFileInfo(QString::fromStdString(run.dir)).canonicalFilePath() == QFileInfo(runDir).canonicalFilePath())
      for (const auto& s : store.steps(run.id)) out[s.rank][s.step] = s.loss;
  return out;
}

}  // namespace

class TestMultihost : public QObject {
  Q_OBJECT

  // Removes the namespaces however the test ends (a failed QVERIFY returns early; the
  // destructor runs at exit too).
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

  QTemporaryDir m_dir{QDir::tempPath() + "/ptw-multihost-XXXXXX"};
  Hosts m_hosts;
  QString m_skip;

  QString ns(const char* which) const { return QStringLiteral("ptwt-%1-%2").arg(which, m_hosts.tag); }

  // A DDP profile of 2 hosts × 2 ranks over Gloo through the ssh launcher.
  Profile hostsProfile(std::int64_t steps) const {
    Profile p = test::mlpProfile(8, {16, 16}, 3, 96);
    p.strategy.ranks = 4;
    p.strategy.backend = "gloo";
    p.hyper.maxSteps = steps;
    p.run.timeoutS = 20;
    p.hosts.launcher = "ssh";
    p.hosts.hosts = {kH1.toStdString() + ":2", kH2.toStdString() + ":2"};
    p.hosts.interface = "data";     // the hosts' own link, not the one ssh comes over
    p.hosts.address = "10.77.3.1";  // h1 on that link
    p.hosts.sshConfig = (m_hosts.dir + "/ssh_config").toStdString();
    p.hosts.aliveIntervalS = 1;
    return p;
  }

  // resources/examples/ddp_train.py (DDP over Gloo, reporting through ptw_metrics) as a
  // command of 4 ranks, on the 2 hosts × 2 ranks of hostsProfile.
  Profile scriptProfile(std::int64_t steps) const {
    Profile p = test::ddpScriptProfile("script-hosts", 4, steps);
    p.hosts = hostsProfile(steps).hosts;
    return p;
  }

  // No ptw-worker (rank or agent), python3 or ssh of a run in any of the namespaces, within `seconds`.
  bool noProcessLeft(int seconds, QString& left) {
    QElapsedTimer t;
    t.start();
    for (;;) {
      left.clear();
      for (const char* n : {"ctl", "h1", "h2"})
        for (const QByteArray name : {"ptw-worker", "python3", "ssh"})
          for (const auto& pid : processesIn(ns(n), name))
            left += QStringLiteral(" %1:%2(%3)").arg(n, pid, QString::fromLatin1(name));
      if (left.isEmpty()) return true;
      if (t.elapsed() > seconds * 1000) return false;
      QThread::msleep(200);
    }
  }

  // torchrun on h1 and h2 (--nnodes 2, --node_rank by host, a static rendezvous at the first
  // host's data address), running `p`'s command (a Python script, which torchrun runs with its
  // own Python, /usr/bin/python3 as ptw's command.program) with its arguments; each rank's output goes to
  // logs/nodeN/*/attempt_0/LOCAL_RANK/stdout.log (--redirects 1: the console copy is only for
  // failures). "" when both finished with exit code 0 within 120 s, else what they said.
  QString runTorchrun(const Profile& p, const QString& logs, int port) {
    QStringList args;
    for (const auto& a : p.command.args) {
      QString arg = QString::fromStdString(a);
      arg.replace("{hyper.lr}", QString::number(p.hyper.lr, 'g', 17))
          .replace("{hyper.max_steps}", QString::number(p.hyper.maxSteps))
          .replace("{hyper.batch_size}", QString::number(p.hyper.batchSize))
          .replace("{hyper.seed}", QString::number(p.hyper.seed));
      if (arg != "--ptw-metrics") args << arg;  // ptw_metrics reports to ptw alone
    }
    std::vector<std::unique_ptr<QProcess>> nodes;
    for (int node = 0; node < 2; ++node) {
      auto& torchrun = nodes.emplace_back(std::make_unique<QProcess>());
      torchrun->setProcessChannelMode(QProcess::MergedChannels);
      torchrun->setWorkingDirectory(QString::fromStdString(p.command.cwd));
      // --redirects and --tee 0 (their defaults) fail in torch 1.13 on Python 3.11; 1 works.
      const QStringList where = {"netns", "exec", ns(node == 0 ? "h1" : "h2"), "env", "GLOO_SOCKET_IFNAME=data"};
      const QStringList torchrunArgs =
          QStringLiteral(
              "/usr/bin/python3 -m torch.distributed.run --nnodes 2 --nproc_per_node 2 "
              "--rdzv_backend static --master_addr 10.77.3.1 --redirects 1 --tee 1")
              .split(' ') +
          QStringList{"--node_rank",         QString::number(node), "--master_port",
                      QString::number(port), "--log_dir",           logs + "/node" + QString::number(node)};
      torchrun->start(QStringLiteral("ip"), where + torchrunArgs + args);
    }
    QString said;
    for (auto& torchrun : nodes) {
      if (!torchrun->waitForFinished(120000)) {
        torchrun->kill();
        torchrun->waitForFinished(5000);
      }
      if (torchrun->exitStatus() != QProcess::NormalExit || torchrun->exitCode() != 0)
        said += QString::fromUtf8(torchrun->readAll()) + "\n";
    }
    return said;
  }

  // rank -> step -> loss from the `step N loss X` lines each rank of runTorchrun printed.
  static std::map<int, std::map<std::int64_t, double>> torchrunLosses(const QString& logs) {
    std::map<int, std::map<std::int64_t, double>> out;
    static const QRegularExpression line(QStringLiteral("^step (\\d+) loss (\\S+)$"));
    for (int node = 0; node < 2; ++node) {
      QDirIterator it(logs + "/node" + QString::number(node), {QStringLiteral("stdout.log")}, QDir::Files,
                      QDirIterator::Subdirectories);
      while (it.hasNext()) {
        const QString path = it.next();
        const int rank = node * 2 + QFileInfo(path).dir().dirName().toInt();
        QFile f(path);
        if (!f.open(QIODevice::ReadOnly)) continue;
        for (const auto& l : QString::fromUtf8(f.readAll()).split('\n')) {
          const auto m = line.match(l.trimmed());
          if (m.hasMatch()) out[rank][m.captured(1).toLongLong()] = m.captured(2).toDouble();
        }
      }
    }
    return out;
  }

  using Run = test::HeadlessRun;

  QString m_runsDir;  // runPtw's --runs-dir; "" is runs/ in the hosts' folder
  QString runsDir() const { return m_runsDir.isEmpty() ? m_hosts.dir + "/runs" : m_runsDir; }

  // Runs `command` (umount, mount) in the second host's mount namespace, sshd's, which every
  // ssh session there shares: a mount made there hides a folder from that host alone, as a
  // folder on a disk of its own would be.
  bool inSecondHostsMounts(const QStringList& command) {
    QFile pidFile(m_hosts.dir + "/sshd_h2.pid");
    if (!pidFile.open(QIODevice::ReadOnly)) return false;
    const QString pid = QString::fromLatin1(pidFile.readAll()).trimmed();
    return QProcess::execute(QStringLiteral("nsenter"), QStringList{"-t", pid, "-m", "--"} + command) == 0;
  }

  // ptw --headless in the control namespace; `during` runs once the ranks train.
  Run runPtw(const Profile& p, const QString& name, const QStringList& extra = {},
             const std::function<void()>& during = {}) {
    const QString profile = m_hosts.dir + "/" + name + ".json";
    saveProfile(p, profile.toStdString());
    const QString summary = m_hosts.dir + "/" + name + ".summary.json";
    QProcess ptw;
    ptw.setProcessChannelMode(QProcess::MergedChannels);
    QStringList args = {QStringLiteral("netns"),
                        QStringLiteral("exec"),
                        ns("ctl"),
                        test::binDir() + "/ptw",
                        QStringLiteral("--headless"),
                        QStringLiteral("-p"),
                        profile,
                        QStringLiteral("--runs-dir"),
                        runsDir(),
                        QStringLiteral("--summary"),
                        summary};
    ptw.start(QStringLiteral("ip"), args + extra);
    if (!ptw.waitForStarted(10000)) return {};
    if (during) {
      // Bounded: the ranks on h2 are up within 30 s, or `during` is skipped and the run judged as is.
      QElapsedTimer t;
      t.start();
      while (workersIn(ns("h2")).size() < 2 && t.elapsed() < 30000) ptw.waitForFinished(200);
      ptw.waitForFinished(3000);  // a few steps in
      if (ptw.state() == QProcess::Running) during();
    }
    return test::finishHeadless(ptw, summary, 180000);
  }

  // No process of a run in any of the namespaces, within `seconds`: noProcessLeft, the
  // agents and ssh included (a host cut off ends its ranks when its sshd gives the session up:
  // ClientAliveInterval 1 × 3).
  bool noWorkersLeft(int seconds, QString& left) { return noProcessLeft(seconds, left); }

  // The folders of an agent in the hosts' /tmp (this machine's) that hold a profile named
  // `name`: the profile of a run of this test, not of whatever else runs agents meanwhile.
  static QStringList agentFoldersOf(const std::string& name) {
    QStringList folders;
    QDirIterator it(QStringLiteral("/tmp"), {QStringLiteral("ptw-agent-*")}, QDir::Dirs);
    while (it.hasNext()) {
      const QString folder = it.next();
      QFile profile(folder + "/profile.json");
      if (profile.open(QIODevice::ReadOnly) &&
          profile.readAll().contains("\"" + QByteArray::fromStdString(name) + "\""))
        folders << folder;
    }
    return folders;
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    QProcess check;
    check.start(QStringLiteral("bash"), {script(), QStringLiteral("check")});
    check.waitForFinished(20000);
    if (check.exitCode() != 0) {
      m_skip = "multi-host test not run: " + QString::fromUtf8(check.readAll()).trimmed();
      return;
    }
    m_hosts.tag = QString::number(::getpid());
    m_hosts.dir = m_dir.path();
    m_hosts.up = true;  // from here on, whatever was made is removed
    QProcess up;
    up.setProcessChannelMode(QProcess::MergedChannels);
    up.start(QStringLiteral("bash"), {script(), QStringLiteral("up"), m_hosts.tag, m_hosts.dir});
    QVERIFY2(up.waitForFinished(60000) && up.exitCode() == 0, up.readAll().constData());
  }
  void cleanupTestCase() { m_hosts.down(); }
  void init() {
    if (!m_skip.isEmpty() && QByteArray(QTest::currentTestFunction()) != "inAChrootWhoseRootIsNoMountPointItSkips")
      QSKIP(qPrintable(m_skip));
  }

  // In a chroot whose / is not a mount point (a debootstrap tree), `ip netns exec` cannot
  // remount / as a slave: this test, made in one here (a plain folder with this machine's /usr,
  // /etc, /proc, /dev, /sys, /run and this source and build tree bound into it, in a mount
  // namespace of its own), is skipped with that reason instead of failing.
  void inAChrootWhoseRootIsNoMountPointItSkips() {
    if (::geteuid() != 0) QSKIP("needs root to make a mount namespace and chroot (unshare -m)");
    if (QStandardPaths::findExecutable(QStringLiteral("unshare")).isEmpty()) QSKIP("needs unshare (util-linux)");
    if (QByteArray(qgetenv("PTW_IN_TEST_CHROOT")) == "1") QSKIP("already in the test's chroot");
    QTemporaryDir root(QDir::tempPath() + "/ptw-chroot-XXXXXX");
    QVERIFY(root.isValid());
    const QString tree = QFileInfo(test::sourcePath(QStringLiteral("."))).canonicalFilePath();
    const QString bin = QFileInfo(test::binDir()).canonicalFilePath();
    QProcess inside;
    inside.setProcessChannelMode(QProcess::MergedChannels);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("PTW_IN_TEST_CHROOT", "1");
    inside.setProcessEnvironment(env);
    inside.start(QStringLiteral("unshare"),
                 {"--mount", "--propagation", "private", "bash", "-c",
                  "set -e; r=$1; src=$2; bin=$3\n"
                  "for d in usr etc proc dev sys run tmp; do mkdir -p \"$r/$d\"; done\n"
                  "for d in bin lib lib64 sbin; do [ -L \"/$d\" ] && ln -s \"$(readlink \"/$d\")\" \"$r/$d\"; done\n"
                  "for d in usr etc proc dev sys run; do mount --rbind \"/$d\" \"$r/$d\"; done\n"
                  "mkdir -p \"$r$src\" \"$r$bin\"; mount --bind \"$src\" \"$r$src\"; mount --bind \"$bin\" \"$r$bin\"\n"
                  "set +e; chroot \"$r\" bash \"$src/tests/multihost/netns_hosts.sh\" check; echo \"check: $?\"\n"
                  "chroot \"$r\" \"$bin/test_multihost\" twoHostsEqualOneProcess; echo \"test: $?\"\n",
                  "_", root.path(), tree, bin});
    QVERIFY(inside.waitForFinished(60000));
    const QString said = QString::fromUtf8(inside.readAll());
    if (said.startsWith("unshare: ")) QSKIP(qPrintable("cannot make a mount namespace here: " + said.trimmed()));
    const QString why =
        "cannot enter a network namespace (ip netns exec failed: \"mount --make-rslave /\" failed: "
        "Invalid argument; in a chroot, / must be a mount point";
    QVERIFY2(said.contains(why + ": mount --bind the tree onto itself)\ncheck: 1\n"), qPrintable(said));
    QVERIFY2(said.contains("SKIP   : TestMultihost::twoHostsEqualOneProcess() multi-host test not run: " + why),
             qPrintable(said));
    QVERIFY2(said.contains("test: 0\n"), qPrintable(said));
  }

  // 2 hosts × 2 ranks over Gloo, started through ssh, end with the parameters one process
  // gets on the same global batches; every rank's records and logs came back over its
  // connection; nothing is left running on any host.
  void twoHostsEqualOneProcess() {
    const Profile p = hostsProfile(20);
    Run run = runPtw(p, QStringLiteral("equal"));
    QVERIFY2(run.exitCode == 0, qPrintable(run.output));
    QCOMPARE(run.summary.value("status").toString(), QStringLiteral("finished"));
    const QJsonArray ranks = run.summary.value("ranks").toArray();
    QCOMPARE(ranks.size(), 4);
    for (const auto& r : ranks) QCOMPARE(r.toObject().value("steps").toInt(), 20);  // live records from each
    const QString runDir = run.summary.value("run_dir").toString();
    std::vector<std::vector<torch::Tensor>> params(4);
    for (int r = 0; r < 4; ++r) {
      torch::load(params[static_cast<std::size_t>(r)],
                  QStringLiteral("%1/rank%2.final.pt").arg(runDir).arg(r).toStdString());
      QFile log(QStringLiteral("%1/rank%2.log").arg(runDir).arg(r));
      QVERIFY(log.open(QIODevice::ReadOnly));
      QVERIFY2(log.readAll().contains(QStringLiteral("[rank %1]").arg(r).toUtf8()), "a remote rank's log came back");
    }
    for (int r = 1; r < 4; ++r) QCOMPARE(maxAbsDiff(params[0], params[static_cast<std::size_t>(r)]), 0.0);
    const double diff = maxAbsDiff(params[0], referenceParameters(p, 4));
    QVERIFY2(diff < 1e-5, qPrintable(QStringLiteral("max |2 hosts x 2 ranks - one process| = %1").arg(diff)));
    QString left;
    QVERIFY2(noWorkersLeft(10, left), qPrintable("ptw-worker left running:" + left));
  }

  // A run that loses a remote rank restarts from its checkpoint in the shared run folder, on
  // both hosts, and ends with the uninterrupted run's parameters.
  void aRestartFromCheckpointSpansHosts() {
    Profile p = hostsProfile(20);
    p.run.checkpointEvery = 5;
    p.run.maxRestarts = 1;
    Run run = runPtw(p, QStringLiteral("restart"), {QStringLiteral("--worker-arg=--fault=kill-at-step:3:8")});
    QVERIFY2(run.exitCode == 0, qPrintable(run.output));
    QCOMPARE(run.summary.value("attempts").toInt(), 2);
    std::vector<torch::Tensor> params;
    torch::load(params, QStringLiteral("%1/rank2.final.pt").arg(run.summary.value("run_dir").toString()).toStdString());
    const double diff = maxAbsDiff(params, referenceParameters(p, 4));
    QVERIFY2(diff < 1e-5, qPrintable(QStringLiteral("max |restarted - one process| = %1").arg(diff)));
    QString left;
    QVERIFY2(noWorkersLeft(10, left), qPrintable("ptw-worker left running:" + left));
  }

  // Before anything starts, each host must answer ssh and run this build's ptw-worker: a host
  // with another build, or none at the path, is named and the run does not start (exit 2).
  void aHostWithoutThisWorkerIsNamedBeforeStart_data() {
    QTest::addColumn<QString>("worker");
    QTest::addColumn<bool>("isScript");  // a command profile, else ddp
    QTest::addColumn<QString>("expected");
    const QString anotherBuild = "hosts.hosts: host " + kH1 + " runs ptw-worker 0.0.1, this machine ptw-worker " +
                                 QString(kVersion) + "; every host needs the same ptw build";
    QTest::newRow("another build") << "old-worker" << false << anotherBuild;
    QTest::newRow("no worker there") << "missing-worker" << false << "hosts.hosts: host " + kH1 + " cannot run ";
    QTest::newRow("a script, another build") << "old-worker" << true << anotherBuild;
    QTest::newRow("no host agent") << "agentless-worker" << false
                                   << "hosts.hosts: host " + kH1 + " runs a ptw-worker without the host agent (";
  }
  void aHostWithoutThisWorkerIsNamedBeforeStart() {
    QFETCH(QString, worker);
    QFETCH(bool, isScript);
    QFETCH(QString, expected);
    const QString old = m_hosts.dir + "/old-worker";
    QFile script(old);
    QVERIFY(script.open(QIODevice::WriteOnly));
    script.write("#!/bin/sh\necho ptw-worker 0.0.1\n");
    script.close();
    script.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    QFile agentless(m_hosts.dir + "/agentless-worker");  // this build's version, and no --agent: a build before it
    QVERIFY(agentless.open(QIODevice::WriteOnly));
    agentless.write("#!/bin/sh\n[ \"$1\" = --version ] && { echo ptw-worker " + QByteArray(kVersion) +
                    "; exit 0; }\necho \"error: unknown flag $1\" >&2\nexit 2\n");
    agentless.close();
    agentless.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    Profile p = isScript ? scriptProfile(20) : hostsProfile(20);
    p.hosts.worker = (m_hosts.dir + "/" + worker).toStdString();
    Run run = runPtw(p, QStringLiteral("preflight"));
    QCOMPARE(run.exitCode, 2);
    QVERIFY2(run.output.contains(expected), qPrintable(run.output));
    QString left;
    QVERIFY2(noProcessLeft(1, left), qPrintable("left running:" + left));
  }

  // The second host has another build of ptw at hosts.worker (a folder it has a mount of
  // its own over), the first this one. The check asks each host `ptw-worker --agent
  // --version`: the run does not start (exit 2, no run folder, no process on any host),
  // named with the second host and both versions. A build that changed after the check (it
  // answered this version) is named all the same, by its agent refusing ptw's request: the
  // run fails with that host's ranks and the agent's line, and nothing of it is left.
  void anotherBuildOnTheSecondHostIsNamed_data() {
    QTest::addColumn<bool>("atTheCheck");
    QTest::newRow("at the check") << true;
    QTest::newRow("at the agent") << false;
  }
  void anotherBuildOnTheSecondHostIsNamed() {
    QFETCH(bool, atTheCheck);
    if (QStandardPaths::findExecutable(QStringLiteral("nsenter")).isEmpty())
      QSKIP("needs nsenter (util-linux) to install another build on one host");
    const QString install = m_hosts.dir + "/installed";
    QVERIFY(QDir().mkpath(install));
    QFile here(install + "/ptw-worker");  // this build, where every host but the second sees it
    QVERIFY(here.open(QIODevice::WriteOnly));
    const QString worker = test::binDir() + "/ptw-worker";
    here.write("#!/bin/sh\nexec " + worker.toUtf8() + " \"$@\"\n");
    here.close();
    QVERIFY(here.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner));
    // What ptw-worker 0.0.1 says: its version, and its agent's refusal of this build's request.
    const QString refusal = "error: ptw-worker --agent on $(hostname): this host runs ptw-worker 0.0.1, and ptw " +
                            QString(kVersion) + " sent the run; every host needs the same ptw build";
    const QString version = atTheCheck ? "echo 'ptw-worker 0.0.1'; exit 0" : "exec " + worker + " \"$@\"";
    const QString other = "#!/bin/sh\nfor a; do [ \"$a\" = --version ] && { " + version + "; }; done\n" +
                          "head -n 1 >/dev/null; echo \"" + refusal + "\" >&2; exit 2\n";
    QVERIFY2(
        inSecondHostsMounts({"sh", "-c",
                             "mount -t tmpfs -o size=1m ptwt-other \"$1\" && printf '%s' \"$2\" > \"$1/ptw-worker\" "
                             "&& chmod 700 \"$1/ptw-worker\"",
                             "_", install, other}),
        "cannot install another build on the second host");
    Profile p = hostsProfile(20);
    p.hosts.worker = (install + "/ptw-worker").toStdString();
    const QDir runs(runsDir());
    const auto runFolders = [&runs] {
      return runs.entryList({QStringLiteral("????????T??????Z-*")}, QDir::Dirs).size();
    };
    const auto before = runFolders();
    Run run = runPtw(p, QStringLiteral("other-build"));
    inSecondHostsMounts({"umount", install});
    const QString versions = atTheCheck
                                 ? "hosts.hosts: host " + kH2 + " runs ptw-worker 0.0.1, this machine ptw-worker " +
                                       kVersion + "; every host needs the same ptw build"
                                 : ": this host runs ptw-worker 0.0.1, and ptw " + QString(kVersion) +
                                       " sent the run; every host needs the same ptw build";
    QVERIFY2(run.output.contains(versions), qPrintable(run.output));
    if (atTheCheck) {
      QCOMPARE(run.exitCode, 2);
      QCOMPARE(runFolders(), before);
    } else {
      QVERIFY2(run.exitCode != 0, qPrintable(run.output));
      const QString message = run.summary.value("message").toString();
      QVERIFY2(message.contains(QRegularExpression("^rank [23] on host " + QRegularExpression::escape(kH2) +
                                                   " failed with exit code 2: ")) &&
                   message.contains(versions),
               qPrintable(message));
    }
    QString left;
    QVERIFY2(noProcessLeft(10, left), qPrintable("left running:" + left));
  }

  // A path the ranks need that the second host cannot see (a folder it has a mount of its own
  // over) is named with its field, the host and the path before anything starts: exit 2, no
  // run folder, no rank on any host.
  void aPathTheSecondHostCannotSeeIsNamedBeforeStart_data() {
    QTest::addColumn<QString>("field");
    QTest::newRow("runs directory") << "runs directory";
    QTest::newRow("command.cwd") << "command.cwd";
    QTest::newRow("command.program") << "command.program";
    QTest::newRow("run.resume_from") << "run.resume_from";
  }
  void aPathTheSecondHostCannotSeeIsNamedBeforeStart() {
    QFETCH(QString, field);
    if (QStandardPaths::findExecutable(QStringLiteral("nsenter")).isEmpty())
      QSKIP("needs nsenter (util-linux) to hide a folder from one host");
    const QString hidden = m_hosts.dir + "/hidden-" + QString(field).replace(' ', '-');
    QVERIFY(QDir().mkpath(hidden + "/runs") && QDir().mkpath(hidden + "/work"));
    for (const char* file : {"/work/train.py", "/runs/checkpoint.pt"}) {  // here, each is there
      QFile f(hidden + file);
      QVERIFY(f.open(QIODevice::WriteOnly));
    }
    QVERIFY2(inSecondHostsMounts({"mount", "-t", "tmpfs", "-o", "size=1m", "ptwt-hidden", hidden}),
             "cannot mount over a folder in the second host's namespace");
    Profile p = field == "run.resume_from" ? hostsProfile(20) : scriptProfile(20);
    QString path = hidden + "/runs";
    if (field == "runs directory") m_runsDir = path;
    if (field == "command.cwd") p.command.cwd = (path = hidden + "/work").toStdString();
    if (field == "command.program") p.command.program = (path = hidden + "/work/train.py").toStdString();
    if (field == "run.resume_from") p.run.resumeFrom = (path = hidden + "/runs/checkpoint.pt").toStdString();
    const QString runs = runsDir();
    const auto runFolders = [&runs] {  // a run's folder, not the store's own (runs.blocks)
      return QDir(runs).entryList({QStringLiteral("????????T??????Z-*")}, QDir::Dirs).size();
    };
    const auto before = runFolders();
    Run run = runPtw(p, QStringLiteral("unseen"));
    m_runsDir.clear();
    inSecondHostsMounts({"umount", hidden});
    QCOMPARE(run.exitCode, 2);
    const QString expected = field + ": host " + kH2 + " cannot see " + path +
                             "; every host needs it at the same path, on a filesystem they share (docs/multihost.md)";
    QVERIFY2(run.output.contains(expected), qPrintable(run.output));
    QCOMPARE(runFolders(), before);
    QString left;
    QVERIFY2(noProcessLeft(1, left), qPrintable("left running:" + left));
  }

  // Rank 0's host must be able to open the rendezvous port: one another program listens on
  // there is named before anything starts (exit 2, no run folder, no rank).
  void aRendezvousPortInUseOnTheFirstHostIsNamedBeforeStart() {
    const int port = 29517;  // the namespace's own: nothing else listens there
    QProcess holder;         // bounded: it exits by itself after 120 s, and goes with the namespaces
    holder.start(QStringLiteral("ip"), {QStringLiteral("netns"), QStringLiteral("exec"), ns("h1"),
                                        QStringLiteral("/usr/bin/python3"), QStringLiteral("-c"),
                                        QStringLiteral("import socket, sys, time\n"
                                                       "s = socket.socket()\n"
                                                       "s.bind(('0.0.0.0', int(sys.argv[1])))\n"
                                                       "s.listen(1)\n"
                                                       "print('listening', flush=True)\n"
                                                       "time.sleep(120)\n"),
                                        QString::number(port)});
    QVERIFY(holder.waitForReadyRead(10000));
    QCOMPARE(holder.readAllStandardOutput().trimmed(), QByteArray("listening"));
    const QDir runs(m_hosts.dir + "/runs");
    const auto runFolders = [&runs] { return runs.entryList(QDir::Dirs | QDir::NoDotAndDotDot).size(); };
    const auto before = runFolders();
    Profile p = hostsProfile(20);
    p.hosts.port = port;
    Run run = runPtw(p, QStringLiteral("port"));
    holder.kill();
    holder.waitForFinished(5000);
    QCOMPARE(run.exitCode, 2);
    const QString expected = "hosts.port: host " + kH1 + " cannot open port " + QString::number(port) +
                             " for the rendezvous: Address already in use; pick another hosts.port or free it";
    QVERIFY2(run.output.contains(expected), qPrintable(run.output));
    QCOMPARE(runFolders(), before);
    QString left;
    QVERIFY2(noWorkersLeft(1, left), qPrintable("ptw-worker left running:" + left));
  }

  // Note [Host agent]: 2 hosts × 2 ranks take one ssh connection a host, not one a rank, for
  // ptw's own ranks and a script's alike; a stop (SIGINT to ptw) reaches every rank through
  // its host's agent, the run ends stopped, and nothing of it is left: no process in any
  // namespace, no folder of an agent. Each agent and rank holds the profile's descriptor
  // (Note [Agent profile]), a script's program does not.
  void oneConnectionPerHostAndAStopReachesEveryRank_data() {
    QTest::addColumn<bool>("isScript");
    QTest::newRow("ddp") << false;
    QTest::newRow("script") << true;
  }
  void oneConnectionPerHostAndAStopReachesEveryRank() {
    QFETCH(bool, isScript);
    QStringList ssh, agents, programsWithProfile;
    int ranksSeen = 0, profileHolders = 0;
    Profile p = isScript ? scriptProfile(1000000) : hostsProfile(1000000);
    p.name = "one-conn-" + m_hosts.tag.toStdString() + (isScript ? "-script" : "");
    Run run = runPtw(p, isScript ? QStringLiteral("one-conn-script") : QStringLiteral("one-conn"), {}, [&] {
      // Bounded: every rank's process is up within 30 s, or the counts below fail.
      const QByteArray rankName = isScript ? "python3" : "ptw-worker";
      const int perHost = isScript ? 2 : 3;  // ptw's own ranks: the agent is a ptw-worker too
      QElapsedTimer t;
      t.start();
      while (t.elapsed() < 30000 &&
             (processesIn(ns("h1"), rankName).size() < perHost || processesIn(ns("h2"), rankName).size() < perHost))
        QThread::msleep(200);
      QThread::msleep(1000);
      ssh = processesIn(ns("ctl"), "ssh");
      for (const char* h : {"h1", "h2"}) {
        for (const auto& pid : processesIn(ns(h), "ptw-worker")) {
          QFile cmdline(QStringLiteral("/proc/%1/cmdline").arg(pid));
          if (cmdline.open(QIODevice::ReadOnly) && cmdline.readAll().split('\0').contains("--agent"))
            agents << QStringLiteral("%1:%2").arg(h, pid);
        }
        ranksSeen += processesIn(ns(h), rankName).size() - (isScript ? 0 : 1);
        for (const auto& pid : processesIn(ns(h), "ptw-worker")) profileHolders += holdsAgentProfile(pid) ? 1 : 0;
        for (const auto& pid : processesIn(ns(h), "python3"))
          if (holdsAgentProfile(pid)) programsWithProfile << pid;
      }
      for (const auto& pid : processesIn(ns("ctl"), "ptw"))
        QProcess::execute(QStringLiteral("kill"), {QStringLiteral("-INT"), pid});
    });
    QCOMPARE(ssh.size(), 2);     // one connection a host
    QCOMPARE(agents.size(), 2);  // one agent a host
    QCOMPARE(ranksSeen, 4);
    QCOMPARE(profileHolders, 6);  // each agent and rank; a script's program does not inherit it
    QVERIFY2(programsWithProfile.isEmpty(), qPrintable("programs with the profile: " + programsWithProfile.join(' ')));
    QCOMPARE(run.summary.value("status").toString(), QStringLiteral("stopped"));
    QCOMPARE(run.exitCode, 5);
    QString left;
    QVERIFY2(noProcessLeft(10, left), qPrintable("left running:" + left));
    const QStringList leftBehind = agentFoldersOf(p.name);
    QVERIFY2(leftBehind.isEmpty(), qPrintable("agent folders left: " + leftBehind.join(' ')));
  }

  // Note [Agent profile]: the agent on the second host killed by SIGKILL mid-run (no chance
  // to clean up): the run fails naming that host's ranks, nothing of the run is left running
  // in any namespace, and no folder of an agent holds this run's profile on that host.
  void anAgentKilledLeavesNothingOnItsHost() {
    Profile p = hostsProfile(1000000);
    p.name = "agent-killed-" + m_hosts.tag.toStdString();  // found in an agent's folder, were one left
    QString killed;
    Run run = runPtw(p, QStringLiteral("agent-killed"), {}, [&] {
      for (const auto& pid : workersIn(ns("h2"))) {
        QFile cmdline(QStringLiteral("/proc/%1/cmdline").arg(pid));
        if (cmdline.open(QIODevice::ReadOnly) && cmdline.readAll().split('\0').contains("--agent")) killed = pid;
      }
      if (!killed.isEmpty()) QProcess::execute(QStringLiteral("kill"), {QStringLiteral("-9"), killed});
    });
    QVERIFY2(!killed.isEmpty(), "no agent found on the second host");
    QVERIFY2(run.exitCode != 0, qPrintable(run.output));
    const QString message = run.summary.value("message").toString();
    QVERIFY2(message.contains(QRegularExpression("^rank [23] on host " + QRegularExpression::escape(kH2) + " ")),
             qPrintable(message));
    QString left;
    QVERIFY2(noProcessLeft(10, left), qPrintable("left running:" + left));
    const QStringList folders = agentFoldersOf(p.name);
    QVERIFY2(folders.isEmpty(), qPrintable("left on the host: " + folders.join(' ')));
  }

  // Note [Script ranks]: the program of rank 1, on the second host, starts a child in a
  // session of its own (`setsid`, out of its rank's process group) and then trains; once the
  // run has ended, that child is gone too. A rank's worker kills what its program leaves
  // among its own children (a subreaper) when it ends as it should; the agent on the second
  // host kills, by the run's token, what escapes that: the children of a worker killed by
  // SIGKILL, whether a stop came to that (a program ignoring SIGINT and SIGTERM) or the
  // worker itself was killed.
  void whatAScriptLeftOnTheSecondHostIsKilled_data() {
    QTest::addColumn<QString>("how");
    QTest::addColumn<QString>("status");
    QTest::newRow("finished") << "finished"
                              << "finished";
    QTest::newRow("stopped, to SIGKILL") << "stopped"
                                         << "stopped";
    QTest::newRow("its worker killed") << "worker killed"
                                       << "failed";
  }
  void whatAScriptLeftOnTheSecondHostIsKilled() {
    QFETCH(QString, how);
    QFETCH(QString, status);
    Profile p = scriptProfile(how == "finished" ? 5 : 1000000);
    p.strategy.ranks = 2;
    p.hosts.hosts = {kH1.toStdString() + ":1", kH2.toStdString() + ":1"};
    p.command.stopGraceS = 0.5;
    const QString pidFile = m_hosts.dir + "/left-" + QString(how).replace(' ', '-');  // the hosts share this folder
    QFile::remove(pidFile);
    std::vector<std::string> args = {
        "-c",
        "trap '' INT TERM; if [ \"$RANK\" = 1 ]; then setsid sleep 300 >/dev/null 2>&1 & echo $! > " +
            pidFile.toStdString() + "; fi; exec /usr/bin/python3 \"$@\"",
        "sh"};
    args.insert(args.end(), p.command.args.begin(), p.command.args.end());
    p.command.program = "/bin/sh";
    p.command.args = args;
    QString straggler;
    const auto readPid = [&] {
      QFile f(pidFile);
      if (f.open(QIODevice::ReadOnly)) straggler = QString::fromLatin1(f.readAll()).trimmed();
    };
    Run run = runPtw(p, "left-" + QString(how).replace(' ', '-'), {}, [&] {
      if (how == "finished") return;
      QElapsedTimer t;  // bounded: the child is started within 30 s, or the case fails below
      t.start();
      while (straggler.isEmpty() && t.elapsed() < 30000) {
        readPid();
        if (straggler.isEmpty()) QThread::msleep(200);
      }
      if (how == "stopped")
        for (const auto& pid : processesIn(ns("ctl"), "ptw"))
          QProcess::execute(QStringLiteral("kill"), {QStringLiteral("-INT"), pid});
      for (const auto& pid : how == "worker killed" ? workersIn(ns("h2")) : QStringList{}) {
        QFile cmdline(QStringLiteral("/proc/%1/cmdline").arg(pid));
        if (cmdline.open(QIODevice::ReadOnly) && !cmdline.readAll().split('\0').contains("--agent"))
          QProcess::execute(QStringLiteral("kill"), {QStringLiteral("-9"), pid});
      }
    });
    readPid();
    QVERIFY2(!straggler.isEmpty(), qPrintable("rank 1 started no child: " + run.output));
    QCOMPARE(run.summary.value("status").toString(), status);
    const auto isTheChild = [&] {
      QFile cmdline(QStringLiteral("/proc/%1/cmdline").arg(straggler));
      return cmdline.open(QIODevice::ReadOnly) &&
             cmdline.readAll() == QByteArray(
                                      "sleep\0"
                                      "300\0",
                                      10) &&
             test::processAlive(straggler.toInt());
    };
    for (int i = 0; i < 50 && isTheChild(); ++i) QThread::msleep(200);  // bounded: 10 s
    const bool gone = !isTheChild();
    if (!gone) ::kill(straggler.toInt(), SIGKILL);
    QVERIFY2(gone, qPrintable("the child rank 1 left (pid " + straggler + ") was running after the run"));
    QString left;
    QVERIFY2(noProcessLeft(10, left), qPrintable("left running:" + left));
  }

  // A remote rank killed by a signal is named with its host; the others are stopped, on
  // every host.
  void aRemoteRankKilledIsNamed() {
    Run run = runPtw(hostsProfile(1000000), QStringLiteral("killed"),
                     {QStringLiteral("--worker-arg=--fault=kill-at-step:3:5")});
    QVERIFY2(run.exitCode != 0, qPrintable(run.output));
    const QString message = run.summary.value("message").toString();
    QVERIFY2(message.startsWith("rank 3 on host " + kH2 + " failed with signal 9"), qPrintable(message));
    QString left;
    QVERIFY2(noWorkersLeft(10, left), qPrintable("ptw-worker left running:" + left));
  }

  // A host cut off mid-run (its links down): its ranks are named with the host and the lost
  // connection, the others stopped; the cut-off host's ranks end when its sshd drops them.
  void aHostCutOffIsNamed() {
    Run run = runPtw(hostsProfile(1000000), QStringLiteral("cut"), {}, [this] {
      for (const char* link : {"mgmt", "data"})
        QProcess::execute(QStringLiteral("ip"),
                          {QStringLiteral("-n"), ns("h2"), QStringLiteral("link"), QStringLiteral("set"),
                           QString::fromLatin1(link), QStringLiteral("down")});
    });
    for (const char* link : {"mgmt", "data"})  // up again for the cases after this one
      QProcess::execute(QStringLiteral("ip"), {QStringLiteral("-n"), ns("h2"), QStringLiteral("link"),
                                               QStringLiteral("set"), QString::fromLatin1(link), QStringLiteral("up")});
    QVERIFY2(run.exitCode != 0, qPrintable(run.output));
    const QString message = run.summary.value("message").toString();
    QVERIFY2(message.contains(QRegularExpression("^rank [23] on host " + QRegularExpression::escape(kH2) +
                                                 " lost its host: the ssh connection to " +
                                                 QRegularExpression::escape(kH2) + " failed or dropped")),
             qPrintable(message));
    QString left;
    QVERIFY2(noWorkersLeft(20, left), qPrintable("ptw-worker left running:" + left));
  }

  // Rank 3 on the second host hangs after step 5 while the others wait for it: the message
  // names it with the collective it has not entered (Note [Collective positions]), and its
  // frames came back from that host, written by the rank itself into the shared run folder
  // when asked on its ssh connection (Note [Native stacks]).
  void aRemoteHungRankShowsItsPositionAndFrames() {
    Profile p = hostsProfile(1000000);
    p.run.timeoutS = 8;
    Run run = runPtw(p, QStringLiteral("hung"), {QStringLiteral("--worker-arg=--fault=hang-at-step:3:5")});
    QVERIFY2(run.exitCode != 0, qPrintable(run.output));
    const QString message = run.summary.value("message").toString();
    QVERIFY2(message.startsWith("rank 3 on host " + kH2 + " stopped making progress"), qPrintable(message));
    QVERIFY2(message.contains(QRegularExpression("; rank 3 has not entered all-reduce #\\d+; ranks 0-2 are waiting "
                                                 "inside it; at ptw::engine::hangInOwnWork from ")),
             qPrintable(message));
    QFile stacks(run.summary.value("stacks").toString());
    QVERIFY2(stacks.open(QIODevice::ReadOnly), qPrintable(run.output));
    const QString text = QString::fromUtf8(stacks.readAll());
    const int mine = text.indexOf("== rank 3 (");
    QVERIFY2(mine >= 0, qPrintable(text));
    const QString section = text.mid(mine, text.indexOf("\n== rank", mine + 1) - mine);
    QVERIFY2(section.contains(", host " + kH2 + "): native frames (ptw-worker) =="), qPrintable(text));
    QVERIFY2(section.contains(" in ptw::engine::hangInOwnWork() from "), qPrintable(text));
    QString left;
    QVERIFY2(noWorkersLeft(10, left), qPrintable("ptw-worker left running:" + left));
  }

  // A PyTorch DDP script on 2 hosts × 2 ranks gets torchrun's multi-node variables and
  // stores, rank by rank and step by step, the losses the same profile stores on one host.
  void aScriptOnTwoHostsStoresWhatItDoesOnOne() {
    const Profile across = scriptProfile(10);
    Run run = runPtw(across, QStringLiteral("script"));
    QVERIFY2(run.exitCode == 0, qPrintable(run.output));
    QCOMPARE(run.summary.value("status").toString(), QStringLiteral("finished"));
    Profile local = across;
    local.hosts = HostsSpec{};
    Run one = runPtw(local, QStringLiteral("script-one"));
    QVERIFY2(one.exitCode == 0, qPrintable(one.output));
    const QString runs = m_hosts.dir + "/runs";
    const auto twoHosts = storedLosses(runs, run.summary.value("run_dir").toString());
    const auto oneHost = storedLosses(runs, one.summary.value("run_dir").toString());
    QCOMPARE(twoHosts.size(), std::size_t{4});
    for (int r = 0; r < 4; ++r) {
      QCOMPARE(twoHosts.at(r).size(), std::size_t{10});
      QCOMPARE(twoHosts.at(r), oneHost.at(r));
    }
    // Rank 3's log says where it ran: the second host, second of its ranks.
    QFile log(run.summary.value("run_dir").toString() + "/rank3.log");
    QVERIFY(log.open(QIODevice::ReadOnly));
    QVERIFY2(log.readAll().contains("[rank 3]"), "rank 3's log came back");
    QString left;
    QVERIFY2(noProcessLeft(10, left), qPrintable("left running:" + left));
  }

  // torchrun itself (Debian's torch.distributed.run), started here on the same two hosts with a
  // static rendezvous on the first, runs the script of aScriptOnTwoHostsStoresWhatItDoesOnOne:
  // each rank prints the same losses ptw stores for it, exactly. Both give the script the same
  // rank numbering (hosts in order, a host's ranks in order) and one thread a rank, and Gloo's
  // all-reduce over the same four ranks adds in the same order, so no tolerance is needed.
  void torchrunOnTheSameHostsGivesPtwsLosses() {
    const Profile across = scriptProfile(10);
    Run run = runPtw(across, QStringLiteral("script-vs-torchrun"));
    QVERIFY2(run.exitCode == 0, qPrintable(run.output));
    const auto byPtw = storedLosses(m_hosts.dir + "/runs", run.summary.value("run_dir").toString());
    const QString logs = m_hosts.dir + "/torchrun";
    const QString finished = runTorchrun(across, logs, 29541);
    QVERIFY2(finished.isEmpty(), qPrintable(finished));
    const auto byTorchrun = torchrunLosses(logs);
    QCOMPARE(byTorchrun.size(), std::size_t{4});
    for (int r = 0; r < 4; ++r) {
      QCOMPARE(byTorchrun.at(r).size(), std::size_t{10});
      QCOMPARE(byTorchrun.at(r), byPtw.at(r));
    }
    QString left;
    QVERIFY2(noProcessLeft(10, left), qPrintable("left running:" + left));
  }

  // A script's rank killed on the second host is named with its rank and host; the others
  // are stopped, and nothing of the run is left on any host.
  void aScriptRankKilledOnTheSecondHostIsNamed() {
    QString killed;
    Run run = runPtw(scriptProfile(1000000), QStringLiteral("script-killed"), {}, [&] {
      // Bounded: the program of rank 3 is up within 30 s, or nothing is killed and the case fails.
      QElapsedTimer t;
      t.start();
      while (killed.isEmpty() && t.elapsed() < 30000) {
        killed = pidOfRank(processesIn(ns("h2"), "python3"), 3);
        if (killed.isEmpty()) QThread::msleep(200);
      }
      if (!killed.isEmpty()) QProcess::execute(QStringLiteral("kill"), {QStringLiteral("-9"), killed});
    });
    QVERIFY2(!killed.isEmpty(), "rank 3's program never started on the second host");
    QVERIFY2(run.exitCode != 0, qPrintable(run.output));
    const QString message = run.summary.value("message").toString();
    QVERIFY2(message.startsWith("rank 3 on host " + kH2 + " failed"), qPrintable(message));
    QVERIFY2(run.output.contains("/usr/bin/python3 ddp_train.py") && run.output.contains("was killed by signal 9"),
             qPrintable(run.output));  // the rank's last lines say what became of its program
    QString left;
    QVERIFY2(noProcessLeft(10, left), qPrintable("left running:" + left));
  }

  // A rank that never joins the rendezvous is named with its host when run.timeout_s runs
  // out, not the ranks that waited for it.
  void aRankThatNeverJoinsIsNamed() {
    Profile p = hostsProfile(1000000);
    p.run.timeoutS = 8;
    Run run = runPtw(p, QStringLiteral("never"), {QStringLiteral("--worker-arg=--fault=hang-at-start:3")});
    QVERIFY2(run.exitCode != 0, qPrintable(run.output));
    const QString message = run.summary.value("message").toString();
    QVERIFY2(message.startsWith("rank 3 on host " + kH2 + " never joined the rendezvous"), qPrintable(message));
    QVERIFY2(message.contains("rank(s) 0, 1, 2 waited for it"), qPrintable(message));
    QString left;
    QVERIFY2(noWorkersLeft(10, left), qPrintable("ptw-worker left running:" + left));
  }
};

QTEST_GUILESS_MAIN(TestMultihost)
#include "test_multihost.moc"
