// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/slurm_job.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/launcher_env.h"
#include "launch/rank_starter.h"
#include "launch/run_directory.h"
#include "launch/run_program.h"
#include "launch/run_store.h"
#include "launch/slurm_starter.h"
#include "launch/ssh_starter.h"

namespace ptw::core {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kScript = "/job.sbatch";
constexpr const char* kSubmitScript = "/submit.sbatch";
constexpr const char* kAlive = "/slurm.alive";
constexpr const char* kRelease = "/slurm.release";

// States in which a job may still run (squeue's %T).
bool stillToRun(const std::string& state) {
  for (const char* s : {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED"})
    if (state == s) return true;
  return false;
}

}  // namespace

SlurmJob::SlurmJob(Profile profile, std::string runDir, Env env)
    : m_profile(std::move(profile)), m_runDir(std::move(runDir)), m_env(std::move(env)) {
  const auto job = m_env.find("SLURM_JOB_ID");
  m_inside = job != m_env.end() && !job->second.empty();
}

SlurmJob::~SlurmJob() { release(); }

Profile SlurmJob::placed(const Profile& profile) const {
  Profile p = profile;
  if (!p.hosts.hosts.empty()) return p;
  // m_rankHosts holds each node's ranks in one block (allocationRankHosts, jobRankHosts).
  for (std::size_t i = 0; i < m_rankHosts.size();) {
    std::size_t end = i;
    while (end < m_rankHosts.size() && m_rankHosts[end] == m_rankHosts[i]) ++end;
    p.hosts.hosts.push_back(m_rankHosts[i] + ":" + std::to_string(end - i));
    i = end;
  }
  return p;
}

std::string SlurmJob::jobName(const std::string& runDir) {
  std::string dir = runDir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return "ptw-" + dir.substr(dir.rfind('/') + 1);
}

// The #SBATCH lines of a job of the run's shape, named after its folder.
std::string SlurmJob::shapeLines(const Profile& p, const std::string& runDir) {
  PTW_CHECK(!runDir.empty() && runDir.find_first_of(" \t\n\r\"'%\\$`") == std::string::npos, "the run folder ", runDir,
            ": SLURM's #SBATCH lines cannot hold a path with blanks, quotes, %, $ or backslashes; choose a runs "
            "folder without them (--runs-dir, PTW_RUNS_DIR)");
  const int ranks = processCount(p);
  std::ostringstream s;
  s << "#SBATCH --job-name=" << jobName(runDir) << "\n";
  const auto hosts = parseHosts(p.hosts.hosts);
  if (hosts.empty()) {
    s << "#SBATCH --nodes=1\n#SBATCH --ntasks=" << ranks << "\n";
  } else {
    std::string list;
    bool even = true;
    for (const auto& h : hosts) {
      list += (list.empty() ? "" : ",") + h.host;
      even = even && h.slotCount == hosts.front().slotCount;
    }
    s << "#SBATCH --nodes=" << hosts.size() << "\n#SBATCH --ntasks=" << ranks << "\n";
    if (even) s << "#SBATCH --ntasks-per-node=" << hosts.front().slotCount << "\n";
    s << "#SBATCH --nodelist=" << list << "\n";
  }
  s << "#SBATCH --output=" << runDir << "/slurm-%j.out\n";
  return s.str();
}

std::string SlurmJob::script(const Profile& p, const std::string& runDir) {
  const std::string shape = shapeLines(p, runDir);
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# The SLURM job of the ptw run in " << runDir << " (hosts.launcher \"slurm\", docs/multihost.md).\n"
    << "# Submit it with: sbatch " << runDir << kScript << "\n"
    << "# (sbatch options given before the file, such as --partition, --account or --time, add to these.)\n"
    << "# Its batch step only holds the allocation: ptw, waiting for the job to start, starts the ranks in\n"
    << "# it with srun --jobid and ends it when the run ends; it also ends when ptw is gone.\n"
    << shape;
  s << "run=" << quoteForShell(runDir) << "\n"
    << "echo \"ptw: job $SLURM_JOB_ID holds $SLURM_JOB_NODELIST for the run in $run\"\n"
    << "last=\nsame=0\n"
    << "while [ ! -e \"$run" << kRelease << "\" ]; do\n"
    << "  sleep 5\n"
    << "  now=$(stat -c %y \"$run" << kAlive << "\" 2>/dev/null)\n"
    << "  if [ \"$now\" = \"$last\" ]; then same=$((same + 1)); else same=0; last=$now; fi\n"
    << "  if [ \"$same\" -ge 12 ]; then\n"
    << "    echo \"ptw: $run" << kAlive << " unchanged for a minute: ptw is gone; releasing the allocation\"\n"
    << "    exit 1\n"
    << "  fi\n"
    << "done\n"
    << "echo \"ptw: the run ended; releasing the allocation\"\n";
  return s.str();
}

std::string SlurmJob::submitScript(const Profile& p, const std::string& runDir, const std::string& runsDir,
                                   const std::string& ptw) {
  const std::string shape = shapeLines(p, runDir);
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# The SLURM job that runs the ptw run in " << runDir << " (ptw submit, docs/follow.md).\n"
    << "# ptw supervises the run inside the allocation, its ranks job steps of it; nothing of the\n"
    << "# desktop that submitted it is needed. Follow it with: ptw follow " << runDir << "\n"
    << shape << "exec " << quoteForShell(ptw) << " --headless -p " << quoteForShell(runDir + "/profile.json")
    << " --runs-dir " << quoteForShell(runsDir) << " --run-folder " << quoteForShell(runDir) << "\n";
  return s.str();
}

SubmittedJob submitRun(const Profile& profile, const std::string& runsDir, const std::string& ptw) {
  PTW_CHECK(profile.hosts.launcher == "slurm", "hosts.launcher: ptw submit runs a SLURM profile as a job; expected ",
            "\"slurm\", got \"", profile.hosts.launcher, "\" (run it with ptw --headless instead)");
  const std::string sbatch = slurmProgram("sbatch");
  SubmittedJob job;
  job.runDir = createRunDirectory(runsDir, profile);
  // Nothing is left of a submission that failed: the folder goes with it.
  const auto undo = [&] { std::filesystem::remove_all(job.runDir); };
  try {
    const std::string file = job.runDir + kSubmitScript;
    std::ofstream(file) << SlurmJob::submitScript(profile, job.runDir, runsDir, ptw);
    std::string out;
    const int code = runProgram({sbatch, "--parsable", file}, 60.0, out);
    const std::string id = lastLine(out).substr(0, lastLine(out).find(';'));  // "ID" or "ID;CLUSTER"
    PTW_CHECK(code == 0 && !id.empty() && id.find_first_not_of("0123456789") == std::string::npos,
              "sbatch refused the job of ", file, ": ", lastLine(out).empty() ? "no message" : lastLine(out));
    job.id = id;
  } catch (...) {
    undo();
    throw;
  }
  // The store the job's run is recorded in, made now: `ptw follow FOLDER` then says the run is
  // not recorded yet, rather than that the folder holds no runs.
  try {
    RunStore store(runsDir);
  } catch (const Error&) {  // the job makes it, or says why it cannot
  }
  return job;
}

std::vector<std::string> SlurmJob::allocationRankHosts(const Profile& p, const Env& env) {
  if (!p.hosts.hosts.empty()) return core::rankHosts(p);
  const auto get = [&](const char* name) {
    const auto it = env.find(name);
    PTW_CHECK(it != env.end() && !it->second.empty(), name,
              ": not set inside the SLURM allocation (SLURM_JOB_ID is); list the nodes in hosts.hosts");
    return it->second;
  };
  const std::string list = get("SLURM_JOB_NODELIST"), perNode = get("SLURM_TASKS_PER_NODE");
  const auto nodes = expandHostlist(list);
  const auto tasks = expandTasksPerNode(perNode);
  PTW_CHECK(tasks.size() == nodes.size(), "SLURM_TASKS_PER_NODE: \"", perNode, "\" gives ", tasks.size(),
            " node(s), but SLURM_JOB_NODELIST \"", list, "\" names ", nodes.size());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < nodes.size(); ++i) out.insert(out.end(), static_cast<std::size_t>(tasks[i]), nodes[i]);
  const int ranks = processCount(p);
  PTW_CHECK(static_cast<int>(out.size()) == ranks, "SLURM_TASKS_PER_NODE: the allocation has ", out.size(),
            " task(s) (", perNode, " on ", list, "), but the run has ", ranks,
            " ranks (strategy.ranks); allocate that many tasks (salloc or sbatch --ntasks=", ranks,
            "), or list the nodes in hosts.hosts");
  return out;
}

std::vector<std::string> SlurmJob::jobRankHosts(const Profile& p, const std::string& nodelist) {
  if (!p.hosts.hosts.empty()) return core::rankHosts(p);
  const auto nodes = expandHostlist(nodelist, "the SLURM job's nodes");
  const std::size_t ranks = static_cast<std::size_t>(processCount(p));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < nodes.size() && out.size() < ranks; ++i) {
    const std::size_t here = ranks / nodes.size() + (i < ranks % nodes.size() ? 1 : 0);
    out.insert(out.end(), here, nodes[i]);
  }
  return out;
}

