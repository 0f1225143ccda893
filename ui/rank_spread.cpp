// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/rank_spread.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/record.h"

namespace ptw::ui {
namespace {
constexpr std::size_t kJudgedKept = 1024;  ///< windows a late value can still be judged against
constexpr double kDistanceWeight = 0.9;    ///< the average distance's weight of its past
}  // namespace

void RankSpread::reset(int ranks) {
  m_ranks = std::max(0, ranks);
  m_open.clear();
  m_judged.clear();
  m_doneFrom = -1;
  m_rank.assign(static_cast<std::size_t>(m_ranks), Rank{});
}

void RankSpread::add(int rank, std::int64_t first, std::int64_t step, double value, std::int64_t count,
                     std::vector<Done>& done) {
  if (rank < 0 || rank >= m_ranks || count <= 0 || !std::isfinite(value)) return;
  remember(rank, static_cast<double>(step), value);
  const std::int64_t span = core::stepGroupSpan(first), from = first - first % span;
  if (from <= m_doneFrom) {  // summarised without it: judged against what the others had
    if (auto it = m_judged.find(from); it != m_judged.end()) judge(rank, value, it->second.first, it->second.second);
    return;
  }
  Window& w = m_open[from];
  if (w.sum.empty()) w.sum.assign(static_cast<std::size_t>(m_ranks), 0.f), w.n.assign(w.sum.size(), 0);
  w.sum[static_cast<std::size_t>(rank)] += static_cast<float>(value * static_cast<double>(count));
  w.n[static_cast<std::size_t>(rank)] += static_cast<std::uint32_t>(count);
  w.steps += count;
  w.last = std::max(w.last, step);
  // Complete: this window and every older one (a rank that skipped steps left them open).
  if (w.steps >= static_cast<std::int64_t>(m_ranks) * span) {
    while (!m_open.empty() && m_open.begin()->first <= from) {
      done.push_back(summarise(m_open.begin()->first, m_open.begin()->second));
      m_open.erase(m_open.begin());
    }
    return;
  }
  while (m_open.size() > kMaxOpen) {  // a rank far behind: the oldest goes with what it has
    done.push_back(summarise(m_open.begin()->first, m_open.begin()->second));
    m_open.erase(m_open.begin());
  }
}

std::vector<RankSpread::Done> RankSpread::finish() {
  std::vector<Done> out;
  for (auto& [from, w] : m_open) out.push_back(summarise(from, w));
  m_open.clear();
  return out;
}

RankSpread::Done RankSpread::summarise(std::int64_t from, Window& w) {
  Done d;
  d.first = from;
  d.step = w.last;
  m_doneFrom = std::max(m_doneFrom, from);
  m_values.clear();
  double sum = 0;
  for (std::size_t r = 0; r < w.n.size(); ++r)
    if (w.n[r] > 0) {
      m_values.push_back(w.sum[r] / static_cast<float>(w.n[r]));
      sum += m_values.back();
    }
  d.ranks = static_cast<int>(m_values.size());
  if (m_values.empty()) return d;
  auto at = [this](double q) {
    auto nth = m_values.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(m_values.size() - 1));
    std::nth_element(m_values.begin(), nth, m_values.end());
    return static_cast<double>(*nth);
  };
  d.mean = sum / static_cast<double>(m_values.size());
  d.min = *std::min_element(m_values.begin(), m_values.end());
  d.max = *std::max_element(m_values.begin(), m_values.end());
  d.p10 = at(0.1);
  d.p90 = at(0.9);
  const double median = at(0.5);
  const double width = std::max({d.p90 - d.p10, 0.05 * std::abs(median), std::numeric_limits<double>::min()});
  for (std::size_t r = 0; r < w.n.size(); ++r)
    if (w.n[r] > 0) judge(static_cast<int>(r), w.sum[r] / static_cast<float>(w.n[r]), median, width);
  m_judged[from] = {median, width};
  while (m_judged.size() > kJudgedKept) m_judged.erase(m_judged.begin());
  return d;
}

void RankSpread::judge(int rank, double value, double median, double width) {
  Rank& r = m_rank[static_cast<std::size_t>(rank)];
  const double z = (value - median) / width;
  r.distance = r.windows == 0 ? z : kDistanceWeight * r.distance + (1 - kDistanceWeight) * z;
  ++r.windows;
}

void RankSpread::remember(int rank, double step, double value) {
  Rank& r = m_rank[static_cast<std::size_t>(rank)];
  if (m_recentCap == 0) return;
  if (r.ring.size() < m_recentCap) {
    r.ring.emplace_back(static_cast<float>(step), static_cast<float>(value));
  } else {
    r.ring[r.head] = {static_cast<float>(step), static_cast<float>(value)};
    r.head = (r.head + 1) % m_recentCap;
  }
}

std::vector<int> RankSpread::standouts(std::size_t n) const {
  std::vector<int> out;
  for (int r = 0; r < m_ranks; ++r) {
    const Rank& rank = m_rank[static_cast<std::size_t>(r)];
    // A few windows first: one noisy step is not a rank that stands out.
    if (rank.windows >= 5 && std::abs(rank.distance) > kStandout) out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [this](int a, int b) { return std::abs(distance(a)) > std::abs(distance(b)); });
  if (out.size() > n) out.resize(n);
  return out;
}

double RankSpread::distance(int rank) const {
  return rank >= 0 && rank < m_ranks ? m_rank[static_cast<std::size_t>(rank)].distance : 0;
}

std::vector<std::pair<double, double>> RankSpread::recent(int rank) const {
  std::vector<std::pair<double, double>> out;
  if (rank < 0 || rank >= m_ranks) return out;
  const Rank& r = m_rank[static_cast<std::size_t>(rank)];
  out.reserve(r.ring.size());
  for (std::size_t i = 0; i < r.ring.size(); ++i) {
    const auto& p = r.ring[(r.head + i) % r.ring.size()];
    out.emplace_back(p.first, p.second);
  }
  return out;
}

double RankSpread::latest(int rank) const {
  if (rank < 0 || rank >= m_ranks) return std::numeric_limits<double>::quiet_NaN();
  const Rank& r = m_rank[static_cast<std::size_t>(rank)];
  if (r.ring.empty()) return std::numeric_limits<double>::quiet_NaN();
  return r.ring[(r.head + r.ring.size() - 1) % r.ring.size()].second;
}

std::size_t RankSpread::memoryBytes() const {
  std::size_t total = sizeof(*this) + m_values.capacity() * sizeof(float) + m_judged.size() * 64;
  for (const auto& [from, w] : m_open) total += w.sum.capacity() * sizeof(float) + w.n.capacity() * 4 + 64;
  for (const Rank& r : m_rank) total += sizeof(Rank) + r.ring.capacity() * sizeof(r.ring[0]);
  return total;
}

}  // namespace ptw::ui
