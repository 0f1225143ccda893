// SPDX-License-Identifier: GPL-3.0-or-later
// Sweep: the question users open the workbench with — on this model and this machine,
// which strategy and how many workers? Runs a profile under each strategy and worker
// count for a fixed number of steps, one after another, and reports throughput and
// scaling efficiency (throughput ÷ (workers × Single's throughput)) for each.
//
// Note [Sweeping a command]
// A command profile (strategy.kind command) runs the user's program, which ptw's strategies
// do not apply to: its sweep runs the program with each worker count as strategy.ranks, and
// nothing else. Its baseline is the one-process run (run first when 1 is among the counts),
// its samples/s what the program reports; a program that reports no samples has its steps/s
// only, and no samples/s or efficiency (not 0, which would read as a measurement).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/profile.h"
#include "launch/stop_relay.h"
#include "launch/throughput.h"

namespace ptw::core {

class RunSession;

struct SweepPoint {
  std::string strategy;  ///< a sweep variant (common/strategies.h): single, ddp, ddp-gloo, ...
  int workers = 1;
  /// NaN when the run's steps reported no samples (a command's program that reports only its
  /// loss: Note [Sweeping a command]).
  double samplesPerS = 0;
  /// The slowest rank's steps/s after warm-up (throughput.steps_per_s); 0 before any step.
  double stepsPerS = 0;
  /// False when the run was too short to measure (Note [Warm-up steps]): samplesPerS is then
  /// what its few steps gave, and the store holds NULL for it.
  bool measured = true;
  /// False when the ranks stepped but reported no samples: samplesPerS is then NaN.
  bool samplesReported = true;
  /// vs workers × the baseline's (Single, or a command's one-process run); 1 for the baseline
  /// itself; NaN when the baseline did not finish, did not run or reported no samples
  double efficiency = 0;
  StepSplit stepMs;    ///< mean step and its parts over the ranks that train (ThroughputMeter::meanSplit)
  std::string status;  ///< finished | failed | stopped
  std::string message;
  std::int64_t runId = 0;
};

/// Example: SweepOptions(profile, {"ddp", "pool"}, {1, 2, 4}).setSteps(200)
struct SweepOptions {
  SweepOptions(Profile base, std::vector<std::string> strategies, std::vector<int> workers)
      : base(std::move(base)), strategies(std::move(strategies)), workers(std::move(workers)) {}
  Profile base;
  std::vector<std::string> strategies;
  std::vector<int> workers;
  std::int64_t steps = 200;
  std::string runsDir = "";     ///< "" uses defaultRunsDirectory(); every point is a stored run
  std::string workerPath = "";  ///< "" uses Launcher::defaultWorkerPath()
  SweepOptions& setSteps(std::int64_t v) {
    steps = v;
    return *this;
  }
  SweepOptions& setRunsDir(std::string v) {
    runsDir = std::move(v);
    return *this;
  }
};

class Sweep {
 public:
  explicit Sweep(SweepOptions options);

  /// The most workers (ranks, lanes or pool workers) one configuration may have.
  static constexpr int kMaxWorkers = 255;
  /// The strategy names a sweep accepts: the table's sweep variants (common/strategies.h).
  static const std::vector<std::string>& strategyNames();
  /// Whether `base` runs a program of the user's (Note [Sweeping a command]).
  static bool sweepsCommand(const Profile& base);
  /// The strategies a sweep of `base` runs when none are named: the table's defaults, or for
  /// a command profile none (its own strategy is all it runs).
  static std::vector<std::string> defaultStrategies(const Profile& base);
  /// `base` set up for `strategy` with `workers` (ranks, lanes or pool workers) and `steps`.
  /// For a command profile `strategy` is its own kind, and `workers` its strategy.ranks.
  /// Throws ptw::Error naming the strategy or the field when that cannot run.
  static Profile profileFor(const Profile& base, const std::string& strategy, int workers, std::int64_t steps);

  /// Throws ptw::Error naming the option or the configuration that cannot run; run() checks
  /// the same before it starts anything.
  void check() const { (void)plan(); }
  /// Runs Single first (the baseline), then every strategy × worker count; a command
  /// profile, its program with each worker count. `progress` is called after each point. Throws ptw::Error on invalid
  /// options before running anything.
  std::vector<SweepPoint> run(const std::function<void(const SweepPoint&, int done, int total)>& progress = {});
  /// Stops the current run and skips the rest. Safe from any thread and a signal handler.
  void requestStop();
  bool stopRequested() const { return m_stop; }

  /// Index of the highest throughput among finished points, or -1.
  static int fastest(const std::vector<SweepPoint>& points);
  static std::string toCsv(const std::vector<SweepPoint>& points);
  static std::string toJson(const std::vector<SweepPoint>& points);

 private:
  /// The configurations in the order they run, Single first; every one checked.
  std::vector<std::pair<std::string, int>> plan() const;
  /// plan() of a command profile: its own kind with each worker count, 1 first.
  std::vector<std::pair<std::string, int>> commandPlan() const;

  SweepOptions m_options;
  std::atomic<bool> m_stop{false};
  StopRelay<RunSession> m_current;  ///< the configuration running now
};

}  // namespace ptw::core
