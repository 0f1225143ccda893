// SPDX-License-Identifier: GPL-3.0-or-later
// The supervisor's fault matrix: a killed rank, a stopped rank, a rank that fails at
// start, a user stop, a restart from checkpoint, a full metrics store. After each: the
// report names the rank and cause, no worker is left, and the run store holds every
// record the ranks sent.
#include <QElapsedTimer>
#include <QThread>
#include <QtTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include <torch/torch.h>

#include "common/error.h"
#include "common/shm_names.h"
#include "launch/launcher.h"
#include "launch/run_directory.h"
#include "launch/run_store.h"
#include "launch/supervisor.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

// Calls `onStep(rank, step)` for every step record (a group's last step); collects everything.
class Watcher : public LaunchObserver {
 public:
  std::function<void(int, std::int64_t)> onStep;
  std::function<void(int)> onStart;  ///< with the run's port, once the ranks are started
  std::vector<int> pids;
  std::vector<std::int64_t> lastStep = std::vector<std::int64_t>(8, 0);
  std::vector<std::string> logs;
  std::int64_t stepRecords = 0;
  std::vector<std::pair<int, std::int64_t>> restarts;
  std::vector<std::vector<StepRecord>> attempts{1};  ///< each attempt's step records, in arrival order
  std::vector<std::pair<int, qint64>> exitsAtMs;     ///< (rank, ms since the start) as the launcher reaped them
  std::vector<RankExit> exits;                       ///< each rank's end, as the launcher reaped them
  QElapsedTimer sinceStart;
  void onStarted(int port, const std::vector<int>& p) override {
    pids = p;
    sinceStart.start();
    if (onStart) onStart(port);
  }
  void onRestart(int attempt, std::int64_t step) override {
    restarts.emplace_back(attempt, step);
    attempts.emplace_back();
  }
  // A stored run's ranks send groups of steps (Note [Step groups]); below step 2048 each is
  // one step, its record whole.
  void onRecords(std::vector<Record>& batch) override {
    for (const auto& r : batch) {
      if (r.kind == Record::Kind::Group) groups.push_back(r);
      if (r.kind != Record::Kind::Step && r.kind != Record::Kind::Group) continue;
      const std::int64_t count = r.kind == Record::Kind::Group ? r.group.count : 1;
      stepRecords += count;
      if (count == 1) attempts.back().push_back(r.step);
      lastStep[static_cast<std::size_t>(r.step.rank)] = r.step.step;
      if (onStep) onStep(r.step.rank, r.step.step);
    }
  }
  std::vector<Record> groups;
  void onLog(int, const std::string& line) override { logs.push_back(line); }
  void onRankExit(const RankExit& e) override {
    exitsAtMs.emplace_back(e.rank, sinceStart.elapsed());
    exits.push_back(e);
  }
};

// Samples per second as ptw reports them, worked out from each attempt's step records: the
// sum over ranks of samples over time inside steps, leaving out each rank's first `warmup`
// steps of every attempt (Note [Warm-up steps]).
double throughputOf(const std::vector<std::vector<StepRecord>>& attempts, std::int64_t warmup) {
  std::map<int, std::pair<double, double>> sums;  // rank -> samples, seconds
  for (const auto& attempt : attempts) {
    std::map<int, std::int64_t> seen;
    for (const auto& s : attempt) {
      if (seen[s.rank]++ < warmup) continue;
      sums[s.rank].first += s.samplesPerS * s.stepMs / 1000;
      sums[s.rank].second += s.stepMs / 1000;
    }
  }
  double total = 0;
  for (const auto& [rank, v] : sums) total += v.first / v.second;
  return total;
}

// A run folder and its row in a fresh run store.
struct StoredRun {
  explicit StoredRun(const Profile& p)
      : store(runs.path().toStdString()),
        dir(createRunDirectory(runs.path().toStdString(), p)),
        id(store.beginRun(dir, p)),
        profile(p) {}
  SupervisorOptions options() { return SupervisorOptions(profile, dir, test::workerPath()).setStore(&store, id); }
  QString file(const char* name) const { return QString::fromStdString(dir + "/" + name); }
  QTemporaryDir runs;
  RunStore store;
  std::string dir;
  std::int64_t id;
  Profile profile;
};

