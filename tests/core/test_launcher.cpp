// The launcher's fault handling: a killed rank, a stopped rank, a rank that fails at
// start, a user stop. After each: the report names the rank and cause, and no worker is left.
#include <QElapsedTimer>
#include <QtTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <functional>

#include "common/error.h"
#include "launch/launcher.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

// Calls `onStep(rank, step, pids)` for every step record; collects everything.
class Watcher : public LaunchObserver {
 public:
  std::function<void(int, std::int64_t)> onStep;
  std::vector<int> pids;
  std::vector<std::int64_t> lastStep = std::vector<std::int64_t>(8, 0);
  std::vector<std::string> logs;
  void onStarted(int, const std::vector<int>& p) override { pids = p; }
  void onRecords(const std::vector<Record>& batch) override {
    for (const auto& r : batch) {
      if (r.kind != Record::Kind::Step) continue;
      lastStep[static_cast<std::size_t>(r.step.rank)] = r.step.step;
      if (onStep) onStep(r.step.rank, r.step.step);
    }
  }
  void onLog(int, const std::string& line) override { logs.push_back(line); }
};

}  // namespace

class TestLauncher : public QObject {
  Q_OBJECT
 private slots:
  void sigkillOneRankStopsTheOthers() {
    QTemporaryDir dir;
    LaunchOptions lo(test::workerPath(), test::writeProfile(dir, test::endlessProfile(2)), 2);
    lo.setOutDir(dir.path().toStdString());
    Launcher launcher(lo);
    Watcher w;
    QElapsedTimer sinceKill;
    bool killed = false;
    w.onStep = [&](int rank, std::int64_t step) {
      if (!killed && rank == 1 && step >= 50) {
        ::kill(w.pids[1], SIGKILL);
        sinceKill.start();
        killed = true;
      }
    };
    RunReport r = launcher.run(w);
    QVERIFY(killed);
    QVERIFY2(sinceKill.elapsed() < 5000, qPrintable(QString::number(sinceKill.elapsed())));
    QCOMPARE(r.status, RunReport::Status::Failed);
    QCOMPARE(r.failedRank, 1);
    QCOMPARE(r.failedExit.signal, SIGKILL);
    QVERIFY2(QString::fromStdString(r.message).contains("rank 1 failed with signal 9"), r.message.c_str());
    QVERIFY(!r.lastLines.empty());  // rank 1's own log lines
    QVERIFY(QString::fromStdString(r.lastLines.front()).contains("[rank 1]"));
    QVERIFY(!test::anyAlive(w.pids));
    QVERIFY(test::livePtwWorkers(::getpid()).empty());
    // Per-rank logs are on disk.
    QVERIFY(QFile::exists(dir.filePath("rank0.log")));
    QVERIFY(QFile::exists(dir.filePath("rank1.log")));
  }

  void sigstopOneRankIsReportedStalled() {
    QTemporaryDir dir;
    Profile p = test::endlessProfile(2);
    LaunchOptions lo(test::workerPath(), test::writeProfile(dir, p), 2);
    lo.setStallTimeoutS(3);
    Launcher launcher(lo);
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
    QVERIFY2(t.elapsed() < 20000, "stall must be detected near the 3 s timeout");
    QVERIFY(!test::anyAlive(w.pids));
  }

  void rankThatFailsAtStart() {
    QTemporaryDir dir;
    qputenv("PTW_FAULT", "throw-at-start:1");
    LaunchOptions lo(test::workerPath(), test::writeProfile(dir, test::endlessProfile(3)), 3);
    Launcher launcher(lo);
    Watcher w;
    RunReport r = launcher.run(w);
    qunsetenv("PTW_FAULT");
    QCOMPARE(r.status, RunReport::Status::Failed);
    QCOMPARE(r.failedRank, 1);
    QCOMPARE(r.failedExit.exitCode, 1);
    QCOMPARE(r.failedExit.signal, 0);
    QVERIFY(!r.lastLines.empty());
    QVERIFY2(QString::fromStdString(r.lastLines.back()).contains("injected fault"), r.lastLines.back().c_str());
    QVERIFY(!test::anyAlive(w.pids));
  }

  void userStopIsGracefulAndAgreed() {
    QTemporaryDir dir;
    LaunchOptions lo(test::workerPath(), test::writeProfile(dir, test::endlessProfile(2)), 2);
    lo.setOutDir(dir.path().toStdString());
    Launcher launcher(lo);
    Watcher w;
    w.onStep = [&](int, std::int64_t step) {
      if (step == 40) launcher.requestStop();
    };
    RunReport r = launcher.run(w);
    QCOMPARE(r.status, RunReport::Status::Stopped);
    for (const auto& e : r.exits) QCOMPARE(e.exitCode, 0);  // both left cleanly, no SIGKILL
    QVERIFY(w.lastStep[0] >= 40);
    QCOMPARE(w.lastStep[0], w.lastStep[1]);  // the stop wish travels with the gradients
    QVERIFY(QFile::exists(dir.filePath("rank0.final.pt")));
  }

  void badWorkerPathAndTakenPortStartNothing() {
    QTemporaryDir dir;
    std::string profile = test::writeProfile(dir, core::defaultProfile());
    Watcher w;
    {
      Launcher launcher(LaunchOptions("/nonexistent/ptw-worker", profile, 2));
      QVERIFY_THROWS_EXCEPTION(Error, launcher.run(w));
    }
    int port = Launcher::pickFreePort();
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    QCOMPARE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    QCOMPARE(::listen(fd, 1), 0);
    LaunchOptions lo(test::workerPath(), profile, 2);
    lo.setPort(port);
    Launcher launcher(lo);
    try {
      launcher.run(w);
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains(QStringLiteral("port %1 on 127.0.0.1 is already in use").arg(port)), e.what());
    }
    ::close(fd);
    QVERIFY(w.pids.empty());
  }
};

QTEST_APPLESS_MAIN(TestLauncher)
#include "test_launcher.moc"
