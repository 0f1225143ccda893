// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/supervisor.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>

#include "common/command.h"
#include "common/error.h"
#include "common/launcher_env.h"
#include "common/launcher_kinds.h"
#include "common/strategies.h"
#include "launch/control_channel.h"
#include "launch/forwarding_observer.h"
#include "launch/preflight.h"
#include "launch/rank_starters.h"
#include "launch/run_store.h"
#include "launch/slurm_job.h"

namespace ptw::core {
namespace {

// Passes everything on to the caller's observer, counts throughput, records to the store,
// and names stragglers (Note [Stragglers]) to the caller as the supervisor's own log lines.
class StoringObserver final : public ForwardingObserver {
 public:
  StoringObserver(LaunchObserver& outer, RunStore* store, std::int64_t runId, Supervisor& owner,
                  ThroughputMeter& throughput, StragglerDetector& stragglers)
      : ForwardingObserver(outer),
        m_store(store),
        m_runId(runId),
        m_owner(owner),
        m_throughput(throughput),
        m_stragglers(stragglers) {}
  void setAttempt(int a) { m_attempt = a; }
  void onRecords(std::vector<Record>& batch) override {
    m_throughput.add(batch);  // before the outer observer, which may take the batch
    const double now = secondsSinceStart();
    for (const Record& r : batch) m_stragglers.add(r, now);
    if (m_store) {
      m_store->append(m_runId, m_attempt, batch);
      if (!m_store->error().empty()) m_owner.requestStop();  // a run we cannot record is stopped, not lost
    }
    ForwardingObserver::onRecords(batch);
    // Judging every rank costs about a record's worth of work for each of its window's
    // steps: done every quarter of the ranks' windows of steps, or every 250 ms.
    m_steps += batch.size();
    if (m_steps >= m_checkSteps || now - m_checkedAt >= kCheckS) check(now);
  }
  /// Judges the ranks now (at the end of an attempt, too: a short run's last window).
  void check(double now) {
    m_checkedAt = now, m_steps = 0;
    for (const Straggler& s : m_stragglers.check(now))
      ForwardingObserver::onLog(-1, "ptw: warning: straggler: " + stragglerMessage(s));
  }
  double secondsSinceStart() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
  }
  void onRestart(int attempt, std::int64_t step) override {
    m_throughput.restart();
    m_stragglers.restart();
    ForwardingObserver::onRestart(attempt, step);
  }

 private:
  static constexpr double kCheckS = 0.25;
  RunStore* m_store;
  std::int64_t m_runId;
  Supervisor& m_owner;
  ThroughputMeter& m_throughput;
  StragglerDetector& m_stragglers;
  int m_attempt = 0;
  const std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
  double m_checkedAt = 0;
  std::size_t m_steps = 0;  ///< records since the last check
  const std::size_t m_checkSteps = std::max<std::size_t>(1, m_stragglers.checkEvery());
};

// The detector a run of `p` judges its ranks with: a pool's coordinator is no rank like the
// others, and a host is known where each rank is a process of its own.
StragglerDetector stragglerDetectorFor(const Profile& p) {
  const int ranks = reportingRanks(p);
  std::vector<std::string> hosts = rankHosts(p);
  if (static_cast<int>(hosts.size()) != ranks) hosts.clear();
  return StragglerDetector(ranks, StragglerOptions().setFirstRank(hasCoordinator(p) ? 1 : 0), std::move(hosts));
}

// The port attempt `attempt`'s ranks meet on across hosts (Note [Rendezvous port]): the one
// checked before the run, asked of rank 0's host again for a restart when hosts.port is 0.
// 0 where none was checked. Returns "" or the problem that stops the restart.
std::string attemptRendezvousPort(const SupervisorOptions& o, int attempt, int& port) {
  port = o.rendezvousPort;
  if (port == 0 || attempt == 0 || o.profile.hosts.port != 0 || launcherOf(o.profile).kind != LauncherKind::Ssh)
    return "";
  return rendezvousPortProblem(o.profile, o.workerPath, port);
}

// The profile the ranks are given and the file the first attempt's read it from: the run's,
// naming a SLURM job's nodes where the run's names none (Note [SLURM ranks]), so that each rank
// learns its node's place; `observer` is told those nodes.
struct RanksProfile {
  Profile profile;
  std::string path;
};
RanksProfile ranksProfile(const SupervisorOptions& o, const SlurmJob* slurm, LaunchObserver& observer) {
  RanksProfile r{slurm ? slurm->placed(o.profile) : o.profile, o.runDir + "/profile.json"};
  if (r.profile.hosts.hosts == o.profile.hosts.hosts) return r;
  r.path = o.runDir + "/profile.nodes.json";
  saveProfile(r.profile, r.path);
  observer.onHosts(rankHosts(r.profile));
  return r;
}

// Note [SLURM job]: `job` acquired (false: a stop came while waiting for it). Inside an
// allocation its nodes were checked before the run folder was made (runProblem); a job ptw
// waited for has them only now, and they are checked here, before any rank starts (thrown).
bool acquireSlurmJob(const SupervisorOptions& o, SlurmJob& job, LaunchObserver& observer,
                     const std::atomic<bool>& stop) {
  if (!job.acquire(observer, stop)) return false;
  if (!job.insideAllocation()) {
    const std::string problem = slurmNodesProblem(o.profile, o.workerPath, job.id(), job.rankHosts(), o.runDir);
    PTW_CHECK(problem.empty(), problem);
  }
  return true;
}

}  // namespace

std::int64_t checkpointStep(const std::string& runDir) {
  std::ifstream in(runDir + "/checkpoint.step");
  std::int64_t step = -1;
  if (in >> step) return step;
  return -1;
}

