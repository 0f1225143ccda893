// SPDX-License-Identifier: GPL-3.0-or-later
// Launcher: spawns the ranks of one run as local worker processes, collects their
// records and logs, supervises them, and reports how the run ended.
//
// Note [Worker lifetime]
// Every worker is put in one process group owned by the run, and asks the kernel for
// SIGKILL when its parent thread dies (PR_SET_PDEATHSIG). The run() call that forked
// the workers does not return until every worker has been reaped, so the forking thread
// outlives them and the death signal fires only when the launcher itself dies, SIGKILL
// included. No worker outlives its launcher.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/record.h"
#include "launch/rank_starter.h"

namespace ptw::core {

/// Example: LaunchOptions("bin/ptw-worker", "run/profile.json", 2).setOutDir("run").setPort(29500)
struct LaunchOptions {
  LaunchOptions(std::string workerPath, std::string profilePath, int worldSize)
      : workerPath(std::move(workerPath)), profilePath(std::move(profilePath)), worldSize(worldSize) {}

  std::string workerPath;
  std::string profilePath;  ///< the resolved profile each worker reads
  int worldSize = 1;
  std::string outDir = "";       ///< per-rank logs and results; "" keeps nothing on disk
  int port = 0;                  ///< store port; 0 picks a free one on 127.0.0.1
  double stallTimeoutS = 120.0;  ///< a rank silent or stuck this long is reported stalled
  double stopGraceS = 10.0;      ///< a user stop waits this long before SIGKILL
  double failGraceS = 2.0;       ///< after a failure, peers get this long before SIGKILL
  std::size_t logTail = 50;      ///< log lines kept per rank for the failure report
  int attempt = 0;               ///< the restart count the ranks are told (Note [Restarts] in supervisor.h)
  std::vector<std::string> extraWorkerArgs = {};  ///< passed on to every worker unread (WorkerInvocation::passOn)
  std::string stepFile =
      "";  ///< where ranks append their step records (Note [Ranks write their steps]); "": they send them
  long long stepFileLimit = 0;  ///< bytes the step file may reach (a full disk past them); 0: no limit
  /// The ranks run users' programs (Note [Script ranks] in common/command.h): a stop sends
  /// SIGINT, then SIGTERM, then SIGKILL, stopGraceS apart, and processes that still carry the
  /// run's token in their environment when the ranks are gone are killed.
  bool commandRanks = false;
  /// Command ranks: once every one of the `reportRanks` ranks has reported this step, the
  /// run is stopped as a user's stop is, and finishes (hyper.max_steps); 0: never.
  std::int64_t stopAtStep = 0;
  int reportRanks = 0;  ///< the ranks the records name (command.report_ranks); 0: worldSize
  /// Each worker names the rank of its records itself, a process standing for several ranks
  /// (Note [Synthetic ranks] in engine/synthetic_ranks.h), as command ranks always do; its
  /// heartbeats carry the step of the one furthest behind. Else a worker speaks for itself.
  bool workersNameRanks = false;
  /// A loss that is not finite fails the run (run.on_nan "stop"); else it is only said
  /// (Note [Diverged runs]).
  bool stopOnDiverged = false;
  /// Note [Taking stacks]: when a rank stalls, every rank's stacks are taken before the
  /// ranks are killed, for at most this long, and written to <outDir>/stacks-<attempt>.txt;
  /// the same on requestStacks(). Python's take milliseconds; gdb seconds of a core for each
  /// of ptw's own ranks. 0: never.
  double stacksBudgetS = 10.0;
  /// How each rank's process is started; null: here (LocalStarter). SshStarter starts them on
  /// other hosts (Note [Remote ranks] in ssh_starter.h).
  std::shared_ptr<const RankStarter> starter = nullptr;

