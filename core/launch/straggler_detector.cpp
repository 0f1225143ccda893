// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/straggler_detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace ptw::core {
namespace {

double orZero(double v) { return std::isnan(v) ? 0.0 : v; }

}  // namespace

std::string stragglerMessage(const Straggler& s) {
  char factor[32], seconds[32], share[32];
  std::snprintf(factor, sizeof factor, "%.1f", s.factor);
  if (s.forS < 10)
    std::snprintf(seconds, sizeof seconds, "%.1f", s.forS);
  else
    std::snprintf(seconds, sizeof seconds, "%.0f", s.forS);
  std::snprintf(share, sizeof share, "%.0f", 100 * s.phaseShare);
  std::string m = "rank " + std::to_string(s.rank) + (s.host.empty() ? "" : " on " + s.host) + ": " + factor +
                  "\u00d7 the median step for " + seconds + " s";
  if (!s.phase.empty()) m += std::string(", ") + s.phase + " " + share + "%";
  return m;
}

StragglerDetector::StragglerDetector(int ranks, StragglerOptions options, std::vector<std::string> hosts)
    : m_options(options), m_hosts(std::move(hosts)), m_ranks(static_cast<std::size_t>(std::max(ranks, 0))) {}

void StragglerDetector::add(const Record& r, double atS) {
  if (!holdsSteps(r)) return;
  const int rank = r.step.rank;
  if (rank < m_options.firstRank || rank >= static_cast<int>(m_ranks.size())) return;
  const StepGroup g = asGroup(r);
  if (g.count <= 0) return;
  // Note [Not reported]: a split nobody reported leaves the step time; nothing reported, nothing judged.
  const bool split = !std::isnan(g.dataMs) || !std::isnan(g.computeMs) || !std::isnan(g.optMs);
  const double own = split ? orZero(g.dataMs) + orZero(g.computeMs) + orZero(g.optMs) : g.stepMs;
  if (!std::isfinite(own) || own < 0) return;
  const double n = static_cast<double>(g.count);
  RankWindow& w = m_ranks[static_cast<std::size_t>(rank)];
  const double stepMs = std::isfinite(g.stepMs) ? g.stepMs : own;
  w.entries.push_back(
      {n, own / n, orZero(g.dataMs) / n, orZero(g.computeMs) / n, orZero(g.optMs) / n, stepMs / n, atS});
  w.steps += n;
  w.step = r.step.step;
  if (w.firstAt < 0) w.firstAt = atS;
  const double window = static_cast<double>(m_options.windowSteps);
  while (w.entries.size() > 1 && w.steps - w.entries.front().steps >= window) {
    w.steps -= w.entries.front().steps;
    w.entries.pop_front();
  }
}

// Judged once its window is full: windowSteps steps, or windowS seconds of reporting.
bool StragglerDetector::judged(const RankWindow& w, double nowS) const {
  if (w.entries.empty()) return false;
  return w.steps >= static_cast<double>(m_options.windowSteps) || nowS - w.firstAt >= m_options.windowS;
}

// The median own time a step over the window, each entry weighing its steps.
double StragglerDetector::medianOwnMs(const RankWindow& w) {
  std::vector<std::pair<double, double>> v;  // (own ms, steps)
  v.reserve(w.entries.size());
  for (const Entry& e : w.entries) v.emplace_back(e.ownMs, e.steps);
  std::sort(v.begin(), v.end());
  double seen = 0;
  for (const auto& [ms, steps] : v) {
    seen += steps;
    if (seen >= w.steps / 2) return ms;
  }
  return v.back().first;
}

Straggler StragglerDetector::describe(int rank, const RankWindow& w, double median) const {
  Straggler s;
  s.rank = rank;
  if (static_cast<std::size_t>(rank) < m_hosts.size()) s.host = m_hosts[static_cast<std::size_t>(rank)];
  s.factor = medianOwnMs(w) / median;
  s.step = w.step;
  // Where the time of its slow steps goes (the window's first steps may be before it
  // slowed), and how long they took: the rank's own measure, whenever their records came.
  double data = 0, compute = 0, opt = 0, slowMs = 0;
  for (const Entry& e : w.entries) {
    if (e.ownMs <= m_options.factor * median) continue;
    data += e.dataMs * e.steps, compute += e.computeMs * e.steps, opt += e.optMs * e.steps;
    slowMs += e.stepMs * e.steps;
  }
  s.forS = slowMs / 1000;
  const double own = data + compute + opt;
  if (own > 0) {
    const std::pair<double, const char*> phases[] = {{data, "data"}, {compute, "compute"}, {opt, "opt"}};
    const auto& most = *std::max_element(std::begin(phases), std::end(phases),
                                         [](const auto& a, const auto& b) { return a.first < b.first; });
    s.phase = most.second;
    s.phaseShare = most.first / own;
  }
  return s;
}

std::vector<Straggler> StragglerDetector::check(double nowS) {
  std::vector<Straggler> started;
  // Past windowS, a window holds no entry older than that (a rank that steps slowly).
  for (RankWindow& w : m_ranks)
    while (w.entries.size() > 1 && nowS - w.entries.front().at > m_options.windowS) {
      w.steps -= w.entries.front().steps;
      w.entries.pop_front();
    }
  std::vector<double> medians(m_ranks.size(), std::nan(""));
  std::vector<double> judgedMedians;
  for (std::size_t r = 0; r < m_ranks.size(); ++r)
    if (judged(m_ranks[r], nowS)) judgedMedians.push_back(medians[r] = medianOwnMs(m_ranks[r]));
  if (judgedMedians.size() < 2) return started;
  const auto mid = judgedMedians.begin() + static_cast<std::ptrdiff_t>(judgedMedians.size() / 2);
  std::nth_element(judgedMedians.begin(), mid, judgedMedians.end());
  double median = *mid;
  if (judgedMedians.size() % 2 == 0) median = (median + *std::max_element(judgedMedians.begin(), mid)) / 2;
  if (!(median > 0)) return started;
  for (std::size_t r = 0; r < m_ranks.size(); ++r) {
    RankWindow& w = m_ranks[r];
    if (std::isnan(medians[r])) continue;
    const bool slow = medians[r] > m_options.factor * median;
    if (slow && !w.straggling) {
      Straggler s = describe(static_cast<int>(r), w, median);
      started.push_back(s);
      if (w.named < 0) {
        w.named = static_cast<int>(m_named.size());
        m_named.push_back(s);
      } else {
        Straggler& kept = m_named[static_cast<std::size_t>(w.named)];
        s.factor = std::max(s.factor, kept.factor);
        kept = s;
      }
    } else if (slow && w.named >= 0) {
      Straggler& kept = m_named[static_cast<std::size_t>(w.named)];
      kept.factor = std::max(kept.factor, medians[r] / median);
    }
    w.straggling = slow;
  }
  return started;
}

void StragglerDetector::restart() {
  for (RankWindow& w : m_ranks) {
    const int named = w.named;
    w = RankWindow{};
    w.named = named;
  }
}

}  // namespace ptw::core