// Local addresses (hex, as /proc/net/tcp writes them) of the TCP sockets of `pid`,
// listening or connected.
QStringList socketAddresses(int pid) {
  QSet<QString> inodes;
  QDir fds(QStringLiteral("/proc/%1/fd").arg(pid));
  for (const auto& fd : fds.entryList(QDir::System | QDir::NoDotAndDotDot)) {
    QString target = QFile::symLinkTarget(fds.filePath(fd));
    if (target.contains("socket:["))
      target = target.mid(target.indexOf('[') + 1).chopped(1);
    else {
      QByteArray link(256, 0);
      auto n = ::readlink(fds.filePath(fd).toLocal8Bit().constData(), link.data(), 255);
      if (n <= 0) continue;
      QString l = QString::fromLocal8Bit(link.constData(), static_cast<int>(n));
      if (!l.startsWith("socket:[")) continue;
      target = l.mid(8).chopped(1);
    }
    inodes.insert(target);
  }
  QStringList out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    QFile f(QString::fromLatin1(table));
    if (!f.open(QIODevice::ReadOnly)) continue;
    f.readLine();
    for (const auto& line : QString::fromLatin1(f.readAll()).split('\n', Qt::SkipEmptyParts)) {
      auto cols = line.simplified().split(' ');
      if (cols.size() > 9 && inodes.contains(cols[9])) out << cols[1];
    }
  }
  return out;
}

// Steps per rank of a run as the store presents it (later attempts win).
std::vector<std::int64_t> run0Steps(StoredRun& run) {
  std::vector<std::int64_t> perRank;
  std::vector<std::int64_t> last;
  for (const auto& s : run.store.steps(run.id)) {
    if (static_cast<std::size_t>(s.rank) >= perRank.size()) {
      perRank.resize(static_cast<std::size_t>(s.rank) + 1, 0);
      last.resize(perRank.size(), 0);
    }
    if (s.step != last[static_cast<std::size_t>(s.rank)] + 1) return {};  // a gap or a duplicate
    last[static_cast<std::size_t>(s.rank)] = s.step;
    ++perRank[static_cast<std::size_t>(s.rank)];
  }
  return perRank;
}

std::vector<torch::Tensor> loadParameters(const std::string& path) {
  std::vector<torch::Tensor> t;
  torch::load(t, path);
  return t;
}

}  // namespace

class TestSupervisor : public QObject {
  Q_OBJECT
 private slots:
  // Rank 0 removes the shared segment's name once every rank has mapped it. Here rank 1 is
  // frozen before it can, and killed while rank 0 waits for it at the barrier: the launcher
  // removes the name once both are gone, so /dev/shm keeps nothing of the run.
  void aRankKilledBeforeTheSegmentIsSharedLeavesNoName() {
    Profile p = test::endlessProfile(2);  // DDP, strategy.backend auto: shared memory
    StoredRun run(p);
    Supervisor launcher(run.options());
    Watcher w;
    QString name;
    bool appeared = false;
    w.onStart = [&](int port) {
      ::kill(w.pids[1], SIGSTOP);
      name = QStringLiteral("/dev/shm") + QString::fromStdString(sharedSegmentName(port, "ddp"));
      QElapsedTimer t;
      t.start();
      while (!(appeared = QFile::exists(name)) && t.elapsed() < 30000) QThread::msleep(20);
      ::kill(w.pids[1], SIGKILL);
    };
    RunReport r = launcher.run(w);
    QVERIFY2(appeared, qPrintable(name + " never appeared"));
    QCOMPARE(r.status, RunReport::Status::Failed);
    QCOMPARE(r.failedRank, 1);
    QVERIFY2(!QFile::exists(name), qPrintable(name + " is still there"));
    QVERIFY(!test::anyAlive(w.pids));
  }