  LaunchOptions& setStepFile(std::string path, long long limit) {
    stepFile = std::move(path), stepFileLimit = limit;
    return *this;
  }
  LaunchOptions& setOutDir(std::string v) {
    outDir = std::move(v);
    return *this;
  }
  LaunchOptions& setPort(int v) {
    port = v;
    return *this;
  }
  LaunchOptions& setStallTimeoutS(double v) {
    stallTimeoutS = v;
    return *this;
  }
  LaunchOptions& setStopGraceS(double v) {
    stopGraceS = v;
    return *this;
  }
};

struct RankExit {
  int rank = -1;
  int pid = 0;
  int exitCode = -1;            ///< valid when signal == 0
  int signal = 0;               ///< the signal that ended it, or 0
  std::string host = "";        ///< where it ran; "" = this machine
  bool connectionLost = false;  ///< a remote rank whose ssh connection failed or dropped (ssh's status 255)
  /// ptw had told it to stop when it ended (a stop, a stall, another rank's failure): how it
  /// ended then is its answer to that, not a verdict on it, whatever the code.
  bool stoppedByPtw = false;
  /// True when the rank exited with `e`, not by a signal or a lost connection.
  bool exitedWith(WorkerExit e) const { return signal == 0 && !connectionLost && exitCode == core::exitCode(e); }
  /// A rank stopped by a signal from outside ptw (WorkerExit::StoppedFromOutside) stopped; it did not fail.
  bool failed() const {
    return signal != 0 || connectionLost ||
           (!exitedWith(WorkerExit::Finished) && !exitedWith(WorkerExit::StoppedFromOutside));
  }
  /// "exit code 3" or "signal 9 (Killed)"; "stopped (exit code 0)" for a rank ptw stopped.
  std::string describe() const;
};

struct RunReport {
  enum class Status { Finished, Failed, Stopped };
  Status status = Status::Finished;
  int failedRank = -1;
  bool stalled = false;
  RankExit failedExit;                 ///< of failedRank
  std::string message;                 ///< one-line summary for people
  std::vector<std::string> lastLines;  ///< failedRank's last log lines
  std::vector<RankExit> exits;         ///< every rank
  int port = 0;
  double wallS = 0;
  /// Note [Diverged runs]: the first rank whose loss was not finite, from which step, and
  /// that loss (NaN or an infinity); -1 when none.
  int divergedRank = -1;
  std::int64_t divergedAtStep = -1;
  double divergedLoss = 0;
  bool reachedStopStep = false;  ///< stopped because every rank reached LaunchOptions::stopAtStep
  std::string stacksFile;        ///< the ranks' stacks taken in this attempt (Note [Taking stacks]); "" when none
  /// Seconds from the start of the ranks' processes to the first and to the last of them
  /// sending their first record: how long the ranks took to start (a process of many ranks
  /// counts once); -1 where none, or not every one, did.
  double firstStartedS = -1;
  double lastStartedS = -1;
};

/// "rank 0: loss is NaN since step 3", for a report whose run diverged.
std::string divergedMessage(const RunReport& report);

const char* statusName(RunReport::Status s);

// Note [Diverged runs]
// A loss that is NaN or infinite, of ptw's own ranks or a script's, is named as soon as it
// comes: "rank 0: loss is NaN since step 3", in the window, the headless output and the
// summary (diverged_at_step). run.on_nan "stop" fails the run there (exit 3); "warn", the
// default, lets it go on. A rank that groups its steps (Note [Step groups]) starts a group at
// its first such loss, so that the group's first step is where it diverged.

/// Receives what the ranks send, on the thread that called Launcher::run().
class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  virtual void onStarted(int /*port*/, const std::vector<int>& /*pids*/) {}
  /// Records read in one pass over the pipes, in arrival order. An observer that keeps them
  /// may swap `batch` with a vector of its own instead of copying it; the launcher clears
  /// whatever vector it gets back and reuses its capacity.
  virtual void onRecords(std::vector<Record>& /*batch*/) {}
  virtual void onLog(int /*rank*/, const std::string& /*line*/) {}
  virtual void onRankExit(const RankExit& /*exit*/) {}
  /// The run restarts (attempt 1, 2, ...) from a checkpoint at `step`: what was shown
  /// past that step is replayed (Note [Restarts] in supervisor.h).
  virtual void onRestart(int /*attempt*/, std::int64_t /*step*/) {}
  /// Each rank's host, once known, where the profile names none: a SLURM job's nodes (Note
  /// [SLURM ranks] in slurm_starter.h), before the ranks start.
  virtual void onHosts(const std::vector<std::string>& /*rankHosts*/) {}
};

class Launcher {
 public:
  explicit Launcher(LaunchOptions options);
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  /// Spawns the ranks and supervises them until all have exited. Throws ptw::Error only
  /// when nothing could be started (bad worker path, port taken); every failure after
  /// that is in the report.
  RunReport run(LaunchObserver& observer);

  /// Asks the run to stop gracefully (ranks finish their step), then forcibly after
  /// stopGraceS. Safe from any thread and from a signal handler.
  void requestStop();

  /// Asks for every rank's stacks (Note [Taking stacks]), taken by the thread in run() and
  /// written to <outDir>/stacks-<attempt>.txt. Safe from any thread and from a signal handler;
  /// nothing is taken when no run is going on.
  void requestStacks();

  /// A free TCP port on 127.0.0.1, or throws. With `held`, the socket bound to it stays open
  /// (its descriptor in *held, for the caller to close), so no other program is handed it.
  static int pickFreePort(int* held = nullptr);

  /// Throws ptw::Error naming run.port when `port` is taken on 127.0.0.1.
  static void checkPortFree(int port);

  /// Throws ptw::Error naming `path` when it is not an executable worker program.
  static void checkWorker(const std::string& path);

  /// $PTW_WORKER when set; else `ptw-worker` beside the running executable, else where the
  /// package installs it (../lib/ptw/ptw-worker from the executable's folder).
  static std::string defaultWorkerPath();

 private:
  class Impl;
  LaunchOptions m_options;
  int m_wakePipe[2] = {-1, -1};
  std::atomic<bool> m_stopRequested{false};
  std::atomic<bool> m_stacksRequested{false};
};

}  // namespace ptw::core
