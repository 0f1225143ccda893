// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/synthetic_ranks.h"

#include <signal.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <thread>

namespace ptw::engine {
namespace {

// Where a step's time goes when nothing slows it: a share of the rank's step each.
constexpr double kDataShare = 0.15, kComputeShare = 0.60, kCommShare = 0.15, kOptShare = 0.10;
constexpr std::int64_t kStepsPerEpoch = 100;
constexpr std::int64_t kMemBytes = 256LL << 20;

std::int64_t nanos(double ms) { return std::llround(ms * 1e6); }
std::chrono::nanoseconds toDuration(double ms) { return std::chrono::nanoseconds(static_cast<std::int64_t>(ms * 1e6)); }

}  // namespace

double SyntheticRanks::uniform(std::uint64_t& state) {  // splitmix64: cheap, and the same everywhere
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

SyntheticRanks::SyntheticRanks(SyntheticOptions options, Clock::time_point start)
    : m_o(std::move(options)), m_ranks(static_cast<std::size_t>(std::max(0, m_o.endRank - m_o.firstRank))) {
  const double periodMs = 1000.0 / m_o.rate;
  for (std::size_t i = 0; i < m_ranks.size(); ++i) {
    Rank& r = m_ranks[i];
    r.rng = m_o.seed * 0x100000001B3ULL + static_cast<std::uint64_t>(m_o.firstRank + static_cast<int>(i)) + 1;
    r.baseMs = periodMs * (0.97 + 0.06 * uniform(r.rng));
    // The ranks' steps end spread over a period, not all at once.
    r.next = start + toDuration(periodMs * uniform(r.rng));
  }
}

core::StepRecord SyntheticRanks::makeStep(int rank, std::int64_t step, double baseMs,
                                          const std::function<double()>& noise) const {
  const double slow = m_o.fault.slows(rank, step) ? m_o.fault.factor : 1.0;
  auto jitter = [&noise] { return 0.9 + 0.2 * noise(); };
  core::StepRecord s;
  s.rank = rank;
  s.step = step;
  s.epoch = (step - 1) / kStepsPerEpoch;
  const double tau = static_cast<double>(m_o.maxSteps) / 5.0 + 1.0;
  // As a real rank's: a loss of a float tensor, times of whole nanoseconds of a steady
  // clock, the step's time its parts' together (what the store's chunks are made for).
  s.loss = static_cast<float>(0.05 + 2.0 * std::exp(-static_cast<double>(step) / tau) * jitter());
  const std::int64_t data = nanos(baseMs * kDataShare * jitter() * slow),
                     compute = nanos(baseMs * kComputeShare * jitter() * slow),
                     comm = nanos(baseMs * kCommShare * jitter()), opt = nanos(baseMs * kOptShare * jitter() * slow);
  s.dataMs = static_cast<double>(data) / 1e6;
  s.computeMs = static_cast<double>(compute) / 1e6;
  s.commMs = static_cast<double>(comm) / 1e6;
  s.optMs = static_cast<double>(opt) / 1e6;
  s.stepMs = static_cast<double>(data + compute + comm + opt) / 1e6;
  s.samplesPerS = static_cast<double>(m_o.batchSize) * 1000.0 / s.stepMs;
  s.lr = m_o.lr;
  s.memBytes = kMemBytes;
  return s;
}

void SyntheticRanks::emitDue(Clock::time_point now, const Sink& sink) {
  const bool firstAttempt = m_o.attempt == 0;
  for (std::size_t i = 0; i < m_ranks.size(); ++i) {
    Rank& r = m_ranks[i];
    const int rank = m_o.firstRank + static_cast<int>(i);
    while (!r.hung && r.step < m_o.maxSteps && r.next <= now) {
      const std::int64_t step = r.step + 1;
      core::Record rec;
      rec.step = makeStep(rank, step, r.baseMs, [&r] { return uniform(r.rng); });
      // The step ended at r.next; the next one ends its own time later.
      r.next += toDuration(rec.step.stepMs);
      r.step = step;
      sink(rec);
      ++m_sent;
      if (firstAttempt && m_o.fault.rank == rank && m_o.fault.step == step) {
        if (m_o.fault.kind == "hang-at-step") r.hung = true;
        if (m_o.fault.kind == "kill-at-step") ::raise(SIGKILL);
      }
    }
  }
}

bool SyntheticRanks::finished() const {
  return std::all_of(m_ranks.begin(), m_ranks.end(), [&](const Rank& r) { return r.step >= m_o.maxSteps; });
}

std::int64_t SyntheticRanks::slowestStep() const {
  std::int64_t slowest = LLONG_MAX;
  for (const Rank& r : m_ranks) slowest = std::min(slowest, r.step);
  return m_ranks.empty() ? 0 : slowest;
}

void SyntheticRanks::run(const std::atomic<bool>& stop, const Sink& sink,
                         const std::function<void(std::int64_t)>& passed) {
  // Woken every 10 ms, or twice a step when steps are shorter: a few hundred wakes a second
  // at most, whatever the number of ranks.
  const auto tick = std::min(std::chrono::nanoseconds(10'000'000), toDuration(500.0 / m_o.rate));
  auto wake = Clock::now();
  while (!stop.load() && !finished()) {
    emitDue(Clock::now(), sink);
    if (passed) passed(slowestStep());
    wake += tick;
    const auto now = Clock::now();
    if (wake < now) wake = now;  // fallen behind: emitDue catches up, no burst of wakes
    std::this_thread::sleep_until(wake);
  }
  for (std::size_t i = 0; i < m_ranks.size(); ++i) {
    if (m_ranks[i].hung) continue;
    core::Record done;
    done.kind = core::Record::Kind::Done;
    done.step.rank = m_o.firstRank + static_cast<int>(i);
    done.step.step = m_ranks[i].step;
    sink(done);
  }
}

}  // namespace ptw::engine
