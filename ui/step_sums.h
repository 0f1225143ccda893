// StepSums: the sum over ranks of a metric at each step, for the charts' mean loss and total
// throughput. A rank's records come in step order, but the ranks' batches arrive in any
// order (each rank sends its own every 250 ms), so a step's sum is complete only when every
// rank has reported that step. Sums wait in a queue from the oldest incomplete step on;
// when a step completes, older incomplete ones (of a rank that skipped them) are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

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
    clear();
  }

  /// Adds one rank's record of `step`; when that completes the step, returns true and sets
  /// `done` to the step's sums.
  bool add(std::int64_t step, double loss, double throughput, Sum& done) {
    // A rank far ahead of another (more than many batches of records): start over from it
    // rather than hold a queue that long.
    if (m_head == m_sums.size() || step - m_from > kMaxSpan) {
      clear();
      m_from = step;
    }
    if (step < m_from) return false;
    const auto at = m_head + static_cast<std::size_t>(step - m_from);
    if (at >= m_sums.size()) m_sums.resize(at + 1);
    Sum& sum = m_sums[at];
    sum.loss += loss;
    sum.throughput += throughput;
    if (++sum.ranks < m_ranks) return false;
    done = sum;
    m_head = at + 1;
    m_from = step + 1;
    // Completed sums are dropped from the front by moving an index, and erased in one move
    // once they are the larger part.
    if (m_head == m_sums.size()) {
      clear();
    } else if (m_head > m_sums.size() / 2) {
      m_sums.erase(m_sums.begin(), m_sums.begin() + static_cast<std::ptrdiff_t>(m_head));
      m_head = 0;
    }
    return true;
  }

  static constexpr std::int64_t kMaxSpan = 1 << 20;

 private:
  void clear() {
    m_sums.clear();
    m_head = 0;
  }

  int m_ranks = 1;
  std::vector<Sum> m_sums;  ///< from m_head on: steps m_from, m_from + 1, ...
  std::size_t m_head = 0;
  std::int64_t m_from = 0;
};

}  // namespace ptw::ui