Supervisor::Supervisor(SupervisorOptions options)
    : m_options(std::move(options)),
      m_throughput(m_options.profile),
      m_stragglers(stragglerDetectorFor(m_options.profile)) {}

void Supervisor::requestStop() {
  m_stopRequested.store(true);
  m_current.stop();
}

void Supervisor::requestStacks() { m_current.stacks(); }

RunReport Supervisor::run(LaunchObserver& observer) {
  const auto& o = m_options;
  m_throughput = ThroughputMeter(o.profile);
  StoringObserver storing(observer, o.store, o.runId, *this, m_throughput, m_stragglers);
  RunReport report;
  // Note [Control channel]: `ptw stop` asks for the stop a SIGINT gives, for every attempt;
  // `ptw stacks` for the ranks' stacks.
  ControlChannel control(
      o.runDir, [this] { requestStop(); }, [this] { requestStacks(); });
  if (!control.problem().empty()) observer.onLog(-1, "ptw: " + control.problem());
  // Note [SLURM job]: held for every attempt, released when the run ends.
  std::unique_ptr<SlurmJob> slurm;
  if (launcherOf(o.profile).kind == LauncherKind::Slurm) {
    slurm = std::make_unique<SlurmJob>(o.profile, o.runDir, processEnvironment());
    if (!acquireSlurmJob(o, *slurm, observer, m_stopRequested)) {
      report.status = RunReport::Status::Stopped;
      report.message = "stopped by request while waiting for the SLURM job to start";
      return report;
    }
  }
  const RanksProfile ranks = ranksProfile(o, slurm.get(), storing);
  m_stragglers = stragglerDetectorFor(ranks.profile);
  const int maxRestarts = o.profile.run.maxRestarts;
  for (int attempt = 0;; ++attempt) {
    std::string profilePath = ranks.path;
    if (attempt > 0) {
      Profile resumed = ranks.profile;
      const std::int64_t step = checkpointStep(o.runDir);
      resumed.run.resumeFrom = step >= 0 ? o.runDir + "/checkpoint.pt" : o.profile.run.resumeFrom;
      profilePath = o.runDir + "/profile.attempt" + std::to_string(attempt) + ".json";
      saveProfile(resumed, profilePath);
      std::string why = report.message;
      observer.onLog(
          -1, "ptw: restarting (attempt " + std::to_string(attempt + 1) + " of " + std::to_string(maxRestarts + 1) +
                  ") from " +
                  (step >= 0                          ? "the checkpoint at step " + std::to_string(step)
                   : o.profile.run.resumeFrom.empty() ? std::string("the start")
                                                      : "the checkpoint it started from, " + o.profile.run.resumeFrom) +
                  " after: " + why);
      storing.onRestart(attempt, std::max<std::int64_t>(step, 0));
    }
    storing.setAttempt(attempt);
    LaunchOptions lo(o.workerPath, profilePath, processCount(o.profile));
    lo.setOutDir(o.runDir).setPort(o.profile.run.port).setStallTimeoutS(o.profile.run.timeoutS);
    if (strategyOf(o.profile).runsCommand) {  // Note [Script ranks]
      lo.commandRanks = true;
      lo.setStopGraceS(o.profile.command.stopGraceS);
      // A program told the limit ({hyper.max_steps} in its arguments) ends there itself, with
      // whatever it does at its end (a checkpoint); one that is not told is stopped there.
      if (!commandNamesField(o.profile, "hyper.max_steps")) lo.stopAtStep = o.profile.hyper.maxSteps;
      lo.reportRanks = reportingRanks(o.profile);
    }
    if (strategyOf(o.profile).ranksPerProcess > 0) {  // Note [Synthetic ranks]
      lo.workersNameRanks = true;
      lo.reportRanks = reportingRanks(o.profile);
    }
    lo.stopOnDiverged = o.profile.run.onNan == "stop";
    int port = 0;
    if (std::string problem = attemptRendezvousPort(o, attempt, port); !problem.empty()) {
      report = RunReport{};
      report.status = RunReport::Status::Failed;
      report.message = "restart could not start the ranks: " + problem;
      break;
    }
    lo.starter = makeRankStarter(o.profile, o.workerPath, port, slurm.get());
    lo.attempt = attempt;
    lo.extraWorkerArgs = o.workerArgs;
    if (o.store)  // Note [Ranks write their steps]
      if (std::string file = o.store->stepFileForRanks(o.runId); !file.empty())
        lo.setStepFile(std::move(file), o.store->stepFileLimit());
    Launcher launcher(lo);
    m_current.set(&launcher);
    if (m_stopRequested.load()) launcher.requestStop();
    m_attempts = attempt + 1;
    try {
      report = launcher.run(storing);
    } catch (...) {
      m_current.clear();
      if (attempt == 0) throw;
      report = RunReport{};
      report.status = RunReport::Status::Failed;
      report.message = "restart could not start the ranks";
    }
    m_current.clear();
    storing.check(storing.secondsSinceStart());
    if (o.store) {
      o.store->flush();
      if (!o.store->error().empty()) {
        report.status = RunReport::Status::Failed;
        report.message = o.store->error();
        break;
      }
    }
    // A rank that could not write the run's metrics would meet the same full disk again.
    const bool unrecorded = report.failedExit.exitedWith(WorkerExit::CannotStoreMetrics);
    if (report.status != RunReport::Status::Failed || attempt >= maxRestarts || m_stopRequested.load() || unrecorded)
      break;
  }
  return report;
}

}  // namespace ptw::core
