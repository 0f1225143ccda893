// SPDX-License-Identifier: GPL-3.0-or-later
// RunSession: one run's lifecycle, the same for the window (ui/run_controller.cpp),
// `ptw --headless` (headless.cpp) and every point of `ptw sweep` (sweep.cpp): it creates
// the run folder, opens the run store, records the run as running, supervises it with the
// caller's observer, works out the final metrics once, and records the verdict with them.
//
// Note [One run lifecycle]
// The callers differ only in what they show while the run goes on (their observer) and
// what they make of the result. What is stored, and how a run that could not be stored is
// reported (RunResult::storeError, the run failed with that message), is decided here, so
// a run's row reads the same whichever way it was started.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/profile.h"
#include "common/record.h"
#include "launch/last_steps.h"
#include "launch/launcher.h"
#include "launch/run_store.h"
#include "launch/straggler_detector.h"
#include "launch/throughput.h"

namespace ptw::core {

class Supervisor;

/// Example: RunSessionOptions(profile).setRunsDir("runs").setWorkerArgs({"--fault=kill-at-step:1:12"})
struct RunSessionOptions {
  explicit RunSessionOptions(Profile profile) : profile(std::move(profile)) {}
  Profile profile;              ///< resolved and valid
  std::string runsDir = "";     ///< "" uses defaultRunsDirectory()
  std::string workerPath = "";  ///< "" uses Launcher::defaultWorkerPath()
  /// An existing run folder to run in, made by `ptw submit` (its profile.json is the run's);
  /// "": a new one is made under runsDir.
  std::string runFolder = "";
  /// Appended to every worker's command line: hidden switches for tests and benchmarks
  /// (--fault=SPEC, --metrics-phases=MS:FILE, --gradients=autograd).
  std::vector<std::string> workerArgs = {};
  /// A store the caller keeps open on runsDir (a sweep stores every point in one); null: the
  /// session opens its own.
  RunStore* store = nullptr;
  RunStoreOptions storeOptions = {};  ///< for the store the session opens itself
  /// Told how packing the step records into chunks goes when the run ends (RunStore::endRun).
  std::function<void(std::int64_t done, std::int64_t total)> packProgress = {};

  RunSessionOptions& setRunsDir(std::string v) {
    runsDir = std::move(v);
    return *this;
  }
  RunSessionOptions& setWorkerPath(std::string v) {
    workerPath = std::move(v);
    return *this;
  }
  RunSessionOptions& setRunFolder(std::string v) {
    runFolder = std::move(v);
    return *this;
  }
  RunSessionOptions& setWorkerArgs(std::vector<std::string> v) {
    workerArgs = std::move(v);
    return *this;
  }
  RunSessionOptions& setStore(RunStore* v) {
    store = v;
    return *this;
  }
  RunSessionOptions& setStoreOptions(RunStoreOptions v) {
    storeOptions = v;
    return *this;
  }
  RunSessionOptions& setPackProgress(std::function<void(std::int64_t, std::int64_t)> v) {
    packProgress = std::move(v);
    return *this;
  }
};

/// What a run ended with.
struct RunResult {
  /// The last attempt's report; failed, with the store's message, when the run could not be
  /// stored, or with the reason when nothing could be started.
  RunReport report;
  bool started = true;  ///< false when no rank could be started (worker missing, port taken)
  /// final.loss, final.step, final.val_loss, final.val_accuracy, throughput.samples_per_s,
  /// throughput.steps_per_s, wall_s (expectation.h's knownMetrics()); NaN where none came.
  std::map<std::string, double> metrics;
  std::vector<RankFinal> ranks;       ///< one per reporting rank
  std::vector<Straggler> stragglers;  ///< the ranks named stragglers (Note [Stragglers])
  std::string storeError;             ///< "" when every record and the verdict were stored
  int attempts = 0;
};

class RunSession {
 public:
  explicit RunSession(RunSessionOptions options);
  ~RunSession();
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  /// Checks the worker program, run.port, the data files, the device and the hosts (runProblem()),
  /// creates the run folder, opens the store and records the run as running. Throws
  /// ptw::Error naming what is wrong; nothing runs then.
  void begin();
  /// Supervises the run (after begin()), records its verdict and final metrics, and returns
  /// them. Never throws.
  RunResult run(LaunchObserver& observer);
  /// Graceful stop, and no restart; before run() too. Async-signal-safe, from any thread.
  void requestStop();
  /// Every rank's stacks, written to the run folder (Supervisor::requestStacks); nothing
  /// before run() has started the ranks. Async-signal-safe, from any thread.
  void requestStacks();

  const Profile& profile() const { return m_options.profile; }
  const std::string& runDir() const { return m_runDir; }
  std::int64_t runId() const { return m_runId; }
  /// The store's file, once begin() has opened it.
  std::string storePath() const;
  /// The run's throughput as ptw reports it (throughput.h); read it once run() has returned.
  const ThroughputMeter& throughput() const;

 private:
  class Tracker;

  RunSessionOptions m_options;
  std::unique_ptr<RunStore> m_ownStore;
  RunStore* m_store = nullptr;
  std::unique_ptr<Supervisor> m_supervisor;
  std::atomic<Supervisor*> m_stopTarget{nullptr};
  std::atomic<bool> m_stopRequested{false};
  std::string m_runDir;
  std::int64_t m_runId = 0;
  ThroughputMeter m_noThroughput{0};
};

}  // namespace ptw::core
