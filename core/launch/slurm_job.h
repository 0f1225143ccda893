// SPDX-License-Identifier: GPL-3.0-or-later
// SlurmJob: the SLURM job a run's ranks start in (hosts.launcher "slurm"; docs/multihost.md),
// found in ptw's environment or written for the user to submit, and released at the run's end.
//
// Note [SLURM job]
// Inside an allocation (SLURM_JOB_ID in ptw's environment: salloc, an sbatch script, srun) the
// ranks start in it: on hosts.hosts when given, else on the allocation's nodes, each taking
// SLURM_TASKS_PER_NODE ranks, which must add up to the run's. The job is the user's: ptw leaves
// it as it found it.
// Outside one, ptw writes RUN/job.sbatch, a job of the run's shape named ptw-RUN (the run
// folder's name, unique to the run), says to submit it, and waits for it to run, asking squeue
// every second for half a minute and every 10 s after that; a stop ends the wait. Once the job
// runs, the ranks start in it as above (hosts.hosts, else its nodes, the ranks spread in
// blocks), once its nodes have passed the check that inside an allocation comes before the
// run folder is made (Note [SLURM node check] in slurm_starter.h). The job's batch step only holds the allocation. It
// ends when ptw writes RUN/slurm.release at the run's end (ptw then also cancels the job by name, which takes a job
// still pending too), when RUN/slurm.alive, which ptw touches every 5 s while it waits and runs,
// has not changed for a minute (ptw is gone), or at the job's time limit.
//
// Note [Submitted runs]
// `ptw submit` (the window's Submit) makes the run folder here, writes RUN/submit.sbatch, a
// job of the same shape whose batch step is `ptw --headless -p RUN/profile.json --run-folder
// RUN`, and gives it to sbatch. The supervisor then runs inside the allocation (the first case
// above), records the run in the runs directory when the job starts, and needs nothing of the
// desktop: the window attaches to it (follow_source.h) and may be closed. --run-folder makes
// the run use the folder submit printed rather than a new one, so that the folder names the
// run before it has an id.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/profile.h"
#include "launch/launcher.h"

namespace ptw::core {

/// What `ptw submit` made: the job's id and the run's folder.
struct SubmittedJob {
  std::string id;
  std::string runDir;
};

/// `ptw submit` (Note [Submitted runs]): makes the run folder under `runsDir`, writes its job
/// and submits it; `ptw` is the program the job runs. Throws ptw::Error naming what is wrong
/// (not a SLURM profile, no sbatch, sbatch refused it), and then leaves no folder behind.
SubmittedJob submitRun(const Profile& profile, const std::string& runsDir, const std::string& ptw);

/// Example: SlurmJob job(profile, runDir, processEnvironment()); if (job.acquire(observer, stop)) ...
class SlurmJob {
 public:
  using Env = std::map<std::string, std::string>;
  /// `env`: ptw's environment, where SLURM_JOB_ID says whether it runs inside an allocation.
  SlurmJob(Profile profile, std::string runDir, Env env);
  ~SlurmJob();  ///< release()
  SlurmJob(const SlurmJob&) = delete;
  SlurmJob& operator=(const SlurmJob&) = delete;

  /// The allocation ptw runs in, or the job it writes and then waits for (Note [SLURM job]),
  /// saying what it waits for through `observer.onLog(-1, ...)`. false: `stop` came while
  /// waiting, and nothing started. Throws ptw::Error naming what is wrong.
  bool acquire(LaunchObserver& observer, const std::atomic<bool>& stop);
  /// Outside an allocation: ends the job (the release file, scancel). Repeatable.
  void release();

  bool insideAllocation() const { return m_inside; }
  const std::string& id() const { return m_id; }
  const std::vector<std::string>& rankHosts() const { return m_rankHosts; }

  /// `profile` with the job's nodes as hosts.hosts, each with its ranks as slots, where it
  /// names none (Note [SLURM ranks]): what the ranks are given, so that a rank knows its node's
  /// place as under the ssh launcher (torchrun's variables for a command rank, the host column).
  Profile placed(const Profile& profile) const;

  /// ptw-NAME, NAME the run folder's name.
  static std::string jobName(const std::string& runDir);
  /// RUN/job.sbatch's text for `profile`'s ranks; throws ptw::Error when the run folder's path
  /// cannot be written in an #SBATCH line.
  static std::string script(const Profile& profile, const std::string& runDir);
  /// RUN/submit.sbatch's text (Note [Submitted runs]): `ptw` runs the run inside the job.
  static std::string submitScript(const Profile& profile, const std::string& runDir, const std::string& runsDir,
                                  const std::string& ptw);
  /// The node of each rank inside an allocation: hosts.hosts, else SLURM_JOB_NODELIST with
  /// SLURM_TASKS_PER_NODE ranks each. Throws ptw::Error naming the variable that is missing or
  /// malformed, or that does not give the run's ranks.
  static std::vector<std::string> allocationRankHosts(const Profile& profile, const Env& env);
  /// The node of each rank in a job ptw waited for: hosts.hosts, else the job's nodes
  /// (`nodelist`, squeue's %N), the ranks spread over them in blocks.
  static std::vector<std::string> jobRankHosts(const Profile& profile, const std::string& nodelist);

 private:
  static std::string shapeLines(const Profile& profile, const std::string& runDir);
  bool waitForJob(LaunchObserver& observer, const std::atomic<bool>& stop);
  void keepAlive();

  Profile m_profile;
  std::string m_runDir;
  Env m_env;
  bool m_inside = false;
  bool m_wrote = false;  ///< the script is out: release() has a job to end
  std::string m_id;
  std::vector<std::string> m_rankHosts;
  std::thread m_keeper;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_ending = false;
};

}  // namespace ptw::core
