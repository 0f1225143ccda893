// StepSums: the sum over ranks of a metric at each step, for the charts' mean loss and total
// throughput. A rank's records come in step order, but the ranks' batches arrive in any
// order (each rank sends its own every 250 ms), so a step's sum is complete only when every
// rank has reported that step. Sums wait in a queue from the oldest incomplete step on;
// when a step completes, older incomplete ones (of a rank that skipped them) are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace ptw::ui {

class StepSums {
 public:
  struct Sum {
    double loss = 0;
    double throughput = 0;
    int ranks = 0;
  };

  void reset(int ranks) {
    m_ranks = ranks;
    m_sums.clear();
  }

  /// Adds one rank's record of `step`; when that completes the step, returns true and sets
  /// `done` to the step's sums.
  bool add(std::int64_t step, double loss, double throughput, Sum& done) {
    // A rank far ahead of another (more than many batches of records): start over from it
    // rather than hold a queue that long.
    if (m_sums.empty() || step - m_from > kMaxSpan) {
      m_sums.clear();
      m_from = step;
    }
    if (step < m_from) return false;
    const auto at = static_cast<std::size_t>(step - m_from);
    if (at >= m_sums.size()) m_sums.resize(at + 1);
    Sum& sum = m_sums[at];
    sum.loss += loss;
    sum.throughput += throughput;
    if (++sum.ranks < m_ranks) return false;
    done = sum;
    m_sums.erase(m_sums.begin(), m_sums.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    m_from = step + 1;
    return true;
  }

  static constexpr std::int64_t kMaxSpan = 1 << 20;

 private:
  int m_ranks = 1;
  std::deque<Sum> m_sums;  ///< steps m_from, m_from + 1, ...
  std::int64_t m_from = 0;
};

}  // namespace ptw::ui