  // However run() ends, no rank outlives it. An observer that throws (here once the shared
  // segment exists and rank 1, frozen, has not mapped it) ends run() with its exception;
  // the ranks are killed and reaped, and the segment's name removed.
  void anObserverThatThrowsLeavesNothingBehind() {
    QTemporaryDir dir;
    Launcher launcher(LaunchOptions(test::workerPath(), test::writeProfile(dir, test::endlessProfile(2)), 2));
    Watcher w;
    QString name;
    w.onStart = [&](int port) {
      ::kill(w.pids[1], SIGSTOP);
      name = QStringLiteral("/dev/shm") + QString::fromStdString(sharedSegmentName(port, "ddp"));
      QElapsedTimer t;
      t.start();
      while (!QFile::exists(name) && t.elapsed() < 30000) QThread::msleep(20);
      throw std::runtime_error("observer failed");
    };
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, launcher.run(w));
    QVERIFY(!name.isEmpty());
    QVERIFY2(!QFile::exists(name), qPrintable(name + " is still there"));
    for (int pid : w.pids)
      QVERIFY2(!QFileInfo::exists(QStringLiteral("/proc/%1").arg(pid)), "a rank is left running or unreaped");
  }

  // Every way ranks talk: DDP over shared memory (the default on CPU ranks) and over Gloo,
  // and the sync pool, whose coordinator sleeps through its workers' step (Note [Workers
  // step the pool]): 2 workers and the coordinator.
  void sigkillOneRankStopsTheOthers_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("backend");
    QTest::newRow("ddp, auto (shared memory)") << "ddp"
                                               << "auto";
    QTest::newRow("ddp, gloo") << "ddp"
                               << "gloo";
    QTest::newRow("pool sync") << "pool"
                               << "auto";
  }
  void sigkillOneRankStopsTheOthers() {
    QFETCH(QString, kind);
    QFETCH(QString, backend);
    Profile p = test::endlessProfile(2);
    p.strategy.kind = kind.toStdString();
    p.strategy.backend = backend.toStdString();
    StoredRun run(p);
    Supervisor launcher(run.options());
    Watcher w;
    bool killed = false;
    w.onStep = [&](int rank, std::int64_t step) {
      if (!killed && rank == 1 && step >= 50) {
        ::kill(w.pids[1], SIGKILL);
        killed = true;
      }
    };
    RunReport r = launcher.run(w);
    QVERIFY(killed);
    // Every rank ended, and is reported: an endless run's ranks end only when the launcher
    // stops them or rank 1's death breaks their collectives. How soon is a benchmark's to
    // measure on a loaded machine, not a test's.
    QCOMPARE(w.exits.size(), w.pids.size());
    for (const auto& e : w.exits)
      if (e.rank != 1) QVERIFY2(e.stoppedByPtw || e.exitCode != 0 || e.signal != 0, e.describe().c_str());
    QCOMPARE(r.status, RunReport::Status::Failed);
    QCOMPARE(r.failedRank, 1);
    QCOMPARE(r.failedExit.signal, SIGKILL);
    QVERIFY2(QString::fromStdString(r.message).contains("rank 1 failed with signal 9"), r.message.c_str());
    QVERIFY(!r.lastLines.empty());  // rank 1's own log lines
    QVERIFY(QString::fromStdString(r.lastLines.front()).contains("[rank 1]"));
    QVERIFY(!test::anyAlive(w.pids));
    QVERIFY(test::livePtwWorkers(::getpid()).empty());
    // Per-rank logs are on disk, and every record the ranks told of is in the store (a rank
    // killed between writing its steps and telling of them leaves more there).
    QVERIFY(QFile::exists(run.file("rank0.log")));
    QVERIFY(QFile::exists(run.file("rank1.log")));
    QVERIFY(w.stepRecords > 0);
    QVERIFY(run.store.stepCount(run.id) >= w.stepRecords);
    QCOMPARE(launcher.attempts(), 1);  // max_restarts 0: no restart
  }

  // A local run uses loopback only: the ranks meet through a FileStore (no store socket),
  // and Gloo's sockets are bound to 127.0.0.1. A worker holds none of the launcher's files.
  void localRunListensOnLoopbackOnly() {
    Profile p = test::endlessProfile(2);
    p.strategy.backend = "gloo";
    StoredRun run(p);
    Supervisor supervisor(run.options());
    Watcher w;
    QStringList seen, inherited;
    bool looked = false;
    w.onStep = [&](int, std::int64_t step) {
      if (looked || step < 20) return;
      looked = true;
      for (int pid : w.pids) {
        seen += socketAddresses(pid);
        // Nothing of the launcher's is open in a worker: not the logs of the ranks started
        // before it, not the store's database.
        QDir fds(QStringLiteral("/proc/%1/fd").arg(pid));
        for (const auto& fd : fds.entryList(QDir::System | QDir::NoDotAndDotDot)) {
          const QString target = QFile::symLinkTarget(fds.filePath(fd));
          if (target.endsWith(".log") || target.contains("runs.sqlite")) inherited << target;
        }
      }
      supervisor.requestStop();
    };
    QCOMPARE(supervisor.run(w).status, RunReport::Status::Stopped);
    QVERIFY(looked);
    QVERIFY2(inherited.isEmpty(), qPrintable(inherited.join(", ")));
    QVERIFY2(!seen.isEmpty(), "expected Gloo's sockets");  // the check below is not vacuous
    for (const auto& a : seen)
      QVERIFY2(a.startsWith("0100007F:") || a.startsWith("00000000000000000000000001000000:"),
               qPrintable("a socket on a non-loopback address: " + a));
  }

  void sigstopOneRankIsReportedStalled() {
    Profile p = test::endlessProfile(2);
    p.run.timeoutS = 5;  // also bounds the start: two ranks can take seconds to meet
    StoredRun run(p);
    Supervisor launcher(run.options());
    Watcher w;
    bool stopped = false;
    w.onStep = [&](int rank, std::int64_t step) {
      if (!stopped && rank == 0 && step >= 30) {
        ::kill(w.pids[0], SIGSTOP);
        stopped = true;
      }
    };
    QElapsedTimer t;
    t.start();
    RunReport r = launcher.run(w);
    QVERIFY(stopped);
    QCOMPARE(r.status, RunReport::Status::Failed);
    QCOMPARE(r.failedRank, 0);
    QVERIFY(r.stalled);
    QVERIFY2(QString::fromStdString(r.message).contains("rank 0 stalled"), r.message.c_str());
    QVERIFY2(t.elapsed() < 20000, "stall must be detected near the 5 s timeout");
    QVERIFY(!test::anyAlive(w.pids));
    QVERIFY(w.stepRecords > 0);
    QVERIFY(run.store.stepCount(run.id) >= w.stepRecords);  // as after a SIGKILL
  }

  // Rank 1 stops in its own work after step 30, alive and heartbeating (the worker's
  // --fault hang-at-step), while ranks 0 and 2 wait for it in step 31's collective. The launcher
  // names rank 1 and that collective, not the first rank at step 30 (Note [Who stalled]), and does so before
  // the ranks' own wait limit would fail rank 0 or 2 with an exit code.
  void aHungRankIsNamedNotTheRanksWaitingForIt_data() { sigkillOneRankStopsTheOthers_data(); }
  void aHungRankIsNamedNotTheRanksWaitingForIt() {
    QFETCH(QString, backend);
    Profile p = test::endlessProfile(3);
    p.strategy.backend = backend.toStdString();
    // The timeout also bounds the start (from launch to every rank's first step): three
    // Gloo ranks can take several seconds to meet on a busy machine.
    p.run.timeoutS = 8;
    StoredRun run(p);
    Supervisor launcher(run.options().setWorkerArgs({"--fault=hang-at-step:1:30"}));
    Watcher w;
    RunReport r = launcher.run(w);
    QVERIFY2(r.status == RunReport::Status::Failed && r.failedRank == 1 && r.stalled, r.message.c_str());
    const QString message = QString::fromStdString(r.message);
    QVERIFY2(message.contains("rank 1 stopped making progress: stuck in its own work after step 30"),
             r.message.c_str());
    // The collective counts say exactly where (Note [Collective positions]).
    QVERIFY2(message.contains(
                 QRegularExpression("; rank 1 has not entered all-reduce #\\d+; ranks 0, 2 are waiting inside it")),
             r.message.c_str());
    QVERIFY(!test::anyAlive(w.pids));
  }

  // With run.metrics off no step record is sent, but heartbeats still carry each rank's
  // step: a run longer than its timeout is not taken for stalled (10 s against 4 s; the
  // timeout counts from the start, so it leaves the ranks time to load).
  void aRunWithMetricsOffIsNotTakenForStalled() {
    Profile p = test::endlessProfile(2);
    p.run.metrics = false;
    p.run.timeoutS = 4;
    StoredRun run(p);
    Supervisor launcher(run.options());
    Watcher w;
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      launcher.requestStop();
    });
    RunReport r = launcher.run(w);
    stopper.join();
    QVERIFY2(r.status == RunReport::Status::Stopped, r.message.c_str());
    QCOMPARE(r.failedRank, -1);
    QCOMPARE(w.stepRecords, std::int64_t(0));
  }

  // Someone runs kill on one rank (not on ptw): the ranks stop together, and the run is
  // reported stopped, naming that rank; not finished, and not a failure to restart.
  void aRankStoppedFromOutsideStopsTheRunAndIsNamed() {
    Profile p = test::endlessProfile(2);
    p.run.maxRestarts = 3;
    StoredRun run(p);
    Supervisor launcher(run.options());
    Watcher w;
    bool sent = false;
    w.onStep = [&](int rank, std::int64_t step) {
      if (sent || rank != 1 || step < 20) return;
      // From another process (a shell): the test's own signal would look like the launcher's.
      sent = std::system(("kill -TERM " + std::to_string(w.pids[1])).c_str()) == 0;
    };
    RunReport r = launcher.run(w);
    QVERIFY(sent);
    QVERIFY2(r.status == RunReport::Status::Stopped, r.message.c_str());
    QCOMPARE(r.failedRank, -1);
    QVERIFY2(QString::fromStdString(r.message).contains("rank 1 was sent a stop signal from outside ptw"),
             r.message.c_str());
    QCOMPARE(launcher.attempts(), 1);
    QCOMPARE(r.exits.at(1).exitCode, kWorkerStoppedFromOutside);
    QVERIFY(!r.exits.at(1).failed());
    QCOMPARE(r.exits.at(0).exitCode, 0);
    QVERIFY(!test::anyAlive(w.pids));
  }

  void rankThatFailsAtStart() {
    StoredRun run(test::endlessProfile(3));
    Supervisor launcher(run.options().setWorkerArgs({"--fault=throw-at-start:1"}));
    Watcher w;
    RunReport r = launcher.run(w);
    QCOMPARE(r.status, RunReport::Status::Failed);
    QCOMPARE(r.failedRank, 1);
    QCOMPARE(r.failedExit.exitCode, 1);
    QCOMPARE(r.failedExit.signal, 0);
    QVERIFY(!r.lastLines.empty());
    QVERIFY2(QString::fromStdString(r.lastLines.back()).contains("injected fault"), r.lastLines.back().c_str());
    QVERIFY(!test::anyAlive(w.pids));
    QCOMPARE(run.store.stepCount(run.id), w.stepRecords);
  }

  void userStopIsGracefulAndAgreed_data() { sigkillOneRankStopsTheOthers_data(); }
  void userStopIsGracefulAndAgreed() {
    QFETCH(QString, kind);
    QFETCH(QString, backend);
    Profile p = test::endlessProfile(2);
    p.strategy.kind = kind.toStdString();
    p.strategy.backend = backend.toStdString();
    p.run.maxRestarts = 3;  // a user stop is not a failure: never restarted
    StoredRun run(p);
    Supervisor launcher(run.options());
    Watcher w;
    w.onStep = [&](int, std::int64_t step) {
      if (step == 40) launcher.requestStop();
    };
    RunReport r = launcher.run(w);
    QCOMPARE(r.status, RunReport::Status::Stopped);
    for (const auto& e : r.exits) QCOMPARE(e.exitCode, 0);  // both left cleanly, no SIGKILL
    QVERIFY(w.lastStep[0] >= 40);
    QCOMPARE(w.pids.size(), std::size_t(kind == "pool" ? 3 : 2));
    for (std::size_t rank = 1; rank < w.pids.size(); ++rank)
      QCOMPARE(w.lastStep[rank], w.lastStep[0]);  // the stop wish travels with the gradients
    QVERIFY(QFile::exists(run.file("rank0.final.pt")));
    QVERIFY(QFile::exists(run.file("checkpoint.pt")));  // the stopped run can be resumed
    QCOMPARE(checkpointStep(run.dir), w.lastStep[0]);
    QCOMPARE(launcher.attempts(), 1);
    QCOMPARE(run.store.stepCount(run.id), w.stepRecords);
  }

  // Note [Restarts]: a run resumed from the user's checkpoint that fails before it writes
  // one of its own restarts from the user's checkpoint, not from fresh weights: the restart's
  // first step is the one after that checkpoint's.
  void aRestartBeforeTheFirstCheckpointResumesTheUsersCheckpoint() {
    Profile p = defaultProfile();
    p.hyper.maxSteps = 10;  // a checkpoint at the end only
    StoredRun first(p);
    Watcher quiet;
    QCOMPARE(Supervisor(first.options()).run(quiet).status, RunReport::Status::Finished);
    QCOMPARE(checkpointStep(first.dir), std::int64_t(10));

    Profile resumed = p;
    resumed.hyper.maxSteps = 30;
    resumed.run.resumeFrom = first.dir + "/checkpoint.pt";
    resumed.run.maxRestarts = 1;
    StoredRun run(resumed);
    Supervisor supervisor(run.options().setWorkerArgs({"--fault=kill-at-step:1:12"}));
    Watcher w;
    const RunReport r = supervisor.run(w);
    QVERIFY2(r.status == RunReport::Status::Finished, r.message.c_str());
    QCOMPARE(supervisor.attempts(), 2);
    QCOMPARE(checkpointStep(run.dir), std::int64_t(30));
    QCOMPARE(w.attempts.size(), std::size_t(2));
    QVERIFY(!w.attempts[0].empty() && !w.attempts[1].empty());
    QCOMPARE(w.attempts[0].front().step, std::int64_t(11));
    QCOMPARE(w.attempts[1].front().step, std::int64_t(11));  // from fresh weights: 1
  }

  // Rank 1 is killed at step 12 of the first attempt; with max_restarts 1 the run restarts
  // from the checkpoint at step 10 and ends with the parameters of a run that never failed.
  void restartFromCheckpointMatchesAnUninterruptedRun() {
    Profile p = defaultProfile();
    p.hyper.maxSteps = 30;
    p.hyper.momentum = 0.9;
    p.run.checkpointEvery = 5;
    StoredRun clean(p);
    Watcher quiet;
    QCOMPARE(Supervisor(clean.options()).run(quiet).status, RunReport::Status::Finished);

    p.run.maxRestarts = 1;
    StoredRun faulty(p);
    Supervisor supervisor(faulty.options().setWorkerArgs({"--fault=kill-at-step:1:12"}));
    Watcher w;
    RunReport r = supervisor.run(w);
    QVERIFY2(r.status == RunReport::Status::Finished, r.message.c_str());
    QCOMPARE(supervisor.attempts(), 2);
    QCOMPARE(w.restarts.size(), std::size_t(1));
    QCOMPARE(w.restarts[0], std::make_pair(1, std::int64_t(10)));
    QVERIFY(test::livePtwWorkers(::getpid()).empty());

    auto expected = loadParameters(clean.dir + "/rank0.final.pt");
    auto got = loadParameters(faulty.dir + "/rank0.final.pt");
    QVERIFY(!expected.empty());
    QCOMPARE(got.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i)
      QVERIFY2(torch::allclose(expected[i], got[i], 0, 1e-6), "restarted run ended with other parameters");
    // The store holds both attempts; the run's series is steps 1..30 of each rank, the
    // replayed steps 11-12 from the second attempt.
    QCOMPARE(run0Steps(faulty), (std::vector<std::int64_t>{30, 30}));
    QCOMPARE(faulty.store.stepCount(faulty.id), w.stepRecords);
    // Throughput leaves out each rank's warm-up steps of both attempts (3 of 30 steps).
    QCOMPARE(w.attempts.size(), std::size_t(2));
    const double counted = throughputOf(w.attempts, 3);
    QVERIFY(counted > 0);
    QVERIFY2(std::abs(supervisor.throughput().total() - counted) <= 1e-9 * counted,
             qPrintable(QString("%1 vs %2").arg(supervisor.throughput().total()).arg(counted)));
    std::vector<StepRecord> asOne;  // the same records counted as one attempt: not what was reported
    for (const auto& a : w.attempts) asOne.insert(asOne.end(), a.begin(), a.end());
    QVERIFY(std::abs(throughputOf({asOne}, 3) - counted) > 1e-9 * counted);
  }

  // In a stored run the ranks write their own step records to the run's step file and send
  // groups of them (Note [Ranks write their steps], [Step groups]): the store holds every
  // step of every rank once, and the groups tile each rank's steps window by window, each
  // one the exact sums, extremes and last record of the stored steps it covers. Throughput
  // from the groups is what the stored records give.
  void ranksWriteTheirStepsAndSendGroupsOfThem() {
    Profile p = defaultProfile();  // 2 DDP ranks over shared memory
    p.hyper.maxSteps = 20000;      // windows of up to 16 steps
    StoredRun run(p);
    Supervisor supervisor(run.options());
    Watcher w;
    RunReport r = supervisor.run(w);
    QVERIFY2(r.status == RunReport::Status::Finished, r.message.c_str());
    QCOMPARE(run0Steps(run), (std::vector<std::int64_t>{20000, 20000}));
    std::map<std::pair<int, std::int64_t>, StepRecord> stored;
    std::vector<std::vector<StepRecord>> byRank(2);
    for (const auto& s : run.store.steps(run.id)) {
      stored[{s.rank, s.step}] = s;
      byRank[static_cast<std::size_t>(s.rank)].push_back(s);
    }
    QVERIFY(w.attempts[0].size() < 2 * 2048 + 100);  // past step 2048 nothing comes one step at a time
    std::vector<std::int64_t> next = {1, 1};
    std::int64_t largest = 0;
    for (const Record& g : w.groups) {
      const int rank = g.step.rank;
      QVERIFY(rank == 0 || rank == 1);
      auto& expectFirst = next[static_cast<std::size_t>(rank)];
      QCOMPARE(g.group.first, expectFirst);  // no gap, no overlap
      const std::int64_t span = stepGroupSpan(g.group.first);
      QVERIFY(g.step.step < g.group.first - g.group.first % span + span);  // within one window
      QCOMPARE(g.group.count, g.step.step - g.group.first + 1);
      StepGroup sums;
      for (std::int64_t s = g.group.first; s <= g.step.step; ++s) sums.add(stored.at({rank, s}));
      QVERIFY(g.group == sums);
      QVERIFY(g.step == stored.at({rank, g.step.step}));
      expectFirst = g.step.step + 1;
      largest = std::max(largest, g.group.count);
    }
    QCOMPARE(next, (std::vector<std::int64_t>{20001, 20001}));
    QVERIFY2(largest >= 8, qPrintable(QString::number(largest)));
    QCOMPARE(w.stepRecords, std::int64_t(40000));
    ThroughputMeter fromRecords(p);
    for (const auto& rank : byRank)
      for (const auto& s : rank) fromRecords.add(s);
    const double total = fromRecords.total();
    QVERIFY2(std::abs(supervisor.throughput().total() - total) <= 1e-9 * total,
             qPrintable(QString("%1 vs %2").arg(supervisor.throughput().total()).arg(total)));
    for (int k = 0; k < 2; ++k) QCOMPARE(supervisor.throughput().split(k).stepMs, fromRecords.split(k).stepMs);
  }

  // bench_monitoring's within-run measure (Note [Metrics in phases]): with
  // --metrics-phases each rank stores the steps of the even phases of the clock and none
  // of the odd ones, and notes where each phase began, 300 ms in, on its own steps. A value
  // that is not MS:FILE stops the ranks at start, naming the switch.
  void metricsInPhasesStoreEveryOtherPhase() {
    StoredRun run(test::endlessProfile(2));
    const QString notes = run.runs.filePath("phases");
    Supervisor launcher(run.options().setWorkerArgs({"--metrics-phases=1000:" + notes.toStdString()}));
    Watcher w;
    std::thread stopper;
    w.onStart = [&](int) {
      stopper = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(4500));
        launcher.requestStop();
      });
    };
    RunReport r = launcher.run(w);
    if (stopper.joinable()) stopper.join();
    QVERIFY2(r.status == RunReport::Status::Stopped, r.message.c_str());
    std::vector<std::set<std::int64_t>> stored(2);
    for (const auto& s : run.store.steps(run.id)) stored[static_cast<std::size_t>(s.rank)].insert(s.step);
    for (int rank : {0, 1}) {
      QFile f(notes + ".rank" + QString::number(rank));
      QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(f.fileName()));
      struct Start {
        long long phase;
        std::int64_t step;
        double at;
      };
      std::vector<Start> starts;
      std::map<long long, std::pair<std::int64_t, double>> settled;
      for (const QByteArray& line : f.readAll().split('\n')) {
        if (line.isEmpty()) continue;
        const auto words = line.split(' ');
        QCOMPARE(words.size(), qsizetype(4));
        const Start n{words[1].toLongLong(), words[2].toLongLong(), words[3].toDouble()};
        if (words[0] == "start")
          starts.push_back(n);
        else if (words[0] == "settled")
          settled[n.phase] = {n.step, n.at};
        else
          QFAIL(line.constData());
      }
      QVERIFY2(starts.size() >= 2, qPrintable(QString::number(starts.size())));  // a whole phase at least
      const auto& steps = stored[static_cast<std::size_t>(rank)];
      QVERIFY(!steps.empty());  // a whole phase and the next: one of them sends
      const std::int64_t last = *steps.rbegin();
      for (std::size_t i = 0; i < starts.size(); ++i) {
        const Start& a = starts[i];
        QVERIFY2(a.at >= static_cast<double>(a.phase) && a.at < static_cast<double>(a.phase) + 0.1,
                 qPrintable(QString("phase %1 noted at %2 s").arg(a.phase).arg(a.at, 0, 'f', 6)));
        if (i > 0) QCOMPARE(a.phase, starts[i - 1].phase + 1);
        if (i + 1 < starts.size()) QVERIFY2(settled.count(a.phase), qPrintable(QString::number(a.phase)));
        if (auto n = settled.find(a.phase); n != settled.end()) {
          QVERIFY(n->second.first >= a.step && n->second.second >= a.at + 0.3);
          if (i + 1 < starts.size()) QVERIFY(n->second.first <= starts[i + 1].step);
        }
        // Steps [a.step, the next phase's first): all stored in an even phase, none in an odd one.
        const std::int64_t end = i + 1 < starts.size() ? starts[i + 1].step : last + 1;
        const auto inPhase =
            static_cast<std::int64_t>(std::distance(steps.lower_bound(a.step), steps.lower_bound(end)));
        QCOMPARE(inPhase, a.phase % 2 == 0 ? end - a.step : 0);
      }
      // Before the first whole phase, the one the rank started in.
      const auto before = static_cast<std::int64_t>(std::distance(steps.begin(), steps.lower_bound(starts[0].step)));
      QCOMPARE(before, (starts[0].phase - 1) % 2 == 0 ? starts[0].step - 1 : 0);
    }
    QCOMPARE(run.store.stepCount(run.id), w.stepRecords);

    StoredRun bad(test::endlessProfile(2));
    Supervisor refused(bad.options().setWorkerArgs({"--metrics-phases=50"}));
    Watcher w2;
    r = refused.run(w2);
    QCOMPARE(r.status, RunReport::Status::Failed);
    QVERIFY(!r.lastLines.empty());
    QVERIFY2(QString::fromStdString(r.lastLines.back()).contains("--metrics-phases: expected MS:FILE with MS >= 1000"),
             r.lastLines.back().c_str());
  }

  // A metrics store that fills up stops the run with the reason, instead of losing records.
  void fullStoreStopsTheRunWithTheReason() {
    QTemporaryDir runs;
    RunStore store(runs.path().toStdString(), RunStoreOptions().setSizeLimitKib(768));  // 12 pages of 64 KiB
    Profile p = test::endlessProfile(2);
    // Gloo's slower steps: the store fills over several commits (over shared memory one
    // commit's records can be more than fits, and then nothing is kept to check).
    p.strategy.backend = "gloo";
    p.run.maxRestarts = 2;  // a full disk is not restarted into
    std::string dir = createRunDirectory(runs.path().toStdString(), p);
    auto id = store.beginRun(dir, p);
    Supervisor supervisor(SupervisorOptions(p, dir, test::workerPath()).setStore(&store, id));
    Watcher w;
    QElapsedTimer t;
    t.start();
    RunReport r = supervisor.run(w);
    QCOMPARE(r.status, RunReport::Status::Failed);
    QCOMPARE(supervisor.attempts(), 1);
    // The ranks write their steps (Note [Ranks write their steps]): the one that found the
    // disk full is named, with the file and the advice, not a rank whose collective broke.
    const QString message = QString::fromStdString(r.message);
    QVERIFY2(message.contains(
                 QRegularExpression("^rank [01] could not write the run's metrics: run store .*runs.blocks/" +
                                    QString::number(id) + ": writing metrics failed \\(No space left on device\\)")),
             r.message.c_str());
    QVERIFY2(message.contains("is full") && message.contains("free space"), r.message.c_str());
    QCOMPARE(r.failedExit.exitCode, kWorkerCannotStoreMetrics);
    QVERIFY(t.elapsed() < 60000);
    QVERIFY(!test::anyAlive(w.pids));
    QVERIFY(store.stepCount(id) > 0);  // what fitted is kept
  }

  void recordPipeKeepsRecordsApartFromStrayOutput() {
    // A stand-in worker: a library's stray stdout, two good frames, then bytes that are not
    // a frame. The launcher keeps the records, logs the stray line, names the bad data once.
    QTemporaryDir dir;
    std::string frames;
    Record r;
    r.step.rank = 0;
    r.step.loss = 0.5;
    for (std::int64_t step : {1, 2}) {
      r.step.step = step;
      encodeRecord(r, frames);
    }
    frames += std::string(kRecordFrameBytes, 'x');
    QFile bin(dir.filePath("frames.bin"));
    QVERIFY(bin.open(QIODevice::WriteOnly));
    bin.write(frames.data(), static_cast<qint64>(frames.size()));
    bin.close();
    const QString script = dir.filePath("fake-worker.sh");
    QFile sh(script);
    QVERIFY(sh.open(QIODevice::WriteOnly));
    sh.write(QStringLiteral("#!/bin/sh\necho 'a library says hello'\ncat '%1' >&3\n").arg(bin.fileName()).toUtf8());
    sh.close();
    sh.setPermissions(sh.permissions() | QFileDevice::ExeOwner);
    Watcher w;
    Launcher launcher(LaunchOptions(script.toStdString(), test::writeProfile(dir, core::defaultProfile()), 1));
    const RunReport report = launcher.run(w);
    QVERIFY2(report.status == RunReport::Status::Finished, report.message.c_str());
    QCOMPARE(w.stepRecords, std::int64_t(2));
    QCOMPARE(w.lastStep[0], std::int64_t(2));
    auto logged = [&](const char* text) {
      return std::count_if(w.logs.begin(), w.logs.end(),
                           [&](const std::string& l) { return l.find(text) != std::string::npos; });
    };
    QCOMPARE(logged("a library says hello"), 1L);
    QCOMPARE(logged("malformed data on this rank's record pipe"), 1L);
  }

  void badWorkerPathAndTakenPortStartNothing() {
    QTemporaryDir dir;
    std::string profile = test::writeProfile(dir, core::defaultProfile());
    Watcher w;
    {
      Launcher launcher(LaunchOptions("/nonexistent/ptw-worker", profile, 2));
      QVERIFY_THROWS_EXCEPTION(Error, launcher.run(w));
    }
    const int port = Launcher::pickFreePort();
    test::TakenPort taken(port);
    QVERIFY(taken.ok());
    LaunchOptions lo(test::workerPath(), profile, 2);
    lo.setPort(port);
    Launcher launcher(lo);
    try {
      launcher.run(w);
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains(QStringLiteral("port %1 on 127.0.0.1 is already in use").arg(port)),
               e.what());
    }
    QVERIFY(w.pids.empty());
  }
};

QTEST_APPLESS_MAIN(TestSupervisor)
#include "test_supervisor.moc"
