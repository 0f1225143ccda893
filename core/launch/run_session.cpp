// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/run_session.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/strategies.h"
#include "launch/forwarding_observer.h"
#include "launch/preflight.h"
#include "launch/run_directory.h"
#include "launch/run_store.h"
#include "launch/supervisor.h"

namespace ptw::core {

// Passes everything on to the caller's observer and keeps what the final metrics are made
// of: each reporting rank's last step and the last validation.
class RunSession::Tracker final : public ForwardingObserver {
 public:
  Tracker(LaunchObserver& outer, const Profile& profile)
      : ForwardingObserver(outer), m_profile(profile), m_last(reportingRanks(profile)) {}

  void onRecords(std::vector<Record>& batch) override {
    for (const auto& r : batch) {  // before the outer observer, which may take the batch
      if (r.kind == Record::Kind::Validation) {
        m_valLoss = r.valLoss;
        m_valAccuracy = r.valAccuracy;
        continue;
      }
      m_last.add(r);
    }
    ForwardingObserver::onRecords(batch);
  }

  const std::vector<RankFinal>& ranks() const { return m_last.ranks(); }

  /// The metrics expectations, the summary and the store speak of (knownMetrics()).
  std::map<std::string, double> metrics(double wallS, const ThroughputMeter& throughput) const {
    double loss = 0, stepsPerS = 0;
    std::int64_t steps = 0;
    int seen = 0;
    // A coordinator (the pool's rank 0) already reports the whole run's loss and samples.
    const std::size_t counted = hasCoordinator(m_profile) ? std::min<std::size_t>(1, m_last.size()) : m_last.size();
    for (std::size_t i = 0; i < counted; ++i) {
      const auto& r = m_last[i];
      if (!r.seen) continue;
      loss += r.last.loss;
      const double sps = throughput.stepsPerS(static_cast<int>(i));
      stepsPerS = seen == 0 ? sps : std::min(stepsPerS, sps);
      steps = seen == 0 ? r.last.step : std::min(steps, r.last.step);
      ++seen;
    }
    const double nan = std::nan("");
    const bool measured = seen && throughput.measured();  // Note [Warm-up steps]
    return {{"final.loss", seen ? loss / seen : nan},
            {"final.step", static_cast<double>(steps)},
            {"throughput.samples_per_s", measured ? throughput.total() : nan},
            {"throughput.steps_per_s", measured ? stepsPerS : nan},
            {"final.val_loss", m_valLoss},
            {"final.val_accuracy", m_valAccuracy},
            {"wall_s", wallS}};
  }

 private:
  const Profile& m_profile;
  LastSteps m_last;
  double m_valLoss = std::nan("");
  double m_valAccuracy = std::nan("");
};

RunSession::RunSession(RunSessionOptions options) : m_options(std::move(options)) {
  if (m_options.runsDir.empty()) m_options.runsDir = defaultRunsDirectory();
  if (m_options.workerPath.empty()) m_options.workerPath = Launcher::defaultWorkerPath();
}

RunSession::~RunSession() { m_stopTarget.store(nullptr); }

void RunSession::begin() {
  PTW_CHECK(!m_supervisor, "run session: begin() called twice");
  const Profile& profile = m_options.profile;
  Launcher::checkWorker(m_options.workerPath);
  if (profile.run.port != 0) Launcher::checkPortFree(profile.run.port);  // before anything is created
  int rendezvousPort = 0;  // across hosts: the port rank 0's host was found to open
  // A submitted run's folder is there already: the hosts must see it, not the runs directory.
  const std::string shared = m_options.runFolder.empty() ? m_options.runsDir : m_options.runFolder;
  const std::string problem = runProblem(profile, m_options.workerPath, &rendezvousPort, shared);
  PTW_CHECK(problem.empty(), problem);
  if (m_options.runFolder.empty()) {
    m_runDir = createRunDirectory(m_options.runsDir, profile);
  } else {  // a submitted run's (Note [Submitted runs] in slurm_job.h)
    PTW_CHECK(::access((m_options.runFolder + "/profile.json").c_str(), R_OK) == 0, "--run-folder ",
              m_options.runFolder, ": holds no profile.json; give the run folder `ptw submit` printed");
    m_runDir = m_options.runFolder;
  }
  m_store = m_options.store;
  if (!m_store) {
    m_ownStore = std::make_unique<RunStore>(m_options.runsDir, m_options.storeOptions);
    m_store = m_ownStore.get();
  }
  m_runId = m_store->beginRun(m_runDir, profile);
  m_supervisor = std::make_unique<Supervisor>(SupervisorOptions(profile, m_runDir, m_options.workerPath)
                                                  .setStore(m_store, m_runId)
                                                  .setWorkerArgs(m_options.workerArgs)
                                                  .setRendezvousPort(rendezvousPort));
  m_stopTarget.store(m_supervisor.get());
  if (m_stopRequested.load()) m_supervisor->requestStop();
}

void RunSession::requestStop() {
  m_stopRequested.store(true);
  if (Supervisor* s = m_stopTarget.load()) s->requestStop();
}

void RunSession::requestStacks() {
  if (Supervisor* s = m_stopTarget.load()) s->requestStacks();
}

std::string RunSession::storePath() const { return m_store ? m_store->path() : std::string(); }

const ThroughputMeter& RunSession::throughput() const {
  return m_supervisor ? m_supervisor->throughput() : m_noThroughput;
}

RunResult RunSession::run(LaunchObserver& observer) {
  RunResult result;
  if (!m_supervisor) {
    result.started = false;
    result.report.status = RunReport::Status::Failed;
    result.report.message = "run session: run() before begin()";
    return result;
  }
  Tracker tracker(observer, m_options.profile);
  try {
    result.report = m_supervisor->run(tracker);
  } catch (const std::exception& e) {  // nothing could be started: said, and stored as failed
    result.started = false;
    result.report = RunReport{};
    result.report.status = RunReport::Status::Failed;
    result.report.message = e.what();
  }
  result.attempts = std::max(1, m_supervisor->attempts());
  result.ranks = tracker.ranks();
  result.stragglers = m_supervisor->stragglers();
  result.metrics = tracker.metrics(result.report.wallS, m_supervisor->throughput());
  std::string thrown;
  try {
    m_store->endRun(m_runId, statusName(result.report.status), result.report.message, result.metrics["final.loss"],
                    result.metrics["throughput.samples_per_s"], result.attempts, m_options.packProgress);
  } catch (const std::exception& e) {
    thrown = e.what();
  }
  result.storeError = !m_store->error().empty() ? m_store->error() : thrown;
  // A run that could not be stored has failed, whatever the ranks did; a failure of its own
  // keeps its message (the store's error is in storeError).
  if (!result.storeError.empty() && result.report.status != RunReport::Status::Failed) {
    result.report.status = RunReport::Status::Failed;
    result.report.message = result.storeError;
  }
  return result;
}

}  // namespace ptw::core
