// SPDX-License-Identifier: GPL-3.0-or-later
// RunController: runs the supervisor off the GUI thread and hands what it hears to the
// window in batches. The supervisor's thread fills a mutex-guarded buffer; the window
// drains it from a timer, so the GUI never sees one signal per record. The run itself is a
// core::RunSession (Note [One run lifecycle]): the records and the verdict go to the run
// store, where the history reads them back.
#pragma once

#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/profile.h"
#include "common/record.h"
#include "launch/launcher.h"

namespace ptw::core {
class FollowSource;
struct FollowSourceOptions;
class RunSession;
}  // namespace ptw::core

namespace ptw::ui {

class RunController : public QObject {
  Q_OBJECT
 public:
  explicit RunController(QObject* parent = nullptr);
  ~RunController() override;

  /// Creates the run folder and its row in the store, and starts the ranks. Returns false
  /// with `error` set when nothing could be started; the run is then not running.
  bool start(const core::Profile& profile, const QString& runsDir, QString* error);
  /// Graceful stop; of an attached run, asked of its supervisor through its run folder (over
  /// ssh for HOST:DIR), as `ptw stop` asks.
  void stop();
  /// Asks the running run for every rank's stacks (core::RunSession::requestStacks), written
  /// to a stacks file in its folder within its stacks budget. False when no run is going on.
  bool requestStacks();
  /// Follows a run that goes on without this window (core::FollowSource, Note [Reattaching]):
  /// what is stored, then live; the records come as a run's of its own do (take()). A stream
  /// that breaks is said by `connection` and attached again. `attachFailed` says why the first
  /// one could not start; `finished` comes when the run ends.
  void attach(const core::FollowSourceOptions& options);
  /// Stops following; the run goes on.
  void detach();
  /// True while a run is followed or runs; isAttached(): followed, not run here.
  bool isRunning() const { return m_running; }
  bool isAttached() const { return m_running && m_source != nullptr; }
  /// Appended to every worker's command line of the runs started after this (tests: --fault=SPEC).
  void setWorkerArgs(std::vector<std::string> args) { m_workerArgs = std::move(args); }
  /// The run store's size limit for the runs started after this (tests: a full disk); 0: none.
  void setStoreLimitKib(long long kib) { m_storeLimitKib = kib; }
  QString runDirectory() const { return m_runDir; }
  qint64 runId() const { return m_runId; }
  /// The stacks file the last run's last attempt wrote (a stall, a timeout, or on request);
  /// empty when none, and while a run goes on.
  QString stacksFile() const { return m_stacksFile; }

  /// A restart or a rank's exit, at its place among the records: it comes before the record
  /// of index `index`, counting across the chunks. A restart means: drop what was drawn past
  /// `step`, then apply the records that follow.
  struct Event {
    std::size_t index = 0;
    bool restart = false;
    std::int64_t step = 0;  ///< a restart's checkpoint step
    int rank = -1;          ///< an exit's rank, how it ended, and whether that is a failure
    QString how;
    bool failed = false;
    bool stopped = false;  ///< ptw had told the rank to stop (RankExit::stoppedByPtw)
  };
  /// What arrived since the last call, in arrival order: the records are the launcher's
  /// batches as they came (handed over without a copy); restarts and exits keep their order
  /// among them, so that a restart never blanks the exits of the attempt after it, however
  /// the window's takes fall.
  struct Batch {
    std::vector<std::vector<core::Record>> chunks;
    std::size_t records = 0;                        ///< in all chunks
    std::vector<Event> events;                      ///< in arrival order
    std::vector<std::pair<int, std::string>> logs;  ///< (rank, line); rank -1: ptw itself
  };
  /// Swaps what arrived since the last call into `batch`. Its previous chunks go back to the
  /// supervisor's thread, emptied, to carry later records: fresh vectors would cost a page
  /// fault every 4 KiB, and copying every record into one vector would take a sizeable share
  /// of the window's time at the shared-memory rate.
  void take(Batch& batch);

 signals:
  void started(int port);
  /// Each rank's host, learnt once the run is under way: a SLURM job's nodes (LaunchObserver::onHosts).
  void hosts(const QStringList& rankHosts);
  /// Every process has ended and the run's step records are being packed into chunks
  /// (Note [Step blocks]): `done` of `total`, from 0, at most every 100 ms
  /// and at the end.
  void storing(qint64 done, qint64 total);
  /// The run ended; `status` is finished, failed or stopped.
  void finished(const QString& status, const QString& message, int failedRank, const QStringList& lastLines);
  /// An attached run's stream: "attached" (with the run's id known), or "detached" and why.
  void connection(const QString& state, const QString& message);
  void attachFailed(const QString& message);
  /// An attached run's records came while none were waiting to be taken (Note [Attached
  /// records drawn as they come] in main_window.cpp); once until the next take().
  void recordsArrived();
  /// A stop of an attached run could not be asked: why.
  void stopFailed(const QString& message);

 private:
  class Observer;
  class Follower;
  std::unique_ptr<core::RunSession> m_session;
  std::unique_ptr<core::FollowSource> m_source;
  std::vector<std::string> m_workerArgs;
  long long m_storeLimitKib = 0;
  std::unique_ptr<Observer> m_observer;
  std::unique_ptr<Follower> m_follower;
  std::thread m_thread;
  std::thread m_stopThread;    ///< an attached run's stop request (ssh may take seconds)
  core::HostsSpec m_sshHosts;  ///< an attached run's hosts.ssh_* (attach's options)
  std::mutex m_mutex;
  Batch m_pending;
  bool m_arrivalTold = false;                      ///< recordsArrived was emitted and nothing taken since
  std::vector<std::vector<core::Record>> m_spare;  ///< emptied chunks, capacity kept
  bool m_running = false;
  QString m_runDir;
  QString m_stacksFile;
  qint64 m_runId = 0;
};

}  // namespace ptw::ui
