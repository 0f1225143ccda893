// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/processes.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

namespace ptw::core {

void forEachProcess(const std::function<void(long pid)>& visit) {
  DIR* proc = ::opendir("/proc");
  if (!proc) return;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid > 0 && !*end) visit(pid);
  }
  ::closedir(proc);
}

long parentOf(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
  char state = 0;
  long ppid = -1;
  if (close == std::string::npos || std::sscanf(line.c_str() + close + 1, " %c %ld", &state, &ppid) != 2) return -1;
  return ppid;
}

namespace {

// The pids of the processes but this one whose environment holds `variable`.
std::vector<long> processesWithVariable(const std::string& variable) {
  std::vector<long> found;
  forEachProcess([&](long pid) {
    if (pid == ::getpid()) return;
    std::ifstream environ("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
    std::string var;
    while (std::getline(environ, var, '\0'))
      if (var == variable) {
        found.push_back(pid);
        return;
      }
  });
  return found;
}

}  // namespace

std::size_t sweepProcessesWithVariable(const std::string& variable, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::set<long> killed;
  for (;;) {
    const std::vector<long> found = processesWithVariable(variable);
    if (found.empty() || std::chrono::steady_clock::now() > until) break;
    for (long pid : found) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      killed.insert(pid);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return killed.size();
}

}  // namespace ptw::core
