// Throughput as ptw reports it (the headless summary, --expect, the run list, the sweep):
// samples over time inside steps, per rank, leaving out each rank's warm-up steps.
#pragma once

#include <cstdint>
#include <vector>

#include "common/record.h"

namespace ptw::core {

struct Profile;

// Note [Warm-up steps]
// A rank's first steps pay for lazy initialisation. On a GPU the first step took ~245 ms and
// the second ~12 ms, against ~1 ms a step after (an H200, LibTorch 2.11); on a CPU the first
// is a few times the rest. Counted, they made a 300-step GPU run report 58% of its speed, and a
// sweep's short runs measure mostly start-up. So throughput leaves out each rank's first
// warmupSteps() step records: a tenth of the run, at most 10. A rank that did no more steps
// than that is counted whole.

/// The step records of each rank that throughput leaves out (Note [Warm-up steps]).
std::int64_t warmupSteps(const Profile& profile);

/// Example: ThroughputMeter m(warmupSteps(p)); for each step record m.add(r.step); m.samplesPerS(0)
class ThroughputMeter {
 public:
  explicit ThroughputMeter(std::int64_t warmup) : m_warmup(warmup) {}

  void add(const StepRecord& step);
  /// Samples per second of time inside `rank`'s steps after its warm-up; 0 before any step.
  double samplesPerS(int rank) const;
  /// Steps per second of time inside `rank`'s steps after its warm-up; 0 before any step.
  double stepsPerS(int rank) const;

 private:
  struct Sums {
    std::int64_t steps = 0;
    double samples = 0;
    double busyS = 0;
  };
  const Sums& counted(int rank) const;

  std::int64_t m_warmup;
  std::vector<Sums> m_all;     ///< every step of each rank
  std::vector<Sums> m_steady;  ///< each rank's steps after its first m_warmup
};

}  // namespace ptw::core
