// SPDX-License-Identifier: GPL-3.0-or-later
// The slurm launcher without a cluster (Note [SLURM ranks] in core/launch/slurm_starter.h, Note
// [SLURM job] in core/launch/slurm_job.h): each rank's srun command, the ranks' nodes from an
// allocation's variables, the sbatch script, the wait for a job and the check of the nodes
// (Note [SLURM node check]), against stand-ins for squeue, srun and scancel on PATH. tests/core/test_slurm.cpp runs
// real SLURM daemons.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/command.h"
#include "common/error.h"
#include "common/launcher_env.h"
#include "common/version.h"
#include "launch/preflight.h"
#include "launch/slurm_job.h"
#include "launch/slurm_starter.h"

using namespace ptw;
using namespace ptw::core;

namespace {

// Records what it is told (onLog of rank -1).
struct LogObserver : LaunchObserver {
  QStringList lines;
  void onLog(int, const std::string& line) override { lines << QString::fromStdString(line); }
};

Profile slurmProfile(int ranks) {
  Profile p;
  p.strategy.kind = "ddp";
  p.strategy.ranks = ranks;
  p.hosts.launcher = "slurm";
  return p;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void writeScript(const QString& path, const QByteArray& text) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write("#!/bin/sh\n" + text);
  f.close();
  f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
}

}  // namespace

class TestSlurmStarter : public QObject {
  Q_OBJECT

  QTemporaryDir m_bin;  // stand-ins for SLURM's programs, first on PATH
  QByteArray m_path = qgetenv("PATH");

