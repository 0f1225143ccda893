// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/run_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <sstream>

extern char** environ;

namespace ptw::core {

namespace {

int spawnAndWait(const std::vector<std::string>& argv, double limitS, std::string& out, const std::string& cwd,
                 char* const* env) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), env);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    return -1;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(limitS * 1000));
  bool killed = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.size() < 65536) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return !killed && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

int runProgram(const std::vector<std::string>& argv, double limitS, std::string& out) {
  return spawnAndWait(argv, limitS, out, "", environ);
}

int runProgram(const std::vector<std::string>& argv, double limitS, std::string& out, const std::string& cwd,
               const std::vector<std::string>& env) {
  std::vector<char*> entries;
  for (const auto& e : env) entries.push_back(const_cast<char*>(e.c_str()));
  entries.push_back(nullptr);
  return spawnAndWait(argv, limitS, out, cwd, entries.data());
}

std::string lastLine(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

}  // namespace ptw::core
