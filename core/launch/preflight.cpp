#include "launch/preflight.h"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "common/data_files.h"
#include "common/profile.h"

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

}  // namespace

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
  return deviceProblem(profile, workerPath);
}

}  // namespace ptw::core