bool SlurmJob::acquire(LaunchObserver& observer, const std::atomic<bool>& stop) {
  if (m_inside) {
    m_id = m_env.at("SLURM_JOB_ID");
    m_rankHosts = allocationRankHosts(m_profile, m_env);
    observer.onLog(-1, "ptw: starting the ranks in SLURM job " + m_id + ", the allocation ptw runs in");
    return true;
  }
  slurmProgram("srun");
  const std::string text = script(m_profile, m_runDir);
  const std::string path = m_runDir + kScript;
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    out.close();
    PTW_CHECK(out, "cannot write the SLURM job ", path);
    std::ofstream(m_runDir + kAlive, std::ios::trunc).close();
    ::unlink((m_runDir + kRelease).c_str());
  }
  m_wrote = true;
  m_keeper = std::thread([this] { keepAlive(); });
  observer.onLog(-1, "ptw: wrote the run's SLURM job; submit it with: sbatch " + path +
                         " (sbatch options before the file add to it); waiting for the job to start");
  return waitForJob(observer, stop);
}

// Note [SLURM job]: squeue, every second for half a minute, then every 10 s.
bool SlurmJob::waitForJob(LaunchObserver& observer, const std::atomic<bool>& stop) {
  const std::string squeue = slurmProgram("squeue"), name = jobName(m_runDir);
  const auto started = Clock::now();
  auto next = started;
  int failures = 0;
  std::string pending;
  for (;;) {
    if (stop.load()) return false;
    if (Clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    next = Clock::now() +
           (Clock::now() - started < std::chrono::seconds(30) ? std::chrono::seconds(1) : std::chrono::seconds(10));
    std::string out;
    const int code = runProgram(
        {squeue, "-h", "--name=" + name, "--user=" + std::to_string(::getuid()), "-t", "all", "-o", "%i %T %N"}, 20.0,
        out);
    if (code != 0) {
      PTW_CHECK(++failures < 5, "squeue failed 5 times in a row while ptw waited for SLURM job ", name, ": ",
                lastLine(out).empty() ? std::string("no answer within 20 s") : lastLine(out));
      continue;
    }
    failures = 0;
    std::istringstream lines(out);
    std::string line, endedId, endedState;
    bool waiting = false;  // in this answer: a job of the run that may still start
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string id, state, nodes;
      if (!(fields >> id >> state)) continue;
      fields >> nodes;
      if (state == "RUNNING") {
        m_id = id;
        m_rankHosts = jobRankHosts(m_profile, nodes);
        observer.onLog(-1, "ptw: SLURM job " + id + " (" + name + ") runs on " + nodes + "; starting the ranks in it");
        return true;
      }
      if (stillToRun(state)) {
        if (pending != id) observer.onLog(-1, "ptw: SLURM job " + id + " (" + name + ") is " + state + "; waiting");
        pending = id;
        waiting = true;
      } else {
        endedId = id;
        endedState = state;
      }
    }
    PTW_CHECK(waiting || endedId.empty(), "SLURM job ", endedId, " (", name, ") ended (", endedState,
              ") before ptw started its ranks in it; see ", m_runDir, "/slurm-", endedId, ".out");
  }
}

void SlurmJob::keepAlive() {
  const std::string path = m_runDir + kAlive;
  std::unique_lock<std::mutex> lock(m_mutex);
  while (!m_ending) {
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
    m_wake.wait_for(lock, std::chrono::seconds(5), [this] { return m_ending; });
  }
}

void SlurmJob::release() {
  if (m_keeper.joinable()) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_ending = true;
    }
    m_wake.notify_all();
    m_keeper.join();
  }
  if (!m_wrote) return;
  m_wrote = false;
  std::ofstream(m_runDir + kRelease, std::ios::trunc).close();
  const std::string scancel = findProgram("scancel");
  if (scancel.empty()) return;  // the release file ends the job within seconds
  std::string out;
  runProgram({scancel, "--name=" + jobName(m_runDir), "--user=" + std::to_string(::getuid())}, 10.0, out);
}

}  // namespace ptw::core
