// SPDX-License-Identifier: GPL-3.0-or-later
// Sweep: the question users open the workbench with — on this model and this machine,
// which strategy and how many workers? Runs a profile under each strategy and worker
// count for a fixed number of steps, one after another, and reports throughput and
// scaling efficiency (throughput ÷ (workers × Single's throughput)) for each.
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
  double samplesPerS = 0;
  /// False when the run was too short to measure (Note [Warm-up steps]): samplesPerS is then
  /// what its few steps gave, and the store holds NULL for it.
  bool measured = true;
  double efficiency = 0;  ///< vs workers × single; 1 for single itself; NaN when Single did not finish
  StepSplit stepMs;       ///< mean step and its parts over the ranks that train (ThroughputMeter::meanSplit)
  std::string status;     ///< finished | failed | stopped
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
  /// `base` set up for `strategy` with `workers` (ranks, lanes or pool workers) and `steps`.
  /// Throws ptw::Error naming the strategy or the field when that cannot run.
  static Profile profileFor(const Profile& base, const std::string& strategy, int workers, std::int64_t steps);

  /// Throws ptw::Error naming the option or the configuration that cannot run; run() checks
  /// the same before it starts anything.
  void check() const { (void)plan(); }
  /// Runs Single first (the baseline), then every strategy × worker count. `progress` is
  /// called after each point. Throws ptw::Error on invalid options before running anything.
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

  SweepOptions m_options;
  std::atomic<bool> m_stop{false};
  StopRelay<RunSession> m_current;  ///< the configuration running now
};

}  // namespace ptw::core
