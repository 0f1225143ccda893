// SPDX-License-Identifier: GPL-3.0-or-later
// Synthetic ranks: records made up at a set rate, without training, to measure what
// watching many ranks costs ptw.
//
// Note [Synthetic ranks]
// The hidden strategy "synthetic" (common/strategies.h; never listed in the window) runs
// strategy.ranks ranks, StrategyInfo::ranksPerProcess of them in each worker process, so
// that a thousand ranks fit on a machine of two cores. Process p of a run stands for ranks
// [p·K, (p+1)·K) and names the rank of each record itself, as a command rank reporting for
// mpirun's ranks does (LaunchOptions::reportRanks). Each rank steps on its own clock at
// --synthetic-rate steps a second (a few per cent apart from rank to rank, each step
// noisy), hyper.max_steps steps: a loss that decays with noise (of a float's precision),
// a step time split into data, compute, comm and opt (whole nanoseconds, as a steady
// clock's), samples from hyper.batch_size. The records go through the
// same RecordWriter and step file as a real rank's (Note [Ranks write their steps]), so the
// launcher, the store, the headless output and the window take them as they take a real
// run's. The faults of Note [Injected faults] apply: slow-at-step multiplies a rank's own
// time (data, compute, opt) from its step on, so it steps slower; hang-at-step stops a
// rank after its step, the process heartbeating on (a stall); kill-at-step kills the
// process. The ranks do not wait for each other: no rank's comm time grows for a slow one.
// At its end the process says on stderr how many step records it sent (the benchmark's
// count, tests/bench/bench_scale.sh).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/record.h"
#include "common/worker_invocation.h"

namespace ptw::engine {

/// Example: SyntheticOptions(0, 512, 1000).setRate(10).setFault(fault)
struct SyntheticOptions {
  SyntheticOptions(int firstRank, int endRank, std::int64_t maxSteps)
      : firstRank(firstRank), endRank(endRank), maxSteps(maxSteps) {}
  int firstRank;  ///< the ranks [firstRank, endRank)
  int endRank;
  std::int64_t maxSteps;                      ///< steps of each rank
  double rate = core::kDefaultSyntheticRate;  ///< steps a second of each rank
  std::int64_t batchSize = 16;                ///< samples a step
  double lr = 0.01;                           ///< the learning rate each record holds
  std::uint64_t seed = 0;                     ///< the noise's
  core::InjectedFault fault = {};             ///< Note [Injected faults]; only its rank acts on it
  int attempt = 0;                            ///< hang and kill act on the first attempt only
  SyntheticOptions& setRate(double v) {
    rate = v;
    return *this;
  }
  SyntheticOptions& setFault(core::InjectedFault v) {
    fault = std::move(v);
    return *this;
  }
};

class SyntheticRanks {
 public:
  using Clock = std::chrono::steady_clock;
  using Sink = std::function<void(const core::Record&)>;

  explicit SyntheticRanks(SyntheticOptions options, Clock::time_point start = Clock::now());

  /// Sends `sink` the step records due by `now`, each rank's in step order.
  void emitDue(Clock::time_point now, const Sink& sink);
  /// Every rank has taken its last step (a hung one never does).
  bool finished() const;
  /// The step of the rank furthest behind: what heartbeats carry, so a stall is seen.
  std::int64_t slowestStep() const;
  /// Step records sent so far.
  std::int64_t sent() const { return m_sent; }
  /// Steps rank `rank` took.
  std::int64_t stepsOf(int rank) const { return m_ranks[static_cast<std::size_t>(rank - m_o.firstRank)].step; }

  /// Emits until finished() or `stop`, waking every few milliseconds; then a Done record for
  /// each rank that finished. `passed` hears slowestStep() after each wake.
  void run(const std::atomic<bool>& stop, const Sink& sink, const std::function<void(std::int64_t)>& passed);

  /// Step `step`'s record of a rank whose base step time is `baseMs`, its noise from `noise`
  /// (uniform in [0, 1), called a few times): what emitDue sends.
  core::StepRecord makeStep(int rank, std::int64_t step, double baseMs, const std::function<double()>& noise) const;

 private:
  struct Rank {
    std::int64_t step = 0;   ///< steps taken
    double baseMs = 0;       ///< its own time a step, a few per cent off the rate's
    Clock::time_point next;  ///< when its next step ends
    std::uint64_t rng = 0;
    bool hung = false;
  };
  static double uniform(std::uint64_t& state);

  SyntheticOptions m_o;
  std::vector<Rank> m_ranks;
  std::int64_t m_sent = 0;
};

}  // namespace ptw::engine