  // What the stand-in squeue answers, a line a call.
  void answerSqueue(const char* lines) {
    QFile answers(m_bin.filePath("squeue.answers"));
    QVERIFY(answers.open(QIODevice::WriteOnly));
    answers.write(lines);
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_bin.isValid());
    // squeue answers from the file squeue.answers, one answer a call, the last one repeated.
    writeScript(m_bin.filePath("squeue"),
                "d=$(dirname \"$0\"); echo \"$*\" >> \"$d/squeue.calls\"\n"
                "n=$(wc -l < \"$d/squeue.calls\"); a=$(sed -n \"${n}p\" \"$d/squeue.answers\")\n"
                "[ -n \"$a\" ] || a=$(tail -n 1 \"$d/squeue.answers\"); [ \"$a\" = none ] || echo \"$a\"\n");
    writeScript(m_bin.filePath("srun"), "exit 0\n");
    writeScript(m_bin.filePath("scancel"), "echo \"$*\" >> \"$(dirname \"$0\")/scancel.calls\"\n");
    qputenv("PATH", m_bin.path().toUtf8() + ":" + m_path);
  }
  void cleanupTestCase() { qputenv("PATH", m_path); }
  void init() {
    for (const char* f : {"squeue.calls", "squeue.answers", "scancel.calls"}) QFile::remove(m_bin.filePath(f));
  }

  // One step a node, its host agent, without a shell; each rank a remote worker the agent of
  // its node starts.
  void srunCommandIsOneAgentStepPerNode() {
    HostsSpec h;
    h.launcher = "slurm";
    h.interface = "ib0";
    SlurmStarter starter(h, "4242", {"node1", "node1", "node2"}, "/opt/ptw/ptw-worker");
    QCOMPARE(starter.rendezvousPort(), 20000 + 4242);
    QCOMPARE(starter.address(), std::string("node1"));
    WorkerInvocation worker("/opt/ptw/ptw-worker");
    worker.setProfile("/runs/r/profile.json");
    worker.steps = "/runs/r/steps";  // the records come back through srun, steps included
    worker.stepsLimit = 9;
    const RankCommand c = starter.command(2, worker);
    QVERIFY(c.remote);
    QVERIFY(c.viaAgent);
    QCOMPARE(c.host, std::string("node2"));
    QCOMPARE(c.connectionLostCode, 0);
    QCOMPARE(c.argv, (std::vector<std::string>{"/opt/ptw/ptw-worker", "--profile", "/runs/r/profile.json", "--remote",
                                               "node2", "--master", "node1", "--interface", "ib0"}));
    QVERIFY(starter.oneProcessForAllAgents());
    const RankCommand a = starter.agentsCommand({"node2", "node1"});
    QVERIFY(a.remote);
    QVERIFY(!a.viaAgent);
    QCOMPARE(a.host, std::string("node2,node1"));
    const std::vector<std::string> expected = {(m_bin.path() + "/srun").toStdString(),
                                               "--jobid=4242",
                                               "--job-name=ptw-agent",
                                               "--nodes=2",
                                               "--ntasks=2",
                                               "--ntasks-per-node=1",
                                               "--nodelist=node2,node1",
                                               "--overlap",
                                               "--label",
                                               "--input=all",
                                               "--kill-on-bad-exit=0",
                                               "--mpi=none",
                                               "--quiet",
                                               "--",
                                               "/opt/ptw/ptw-worker",
                                               "--agent"};
    QCOMPARE(a.argv, expected);
    h.port = 29555;
    h.address = "10.0.0.1";
    h.worker = "/shared/ptw-worker";
    SlurmStarter given(h, "4242", {"node1"}, "/opt/ptw/ptw-worker");
    QCOMPARE(given.rendezvousPort(), 29555);
    const RankCommand g = given.command(0, WorkerInvocation("/opt/ptw/ptw-worker"));
    QCOMPARE(g.argv.front(), std::string("/shared/ptw-worker"));
    QCOMPARE(g.argv.back(), std::string("ib0"));
    QCOMPARE(given.agentsCommand({"node1"}).argv[14], std::string("/shared/ptw-worker"));
    QVERIFY(errorOf([&] { SlurmStarter(h, "12;x", {"node1"}, "w"); }).find("SLURM job id: expected a number") == 0);
  }

  // Note [SLURM node check]: one step on every node, each answer found by the node's name
  // whatever its task's id. The stand-in srun runs the script once for each node of
  // --nodelist, in the reverse order, as task 0, 1, ... (labelled as --label does); the
  // stand-in worker is this build on node1 and another on node2.
  void nodesAreCheckedInOneStepAndNamed_data() {
    QTest::addColumn<QByteArray>("srun");
    QTest::addColumn<QString>("worker");  // the stand-in's name of a node with another build
    QTest::addColumn<QString>("expected");
    const QByteArray reversed =
        "echo \"$*\" > \"$(dirname \"$0\")/srun.args\"\n"
        "for a; do case $a in --nodelist=*) list=${a#--nodelist=};; esac; last=$a; done\n"
        "order=; for n in $(echo \"$list\" | tr , ' '); do order=\"$n $order\"; done\n"
        "i=0; for n in $order; do SLURMD_NODENAME=$n /bin/sh -c \"$last\" | sed \"s/^/$i: /\"; i=$((i + 1)); done\n";
    QTest::newRow("every node passes") << reversed << "none"
                                       << "";
    QTest::newRow("node2, task 0, another build")
        << reversed << "node2"
        << "hosts.hosts: host node2 runs ptw-worker 0.0.0-other, this machine ptw-worker " + QString(kVersion) +
               "; every host needs the same ptw build";
    QTest::newRow("node1, task 1, another build")
        << reversed << "node1"
        << "hosts.hosts: host node1 runs ptw-worker 0.0.0-other, this machine ptw-worker " + QString(kVersion) +
               "; every host needs the same ptw build";
    QTest::newRow("no step") << QByteArray(
                                    "echo 'srun: error: Unable to create step for job 4242: Invalid node name "
                                    "specified' >&2\nexit 1\n")
                             << "none"
                             << "hosts.hosts: srun could not check node(s) node1,node2 in SLURM job 4242: srun: error: "
                                "Unable to create step for job 4242: Invalid node name specified; check that the job "
                                "holds them (squeue, sinfo)";
    QTest::newRow("node2 silent") << QByteArray(
                                         "for a; do last=$a; done\nSLURMD_NODENAME=node1 /bin/sh -c \"$last\" | sed "
                                         "'s/^/0: /'\necho 'srun: error: node2: task 1: Killed' >&2\nexit 1\n")
                                  << "none"
                                  << "hosts.hosts: node node2 of SLURM job 4242 did not answer the check through srun: "
                                     "srun: error: node2: task 1: Killed; check the node and the job (sinfo, squeue)";
  }
  void nodesAreCheckedInOneStepAndNamed() {
    QFETCH(QByteArray, srun);
    QFETCH(QString, worker);
    QFETCH(QString, expected);
    writeScript(m_bin.filePath("srun"), srun);
    writeScript(m_bin.filePath("ptw-worker"), "[ \"$SLURMD_NODENAME\" = " + worker.toUtf8() +
                                                  " ] && { echo ptw-worker 0.0.0-other; exit 0; }\necho ptw-worker " +
                                                  QByteArray(kVersion) + "\n");
    Profile p = slurmProfile(3);
    p.hosts.worker = m_bin.filePath("ptw-worker").toStdString();
    const std::string problem = slurmNodesProblem(p, "/unused/ptw-worker", "4242", {"node1", "node1", "node2"}, "");
    writeScript(m_bin.filePath("srun"), "exit 0\n");
    QCOMPARE(QString::fromStdString(problem), expected);
    if (srun.startsWith("echo \"$*\"")) {  // one step, one task on each node
      QFile args(m_bin.filePath("srun.args"));
      QVERIFY(args.open(QIODevice::ReadOnly));
      QVERIFY2(args.readAll().startsWith("--jobid=4242 --job-name=ptw-check --nodes=2 --ntasks=2 --ntasks-per-node=1 "
                                         "--nodelist=node1,node2 --overlap --label --mpi=none --quiet -- /bin/sh -c "),
               "srun's arguments");
    }
  }

  // A path a node cannot see is named with its field, the node and the path.
  void aPathANodeCannotSeeIsNamed() {
    writeScript(m_bin.filePath("srun"),
                "for a; do last=$a; done\nSLURMD_NODENAME=node1 /bin/sh -c \"$last\" | sed 's/^/0: /'\n");
    writeScript(m_bin.filePath("ptw-worker"), "echo ptw-worker " + QByteArray(kVersion) + "\n");
    Profile p = slurmProfile(1);
    p.hosts.worker = m_bin.filePath("ptw-worker").toStdString();
    p.data.path = m_bin.filePath("nowhere/data.npy").toStdString();
    const std::string problem = slurmNodesProblem(p, "/unused/ptw-worker", "7", {"node1"}, m_bin.path().toStdString());
    writeScript(m_bin.filePath("srun"), "exit 0\n");
    QCOMPARE(problem, "data.path: host node1 cannot see " + p.data.path +
                          "; every host needs it at the same path, on a filesystem they share (docs/multihost.md)");
  }

  // SLURM_TASKS_PER_NODE's compressed form.
  void tasksPerNodeExpand() {
    QCOMPARE(expandTasksPerNode("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
    QCOMPARE(expandTasksPerNode("4"), (std::vector<int>{4}));
    for (const char* bad : {"", "x", "2(x0)", "2(x3", "0", "2,,1", "2(y3)"})
      QVERIFY2(errorOf([&] { expandTasksPerNode(bad); }).find("SLURM_TASKS_PER_NODE: expected task counts") == 0, bad);
  }

  // Inside an allocation: its nodes, each with its tasks, must hold the run's ranks.
  void allocationPlacesRanks_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QString>("nodes");
    QTest::addColumn<QString>("tasks");
    QTest::addColumn<QString>("expected");  // the hosts, or the start of the error
    QTest::newRow("one node") << 2 << "ptwnode1"
                              << "2"
                              << "ptwnode1 ptwnode1";
    QTest::newRow("several") << 5 << "n[1-3]"
                             << "2(x2),1"
                             << "n1 n1 n2 n2 n3";
    QTest::newRow("too few tasks")
        << 4 << "n[1-2]"
        << "1(x2)"
        << "SLURM_TASKS_PER_NODE: the allocation has 2 task(s) (1(x2) on n[1-2]), but the run "
           "has 4 ranks (strategy.ranks); allocate that many tasks (salloc or sbatch "
           "--ntasks=4), or list the nodes in hosts.hosts";
    QTest::newRow("counts for other nodes") << 2 << "n[1-2]"
                                            << "2"
                                            << "SLURM_TASKS_PER_NODE: \"2\" gives 1 node(s), but SLURM_JOB_NODELIST";
    QTest::newRow("bad count") << 2 << "n1"
                               << "two"
                               << "SLURM_TASKS_PER_NODE: expected task counts";
    QTest::newRow("bad list") << 2 << "n[1-"
                              << "2"
                              << "SLURM_JOB_NODELIST: expected a SLURM hostlist";
    QTest::newRow("no list") << 2 << ""
                             << "2"
                             << "SLURM_JOB_NODELIST: not set inside the SLURM allocation";
  }
  void allocationPlacesRanks() {
    QFETCH(int, ranks);
    QFETCH(QString, nodes);
    QFETCH(QString, tasks);
    QFETCH(QString, expected);
    SlurmJob::Env env = {{"SLURM_JOB_ID", "7"}, {"SLURM_TASKS_PER_NODE", tasks.toStdString()}};
    if (!nodes.isEmpty()) env["SLURM_JOB_NODELIST"] = nodes.toStdString();
    std::vector<std::string> hosts;
    const std::string error = errorOf([&] { hosts = SlurmJob::allocationRankHosts(slurmProfile(ranks), env); });
    if (!error.empty()) {
      QVERIFY2(QString::fromStdString(error).startsWith(expected), error.c_str());
      return;
    }
    QStringList got;
    for (const auto& h : hosts) got << QString::fromStdString(h);
    QCOMPARE(got.join(' '), expected);
  }

  // hosts.hosts, when given, places the ranks; a job's nodes otherwise take them in blocks.
  void jobPlacesRanks() {
    Profile p = slurmProfile(5);
    QCOMPARE(SlurmJob::jobRankHosts(p, "n[1-2]"), (std::vector<std::string>{"n1", "n1", "n1", "n2", "n2"}));
    QCOMPARE(SlurmJob::jobRankHosts(p, "n1"), (std::vector<std::string>(5, "n1")));
    p.hosts.hosts = {"a:2", "b:3"};
    QCOMPARE(SlurmJob::jobRankHosts(p, "ignored"), (std::vector<std::string>{"a", "a", "b", "b", "b"}));
    QCOMPARE(SlurmJob::allocationRankHosts(p, {{"SLURM_JOB_ID", "1"}}),
             (std::vector<std::string>{"a", "a", "b", "b", "b"}));
  }

  // The profile the ranks are given names the allocation's nodes, each with its ranks, so that
  // a rank knows its node's place; one that names its nodes is given as it is.
  void placedProfileNamesTheNodes() {
    const SlurmJob::Env env = {
        {"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "3,2"}};
    SlurmJob job(slurmProfile(5), "", env);
    LogObserver log;
    std::atomic<bool> stop{false};
    QVERIFY(job.acquire(log, stop));
    const Profile placed = job.placed(slurmProfile(5));
    QCOMPARE(placed.hosts.hosts, (std::vector<std::string>{"n1:3", "n2:2"}));
    QVERIFY(validate(placed).empty());
    QCOMPARE(rankHosts(placed), job.rankHosts());
    QCOMPARE(placeRank(rankHosts(placed), 4), (HostPlace{1, 2, 1, 2}));
    Profile named = slurmProfile(5);
    named.hosts.hosts = {"a:2", "b:3"};
    QCOMPARE(job.placed(named).hosts.hosts, named.hosts.hosts);
  }

  // The job ptw writes: the run's shape, its name, its output in the run folder; its batch step
  // ends at once when the release file is there.
  void sbatchScriptHoldsTheAllocation() {
    QTemporaryDir dir;
    const std::string run = (dir.path() + "/20261129T120000Z-mlp").toStdString();
    QVERIFY(QDir().mkpath(QString::fromStdString(run)));
    QCOMPARE(SlurmJob::jobName(run + "/"), std::string("ptw-20261129T120000Z-mlp"));
    Profile p = slurmProfile(4);
    std::string text = SlurmJob::script(p, run);
    QVERIFY2(text.find("\n#SBATCH --job-name=ptw-20261129T120000Z-mlp\n#SBATCH --nodes=1\n#SBATCH --ntasks=4\n"
                       "#SBATCH --output=" +
                       run + "/slurm-%j.out\n") != std::string::npos,
             text.c_str());
    p.hosts.hosts = {"n1:2", "n2:2"};
    text = SlurmJob::script(p, run);
    QVERIFY2(text.find("\n#SBATCH --nodes=2\n#SBATCH --ntasks=4\n#SBATCH --ntasks-per-node=2\n"
                       "#SBATCH --nodelist=n1,n2\n") != std::string::npos,
             text.c_str());
    p.hosts.hosts = {"n1:3", "n2:1"};
    QVERIFY(SlurmJob::script(p, run).find("--ntasks-per-node") == std::string::npos);
    // Every #SBATCH line before the first command, as sbatch reads them.
    const auto firstCommand = text.find("\nrun=");
    QVERIFY(text.rfind("#SBATCH", firstCommand) < firstCommand &&
            text.find("#SBATCH", firstCommand) == std::string::npos);
    QFile(QString::fromStdString(run + "/slurm.release")).open(QIODevice::WriteOnly);
    QProcess bash;
    bash.start(QStringLiteral("bash"), {QStringLiteral("-c"), QString::fromStdString(text)});
    QVERIFY(bash.waitForFinished(10000));
    QCOMPARE(bash.exitCode(), 0);
    QVERIFY(bash.readAllStandardOutput().contains("ptw: the run ended; releasing the allocation"));
    QVERIFY(errorOf([&] {
              SlurmJob::script(p, dir.path().toStdString() + "/a b");
            }).find("SLURM's #SBATCH lines cannot hold a path with blanks") != std::string::npos);
  }

  // Outside an allocation: the script is written, the wait says so, a pending job is waited
  // for, a running one attached to, and the job cancelled by name at the end.
  void outsideAnAllocationWaitsForTheJob() {
    QTemporaryDir run;
    answerSqueue("none\n77 PENDING \n77 RUNNING n[1-2]\n");
    LogObserver log;
    std::atomic<bool> stop{false};
    {
      SlurmJob job(slurmProfile(4), run.path().toStdString(), {});
      QVERIFY(!job.insideAllocation());
      QVERIFY(job.acquire(log, stop));
      QCOMPARE(job.id(), std::string("77"));
      QCOMPARE(job.rankHosts(), (std::vector<std::string>{"n1", "n1", "n2", "n2"}));
      QVERIFY(QFile::exists(run.filePath("job.sbatch")));
      QVERIFY(QFile::exists(run.filePath("slurm.alive")));
    }
    QVERIFY2(log.lines.join('\n').contains("submit it with: sbatch " + run.filePath("job.sbatch")),
             qPrintable(log.lines.join('\n')));
    QVERIFY(log.lines.join('\n').contains("SLURM job 77 (ptw-" + QDir(run.path()).dirName() + ") is PENDING"));
    QVERIFY(QFile::exists(run.filePath("slurm.release")));
    QFile cancels(m_bin.filePath("scancel.calls"));
    QVERIFY(cancels.open(QIODevice::ReadOnly));
    QCOMPARE(cancels.readAll().trimmed(),
             QStringLiteral("--name=ptw-%1 --user=%2").arg(QDir(run.path()).dirName()).arg(::getuid()).toUtf8());
  }

  // A stop while the job has not started ends the wait: nothing starts, the job is cancelled.
  void aStopEndsTheWait() {
    QTemporaryDir run;
    answerSqueue("none\n");
    LogObserver log;
    std::atomic<bool> stop{false};
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      stop = true;
    });
    bool acquired = true;
    {
      SlurmJob job(slurmProfile(2), run.path().toStdString(), {});
      acquired = job.acquire(log, stop);
    }
    stopper.join();
    QVERIFY(!acquired);
    QVERIFY(QFile::exists(m_bin.filePath("scancel.calls")));
  }

  // A job that ended before ptw attached, at once or after it was seen pending, is named, with
  // where its output is.
  void aJobThatEndedIsNamed_data() {
    QTest::addColumn<QByteArray>("answers");
    QTest::newRow("ended before it ran") << QByteArray("78 CANCELLED n1\n");
    QTest::newRow("pending, then cancelled") << QByteArray("78 PENDING \n78 CANCELLED n1\n");
  }
  void aJobThatEndedIsNamed() {
    QFETCH(QByteArray, answers);
    QTemporaryDir run;
    answerSqueue(answers.constData());
    LogObserver log;
    std::atomic<bool> stop{false};
    SlurmJob job(slurmProfile(2), run.path().toStdString(), {});
    const std::string error = errorOf([&] { job.acquire(log, stop); });
    QVERIFY2(error.find("SLURM job 78 (ptw-" + QDir(run.path()).dirName().toStdString() +
                        ") ended (CANCELLED) before ptw started its ranks in it; see " + run.path().toStdString() +
                        "/slurm-78.out") == 0,
             error.c_str());
  }
};

QTEST_GUILESS_MAIN(TestSlurmStarter)
#include "test_slurm_starter.moc"
