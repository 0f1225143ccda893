// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/throughput.h"

#include <algorithm>

#include "common/profile.h"
#include "common/strategies.h"

namespace ptw::core {

ThroughputMeter::ThroughputMeter(const Profile& profile)
    : ThroughputMeter(warmupSteps(profile), hasCoordinator(profile)) {}

void ThroughputMeter::add(const StepRecord& step) {
  StepGroup one;
  one.add(step);
  add(step.rank, one);
}

// A group never holds both warm-up steps and steps after them (Note [Step groups]).
void ThroughputMeter::add(int rankOf, const StepGroup& g) {
  if (rankOf < 0 || g.count <= 0) return;
  const auto rank = static_cast<std::size_t>(rankOf);
  if (rank >= m_all.size()) {
    m_all.resize(rank + 1);
    m_steady.resize(rank + 1);
    m_sinceStart.resize(rank + 1, 0);
  }
  const bool warm = m_sinceStart[rank] >= m_warmup;
  m_sinceStart[rank] += g.count;
  auto count = [&](Sums& sums) {
    sums.steps += g.count;
    sums.samples += g.samples;
    sums.busyS += g.stepMs / 1000.0;
    sums.ms += StepSplit{g.stepMs, g.dataMs, g.computeMs, g.commMs, g.optMs};
  };
  count(m_all[rank]);
  if (warm) count(m_steady[rank]);
}

void ThroughputMeter::add(const std::vector<Record>& batch) {
  for (const auto& r : batch)
    if (holdsSteps(r)) add(r.step.rank, asGroup(r));
}

void ThroughputMeter::restart() { std::fill(m_sinceStart.begin(), m_sinceStart.end(), 0); }

const ThroughputMeter::Sums& ThroughputMeter::counted(int rank) const {
  static const Sums none;
  if (rank < 0 || static_cast<std::size_t>(rank) >= m_all.size()) return none;
  const auto r = static_cast<std::size_t>(rank);
  return m_steady[r].steps > 0 ? m_steady[r] : m_all[r];
}

double ThroughputMeter::samplesPerS(int rank) const {
  const Sums& s = counted(rank);
  return s.busyS > 0 ? s.samples / s.busyS : 0;
}

double ThroughputMeter::stepsPerS(int rank) const {
  const Sums& s = counted(rank);
  return s.busyS > 0 ? static_cast<double>(s.steps) / s.busyS : 0;
}

StepSplit ThroughputMeter::split(int rank) const {
  const Sums& s = counted(rank);
  return s.steps == 0 ? StepSplit{} : s.ms / static_cast<double>(s.steps);
}

StepSplit ThroughputMeter::meanSplit() const {
  StepSplit sum;
  int ranks = 0;
  const int first = m_coordinatorOnly && m_all.size() > 1 ? 1 : 0;
  for (int r = first; r < static_cast<int>(m_all.size()); ++r) {
    if (counted(r).steps == 0) continue;
    sum += split(r);
    ++ranks;
  }
  return ranks == 0 ? StepSplit{} : sum / ranks;
}

std::int64_t ThroughputMeter::measuredSteps() const {
  const int ranks = countedRanks();
  std::int64_t fewest = ranks > 0 ? m_steady[0].steps : 0;
  for (int r = 1; r < ranks; ++r) fewest = std::min(fewest, m_steady[static_cast<std::size_t>(r)].steps);
  return fewest;
}

int ThroughputMeter::countedRanks() const {
  return m_coordinatorOnly ? std::min<int>(1, static_cast<int>(m_all.size())) : static_cast<int>(m_all.size());
}

double ThroughputMeter::total() const {
  const int ranks = countedRanks();
  double sum = 0;
  for (int r = 0; r < ranks; ++r) sum += samplesPerS(r);
  return sum;
}

}  // namespace ptw::core
