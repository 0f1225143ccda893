// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/process_sweep.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

namespace ptw::core {

namespace {

// The pids of the processes but this one whose environment holds `variable`.
std::vector<long> processesWithVariable(const std::string& variable) {
  std::vector<long> found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end || pid == ::getpid()) continue;
    std::ifstream environ("/proc/" + std::string(e->d_name) + "/environ", std::ios::binary);
    std::string var;
    while (std::getline(environ, var, '\0'))
      if (var == variable) {
        found.push_back(pid);
        break;
      }
  }
  ::closedir(proc);
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
