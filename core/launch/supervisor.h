// SPDX-License-Identifier: GPL-3.0-or-later
// Supervisor: one run from start to verdict. It launches the ranks (Launcher), writes
// every record to the run store while the run goes on, and after a failure restarts the
// whole run from its last checkpoint up to run.max_restarts times.
//
// Note [Restarts]
// A restart relaunches every rank with run.resume_from pointing at the run folder's
// checkpoint.pt (written atomically by rank 0, with checkpoint.step beside it), so the
// run continues from the step of that checkpoint and ends with the parameters of a run
// that never failed. A run that fails before its first checkpoint restarts from where it
// started: the profile's own run.resume_from (the user's checkpoint), else the start.
// Records are stored with their attempt number; where attempts overlap (steps after the
// checkpoint that were replayed), the later attempt's count.
// Observers hear onRestart(attempt, step) and drop what they drew past that step; the
// supervisor's throughput() counts each rank's warm-up again (Note [Warm-up steps]).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/profile.h"
#include "launch/launcher.h"
#include "launch/stop_relay.h"
#include "launch/straggler_detector.h"
#include "launch/throughput.h"

namespace ptw::core {

class RunStore;

/// Example: SupervisorOptions(profile, "runs/20261129T120000Z-x", workerPath).setStore(&store, id)
struct SupervisorOptions {
  SupervisorOptions(Profile profile, std::string runDir, std::string workerPath)
      : profile(std::move(profile)), runDir(std::move(runDir)), workerPath(std::move(workerPath)) {}
  Profile profile;  ///< resolved; written to runDir/profile.json
  std::string runDir;
  std::string workerPath;
  RunStore* store = nullptr;  ///< records go here when set
  std::int64_t runId = 0;
  /// Appended to every worker's command line, every attempt (RunSessionOptions::workerArgs).
  std::vector<std::string> workerArgs = {};
  /// Across hosts: the port rank 0's host was found to open (hostsProblem), the first
  /// attempt's; with hosts.port 0 each restart asks that host for another (Note [Rendezvous
  /// port] in ssh_starter.h). 0: not checked; hosts.port, or a port free on this machine.
  int rendezvousPort = 0;
  SupervisorOptions& setStore(RunStore* s, std::int64_t id) {
    store = s;
    runId = id;
    return *this;
  }
  SupervisorOptions& setWorkerArgs(std::vector<std::string> v) {
    workerArgs = std::move(v);
    return *this;
  }
  SupervisorOptions& setRendezvousPort(int port) {
    rendezvousPort = port;
    return *this;
  }
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);

  /// Runs every attempt; the report is the last attempt's, with the store's write error
  /// (disk full) as the failure when there was one. Throws ptw::Error only when nothing
  /// could be started (worker missing, port taken, a SLURM node that fails its check).
  RunReport run(LaunchObserver& observer);

  /// Graceful stop of the current attempt, and no restart. Async-signal-safe.
  void requestStop();

  /// The current attempt's ranks' stacks, written to the run folder (Launcher::requestStacks);
  /// nothing between attempts.
  void requestStacks();

  int attempts() const { return m_attempts; }

  /// The run's throughput as ptw reports it (throughput.h), over every attempt, each rank
  /// warming up again after a restart. Read it once run() has returned.
  const ThroughputMeter& throughput() const { return m_throughput; }
  /// The ranks named stragglers while the run went on (Note [Stragglers]); read it once
  /// run() has returned.
  const std::vector<Straggler>& stragglers() const { return m_stragglers.named(); }

 private:
  SupervisorOptions m_options;
  ThroughputMeter m_throughput;
  StragglerDetector m_stragglers;
  StopRelay<Launcher> m_current;  ///< the current attempt's launcher
  std::atomic<bool> m_stopRequested{false};
  int m_attempts = 0;
};

/// The step of the checkpoint in `runDir` (from checkpoint.step), or -1 when there is none.
std::int64_t checkpointStep(const std::string& runDir);

}  // namespace ptw::core
