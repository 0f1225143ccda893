// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/sweep.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/strategies.h"
#include "launch/launcher.h"
#include "launch/run_directory.h"
#include "launch/run_session.h"
#include "launch/run_store.h"

namespace ptw::core {
namespace {

const char* const kCommandSweeps =
    ": a command profile runs your program; a sweep varies its rank count only (--workers)";

// Note [Sweeping a command]: the program with `workers` processes, for `steps` where a template
// passes {hyper.max_steps} on; the rest of the profile (the command above all) as it is.
Profile commandProfileFor(const Profile& base, const std::string& strategy, int workers, std::int64_t steps) {
  PTW_CHECK(strategy == base.strategy.kind, "--strategies ", strategy, kCommandSweeps);
  // One process that starts the ranks itself (mpirun -np N) takes its count from its own
  // arguments: more such processes would each start all of them.
  PTW_CHECK(base.command.reportRanks == 0, "sweep: command.report_ranks is ", base.command.reportRanks,
            ": the program starts its ranks itself (mpirun), and a sweep varies only strategy.ranks, the "
            "processes ptw starts; set the program's own count in its arguments and run each by hand, or set "
            "command.report_ranks to 0");
  Profile p = base;
  p.hyper.maxSteps = steps;
  p.run.maxRestarts = 0;
  p.run.resumeFrom = "";
  p.strategy.ranks = workers;
  if (p.strategy.gpus.size() > static_cast<std::size_t>(workers))
    p.strategy.gpus.resize(static_cast<std::size_t>(workers));
  p.name = base.name + "-" + strategy + "-" + std::to_string(workers);
  auto errors = validate(p);
  PTW_CHECK(errors.empty(), "sweep: ", workers, " worker(s) cannot run this profile: ", errors.front().text(),
            "; leave ", workers, " out of the worker counts (--workers)");
  return p;
}

}  // namespace

Sweep::Sweep(SweepOptions options) : m_options(std::move(options)) {}

bool Sweep::sweepsCommand(const Profile& base) {
  const StrategyInfo* s = findStrategy(base.strategy.kind);
  return s && s->runsCommand;
}

std::vector<std::string> Sweep::defaultStrategies(const Profile& base) {
  std::vector<std::string> names;
  if (sweepsCommand(base)) return names;
  for (const auto& v : sweepVariants())
    if (!v.baseline && v.byDefault) names.push_back(v.name);
  return names;
}

const std::vector<std::string>& Sweep::strategyNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& v : sweepVariants()) n.push_back(v.name);
    return n;
  }();
  return names;
}

Profile Sweep::profileFor(const Profile& base, const std::string& strategy, int workers, std::int64_t steps) {
  if (sweepsCommand(base)) return commandProfileFor(base, strategy, workers, steps);
  const SweepVariant* variant = findSweepVariant(strategy);
  if (!variant) {
    std::string known;
    for (const auto& n : strategyNames()) known += (known.empty() ? "" : ", ") + n;
    PTW_FAIL("sweep: unknown strategy \"", strategy, "\" (known: ", known, ")");
  }
  Profile p = base;
  p.hyper.maxSteps = steps;
  p.hyper.epochs = 0;
  p.run.maxRestarts = 0;
  p.run.resumeFrom = "";
  p.strategy.kind = variant->strategy;  // Note [One name, one meaning] in common/strategies.cpp
  p.strategy.ranks = workers;
  p.strategy.ranks = trainingRanks(p);
  if (!variant->backend.empty()) p.strategy.backend = variant->backend;
  if (!variant->poolMode.empty()) p.strategy.poolMode = variant->poolMode;
  // GPUs listed in the profile: each configuration takes as many of them, in order, as it has ranks.
  if (p.strategy.gpus.size() > static_cast<std::size_t>(p.strategy.ranks))
    p.strategy.gpus.resize(static_cast<std::size_t>(p.strategy.ranks));
  p.name = base.name + "-" + strategy + "-" + std::to_string(p.strategy.ranks);
  auto errors = validate(p);
  PTW_CHECK(errors.empty(), "sweep: ", strategy, " with ", workers,
            " worker(s) cannot run this profile: ", errors.front().text(), "; leave ", strategy,
            " out of the strategies (--strategies, or untick it)");
  return p;
}

void Sweep::requestStop() {
  m_stop = true;
  m_current.stop();
}

std::vector<std::pair<std::string, int>> Sweep::plan() const {
  const auto& o = m_options;
  PTW_CHECK(!o.workers.empty(), "sweep: --workers: give at least one worker count");
  PTW_CHECK(o.steps >= 1, "sweep: --steps must be >= 1, got ", o.steps);
  for (int w : o.workers)
    PTW_CHECK(w >= 1 && w <= kMaxWorkers, "sweep: --workers: each count must be in 1..", kMaxWorkers, ", got ", w);
  if (sweepsCommand(o.base)) return commandPlan();
  // Every configuration is checked before anything runs.
  const std::string& baseline = sweepBaseline().name;
  std::vector<std::pair<std::string, int>> plan{{baseline, 1}};
  for (const auto& s : o.strategies) {
    if (s == baseline) continue;
    for (int w : o.workers) {
      profileFor(o.base, s, w, o.steps);
      plan.emplace_back(s, w);
    }
  }
  return plan;
}

