// SPDX-License-Identifier: GPL-3.0-or-later
// Throughput as ptw reports it (the headless summary, --expect, the run list, the sweep):
// samples over time inside steps, per rank, leaving out each rank's warm-up steps.
#pragma once

#include <cstdint>
#include <vector>

#include "common/profile.h"
#include "common/record.h"

namespace ptw::core {

// Note [Warm-up steps]
// A rank's first steps pay for lazy initialisation: on a GPU the first two take many times
// a later step, on a CPU the first a few times the rest. Counted, they would make a short
// GPU run report well under its speed, and a sweep's short runs measure mostly start-up. So
// throughput leaves out each rank's first warmupSteps() step records after every start,
// restarts included: a tenth of hyper.max_steps, at most 10 (10 for a run set by epochs). A
// rank that did no more steps than that is counted whole. (warmupSteps() is in
// common/profile.h: a rank that groups its steps, Note [Step groups], ends a group there.)
//
// A run with fewer than kMinMeasuredSteps steps after its warm-up (the default profile's 20
// steps leave 18) is too short to measure: its few steps time mostly the clock and the
// scheduler. Its throughput is then not a number: the headless line says "too short to
// measure", the summary holds null and the store NULL, and a --expect on it does not hold.
// The count is of steps, not seconds: a small model's steps take microseconds, and a run of
// thousands of them measures well.

/// A rank's mean step time (ms) and how it splits: loading the batch, forward and backward,
/// waiting for and reducing gradients, the optimizer (common/record.h).
struct StepSplit {
  double stepMs = 0;
  double dataMs = 0;
  double computeMs = 0;
  double commMs = 0;
  double optMs = 0;

  StepSplit& operator+=(const StepSplit& o) {
    stepMs += o.stepMs, dataMs += o.dataMs, computeMs += o.computeMs, commMs += o.commMs, optMs += o.optMs;
    return *this;
  }
  StepSplit operator/(double n) const { return {stepMs / n, dataMs / n, computeMs / n, commMs / n, optMs / n}; }
  /// The share of the step spent waiting for other ranks and reducing gradients, in percent.
  double commPercent() const { return stepMs > 0 ? 100 * commMs / stepMs : 0; }
};

/// `s` as the JSON object the summary and the sweep write (step_ms): total, data, compute,
/// comm, opt. `Json`: nlohmann::ordered_json.
template <typename Json>
Json stepSplitJson(const StepSplit& s) {
  return Json{{"total", s.stepMs}, {"data", s.dataMs}, {"compute", s.computeMs}, {"comm", s.commMs}, {"opt", s.optMs}};
}

/// Example: ThroughputMeter m(profile); for each step record m.add(r.step); m.total()
class ThroughputMeter {
 public:
  /// For `profile`: its warm-up, and for the pool a total of its coordinator (rank 0) alone,
  /// which reports the whole pool's samples.
  explicit ThroughputMeter(const Profile& profile);
  explicit ThroughputMeter(std::int64_t warmup, bool coordinatorOnly = false)
      : m_warmup(warmup), m_coordinatorOnly(coordinatorOnly) {}

  void add(const StepRecord& step);
  /// Adds the step records of `rank` that `group` sums (Note [Step groups]).
  void add(int rank, const StepGroup& group);
  /// Adds the step records of a launcher batch.
  void add(const std::vector<Record>& batch);
  /// The ranks were started again (a restart): each warms up again.
  void restart();
  /// Samples per second of time inside `rank`'s steps after its warm-up; 0 before any step.
  double samplesPerS(int rank) const;
  /// Steps per second of time inside `rank`'s steps after its warm-up; 0 before any step.
  double stepsPerS(int rank) const;
  /// The run's samples per second: the sum over ranks (the coordinator's alone for the pool).
  double total() const;
  /// The fewest steps after warm-up of a rank that counts in total(); 0 before any step.
  std::int64_t measuredSteps() const;
  /// Whether the run is long enough to measure (Note [Warm-up steps]).
  bool measured() const { return measuredSteps() >= kMinMeasuredSteps; }
  static constexpr std::int64_t kMinMeasuredSteps = 20;
  /// `rank`'s mean step time and its split over the steps counted above; zeros before any step.
  StepSplit split(int rank) const;
  /// The mean of split() over the ranks that train: for the pool its workers, not the
  /// coordinator (whose step is waiting for them); zeros before any step.
  StepSplit meanSplit() const;

 private:
  struct Sums {
    std::int64_t steps = 0;
    double samples = 0;
    double busyS = 0;
    StepSplit ms;  ///< sums
  };
  const Sums& counted(int rank) const;
  int countedRanks() const;  ///< the ranks total() sums: 0..countedRanks()-1

  std::int64_t m_warmup;
  bool m_coordinatorOnly;
  std::vector<Sums> m_all;                 ///< every step of each rank
  std::vector<Sums> m_steady;              ///< each rank's steps after a warm-up
  std::vector<std::int64_t> m_sinceStart;  ///< each rank's steps since its last start
};

}  // namespace ptw::core
