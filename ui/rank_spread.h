// SPDX-License-Identifier: GPL-3.0-or-later
// RankSpread: one metric over many ranks, step window by step window, as a few numbers: the
// mean, the 10th and 90th percentiles, the minimum and the maximum over the ranks, and which
// ranks stand out from the others, for charts that cannot draw a line per rank.
//
// Note [Rank spread]
// Above kAggregateAbove ranks a chart draws the spread of its metric over the ranks instead
// of a line per rank. Each window of steps (Note [Step groups]) is summarised once, when
// every rank has reported it; a rank far behind the others does not hold the windows back:
// past kMaxOpen open windows the oldest is summarised with the ranks it has. Memory is then
// a few open windows of one value per rank, a short recent tail per rank, and the summaries,
// which go to the chart's own bounded SeriesSummary; none of it grows with the run's length.
// A rank stands out when its value stays away from the window's median: each window moves an
// exponential average of its distance from the median, in widths of the p10-p90 band (at
// least 5% of the median, so that ranks in lock-step, whose band is a line, are not named for
// their noise), and the ranks whose average is beyond kStandout are named, the farthest first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace ptw::ui {

/// Up to this many ranks a chart draws a line per rank; above, the spread (Note [Rank spread]).
constexpr int kAggregateAbove = 8;

class RankSpread {
 public:
  struct Done {
    std::int64_t first = 0;  ///< the window's first step
    std::int64_t step = 0;   ///< its last step, where its point is drawn
    double mean = 0, p10 = 0, p90 = 0, min = 0, max = 0;
    int ranks = 0;  ///< ranks that reported it
  };

  /// Example: RankSpread(256)
  explicit RankSpread(std::size_t recent = 256) : m_recentCap(recent) {}

  void reset(int ranks);
  /// Adds `count` steps of `rank`, from step `first` to `step`, whose mean value is `value`;
  /// the windows this completes go to `done`.
  void add(int rank, std::int64_t first, std::int64_t step, double value, std::int64_t count, std::vector<Done>& done);
  /// The run has ended: every open window is summarised with the ranks it has.
  std::vector<Done> finish();

  /// The ranks that stand out (Note [Rank spread]), the farthest first, at most `n`.
  std::vector<int> standouts(std::size_t n) const;
  /// How far `rank` stays from the median, in widths of the p10-p90 band (signed).
  double distance(int rank) const;
  /// `rank`'s latest values, (last step, value), oldest first: at most `recent` of them.
  std::vector<std::pair<double, double>> recent(int rank) const;
  /// `rank`'s latest value; NaN before any.
  double latest(int rank) const;
  std::size_t openWindows() const { return m_open.size(); }
  std::size_t memoryBytes() const;

  static constexpr std::size_t kMaxOpen = 64;
  static constexpr double kStandout = 1.5;

 private:
  struct Window {
    std::vector<float> sum;        ///< each rank's values summed
    std::vector<std::uint32_t> n;  ///< and their steps
    std::int64_t steps = 0;        ///< steps reported, all ranks together
    std::int64_t last = 0;         ///< the window's last step reported
  };
  struct Rank {
    std::vector<std::pair<float, float>> ring;  ///< recent (step, value), a ring of m_recentCap
    std::size_t head = 0;                       ///< the oldest in `ring` once full
    double distance = 0;                        ///< the average distance of Note [Rank spread]
    int windows = 0;                            ///< how many windows `distance` averages
  };
  Done summarise(std::int64_t from, Window& w);
  void judge(int rank, double value, double median, double width);
  void remember(int rank, double step, double value);

  std::size_t m_recentCap;
  int m_ranks = 0;
  std::map<std::int64_t, Window> m_open;                       ///< by the window's first step
  std::int64_t m_doneFrom = -1;                                ///< the latest window summarised
  std::map<std::int64_t, std::pair<double, double>> m_judged;  ///< (median, width) of recent windows
  std::vector<Rank> m_rank;
  std::vector<float> m_values;  ///< scratch for the percentiles
};

}  // namespace ptw::ui