std::vector<std::pair<std::string, int>> Sweep::commandPlan() const {
  const auto& o = m_options;
  const std::string& kind = o.base.strategy.kind;
  std::string refused;
  for (const auto& s : o.strategies)
    if (s != kind) refused += (refused.empty() ? "" : ",") + s;
  PTW_CHECK(refused.empty(), "--strategies ", refused, kCommandSweeps);
  std::vector<int> counts = o.workers;
  // The one-process run is the baseline: first, so that every other point has it.
  if (auto one = std::find(counts.begin(), counts.end(), 1); one != counts.end())
    std::rotate(counts.begin(), one, one + 1);
  std::vector<std::pair<std::string, int>> plan;
  for (int w : counts) {
    profileFor(o.base, kind, w, o.steps);
    plan.emplace_back(kind, w);
  }
  return plan;
}

std::vector<SweepPoint> Sweep::run(const std::function<void(const SweepPoint&, int, int)>& progress) {
  const auto& o = m_options;
  const auto plan = this->plan();
  const std::string runsDir = o.runsDir.empty() ? defaultRunsDirectory() : o.runsDir;
  RunStore store(runsDir);
  std::vector<SweepPoint> points;
  const bool command = sweepsCommand(o.base);
  double single = 0;
  for (const auto& [strategy, workers] : plan) {
    if (m_stop) break;
    const Profile p = profileFor(o.base, strategy, workers, o.steps);
    SweepPoint point;
    point.strategy = strategy;
    point.workers = trainingRanks(p);
    RunSession session(RunSessionOptions(p).setRunsDir(runsDir).setWorkerPath(o.workerPath).setStore(&store));
    m_current.set(&session);
    if (m_stop) session.requestStop();
    LaunchObserver quiet;
    RunResult result;
    try {
      session.begin();
      result = session.run(quiet);
    } catch (const Error& e) {
      result.report.status = RunReport::Status::Failed;
      result.report.message = e.what();
    }
    m_current.clear();
    point.runId = session.runId();
    point.status = statusName(result.report.status);
    point.message = result.report.message;
    const ThroughputMeter& meter = session.throughput();
    point.samplesPerS = meter.total();
    point.measured = meter.measured();
    point.stepMs = meter.meanSplit();
    const auto steps = result.metrics.find("throughput.steps_per_s");
    point.stepsPerS = steps != result.metrics.end() && std::isfinite(steps->second) ? steps->second : 0;
    // Steps without samples: a program that reports its loss alone (Note [Sweeping a command]).
    point.samplesReported = point.samplesPerS > 0 || meter.stepsPerS(0) <= 0;
    if (!point.samplesReported) point.samplesPerS = std::nan("");
    if (command ? workers == 1 : strategy == sweepBaseline().name) single = point.samplesPerS;
    point.efficiency = single > 0 ? point.samplesPerS / (point.workers * single) : std::nan("");  // no baseline
    points.push_back(point);
    if (progress) progress(point, static_cast<int>(points.size()), static_cast<int>(plan.size()));
  }
  return points;
}

int Sweep::fastest(const std::vector<SweepPoint>& points) {
  int best = -1;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (points[i].status == "finished" && std::isfinite(points[i].samplesPerS) &&
        (best < 0 || points[i].samplesPerS > points[static_cast<std::size_t>(best)].samplesPerS))
      best = static_cast<int>(i);
  return best;
}

std::string Sweep::toCsv(const std::vector<SweepPoint>& points) {
  std::ostringstream out;
  out.precision(9);
  out << "strategy,workers,samples_per_s,efficiency,status,run_id,fastest,step_ms,data_ms,compute_ms,comm_ms,opt_ms,"
         "steps_per_s\n";
  const int best = fastest(points);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    out << p.strategy << ',' << p.workers << ',';
    if (std::isfinite(p.samplesPerS)) out << p.samplesPerS;  // empty: not reported
    out << ',';
    if (!std::isnan(p.efficiency)) out << p.efficiency;  // empty: no baseline
    out << ',' << p.status << ',' << p.runId << ',' << (static_cast<int>(i) == best ? 1 : 0) << ',' << p.stepMs.stepMs
        << ',' << p.stepMs.dataMs << ',' << p.stepMs.computeMs << ',' << p.stepMs.commMs << ',' << p.stepMs.optMs << ','
        << p.stepsPerS << '\n';
  }
  return out.str();
}

std::string Sweep::toJson(const std::vector<SweepPoint>& points) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  const int best = fastest(points);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    j.push_back({{"strategy", p.strategy},
                 {"workers", p.workers},
                 {"samples_per_s", p.samplesPerS},
                 {"efficiency", p.efficiency},
                 {"status", p.status},
                 {"message", p.message},
                 {"run_id", p.runId},
                 {"fastest", static_cast<int>(i) == best},
                 {"step_ms", stepSplitJson<nlohmann::ordered_json>(p.stepMs)},
                 {"steps_per_s", p.stepsPerS}});
  }
  return j.dump(2) + "\n";
}

}  // namespace ptw::core
