#include "launch/preflight.h"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <vector>

#include "common/data_files.h"
#include "common/error.h"
#include "common/launcher_env.h"
#include "common/profile.h"
#include "common/version.h"
#include "launch/run_program.h"
#include "launch/slurm_job.h"
#include "launch/ssh_starter.h"

extern char** environ;

namespace ptw::core {
namespace {

// `program args...`'s standard output, with stdin and stderr on /dev/null; false when it
// could not be run or did not exit 0.
bool outputOf(const std::string& program, const char* arg, std::string& out) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  char* argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>(arg), nullptr};
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    return false;
  }
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The slurm launcher (Note [SLURM job]): SLURM's programs, and inside an allocation, that it
// holds the run's ranks.
std::string slurmProblem(const Profile& profile) {
  const auto env = processEnvironment();
  const auto job = env.find("SLURM_JOB_ID");
  const bool inside = job != env.end() && !job->second.empty();
  for (const char* program : {"srun", "squeue", "scancel"}) {
    if (inside && std::string(program) != "srun") break;
    if (findProgram(program).empty())
      return std::string("hosts.launcher: \"slurm\" needs SLURM's ") + program +
             " on PATH, and there is none; install slurm-client, or run ptw where SLURM's commands are";
  }
  if (!inside) return "";
  try {
    SlurmJob::allocationRankHosts(profile, env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

std::string hostsProblem(const Profile& profile, const std::string& workerPath) {
  if (profile.hosts.launcher == "slurm") return slurmProblem(profile);
  if (profile.hosts.launcher != "ssh") return "";
  std::vector<std::string> hosts;
  for (const auto& entry : parseHosts(profile.hosts.hosts)) hosts.push_back(entry.host);
  if (hosts.empty()) return "";
  HostsSpec spec = profile.hosts;
  spec.port = 1;  // no rendezvous port is picked for the check
  const SshStarter starter(spec, hosts, workerPath);
  const std::string worker = spec.worker.empty() ? workerPath : spec.worker;
  const std::string expected = std::string("ptw-worker ") + kVersion;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    RankCommand c = starter.command(static_cast<int>(i), {worker});
    c.argv.back() = quoteForShell(worker) + " --version";  // the check alone, not a rank
    std::string out;
    const int code = runProgram(c.argv, 20.0, out);
    const std::string said = lastLine(out);
    if (code == 255 || code < 0)
      return "hosts.hosts: cannot reach host " + hosts[i] + " with ssh in batch mode" +
             (said.empty() ? std::string(" (no answer within 20 s)") : ": " + said) +
             "; check the host, its key and hosts.ssh_* (docs/multihost.md)";
    if (code != 0)
      return "hosts.hosts: host " + hosts[i] + " cannot run " + worker + (said.empty() ? "" : ": " + said) +
             "; install ptw there at that path, or set hosts.worker";
    if (said != expected)
      return "hosts.hosts: host " + hosts[i] + " runs " + (said.empty() ? std::string("an unknown ptw-worker") : said) +
             ", this machine " + expected + "; every host needs the same ptw build";
  }
  return "";
}

std::string coresWarning(const Profile& profile, int cores) {
  // Ranks on other hosts use their cores, not this machine's.
  if (profile.strategy.device != "cpu" || profile.hosts.launcher != "local") return "";
  if (cores < 0) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  }
  const int ranks = profile.strategy.ranks;
  if (ranks <= cores) return "";
  std::ostringstream line;
  line << "strategy.ranks: " << ranks << " ranks on " << cores << " core(s); they will take turns and each step"
       << " waits for the slowest; set strategy.ranks to " << cores << " or fewer for a fair speed";
  return line.str();
}

std::string deviceProblem(const Profile& profile, const std::string& workerPath) {
  if (profile.strategy.device != "cuda") return "";
  std::string devices;
  if (!outputOf(workerPath, "--devices", devices)) return "";
  // One JSON object a line (docs/protocol.md); the worker writes this key and value as here.
  return devices.find("\"kind\": \"cuda\"") == std::string::npos ? kNoCudaDeviceMessage : "";
}

std::string runProblem(const Profile& profile, const std::string& workerPath) {
  if (std::string problem = dataFileProblem(profile.data); !problem.empty()) return problem;
  if (std::string problem = deviceProblem(profile, workerPath); !problem.empty()) return problem;
  return hostsProblem(profile, workerPath);
}

}  // namespace ptw::core
