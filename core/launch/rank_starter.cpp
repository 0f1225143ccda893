// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/rank_starter.h"

#include <unistd.h>

#include <cstdlib>

#include "common/error.h"

namespace ptw::core {

std::string findProgram(const std::string& program) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path && *path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const auto colon = dirs.find(':', start);
    const std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) return "";
    start = colon + 1;
  }
}

std::vector<std::string> remoteWorkerArgs(WorkerInvocation worker, const std::string& program, const std::string& host,
                                          const std::string& address, const std::string& interface) {
  worker.program = program;
  worker.remote = host;
  worker.master = address;
  worker.interface = interface;
  return worker.toArgs();
}

RankCommand RankStarter::agentCommand(const std::string& host) const {
  PTW_FAIL("host ", host, ": this launcher starts no host agent");
}

RankCommand RankStarter::agentsCommand(const std::vector<std::string>& hosts) const {
  PTW_FAIL("hosts ", hosts.empty() ? std::string() : hosts.front(),
           "...: this launcher starts no agents in one process");
}

RankCommand LocalStarter::command(int /*rank*/, const WorkerInvocation& worker) const {
  RankCommand c;
  c.argv = WorkerInvocation(worker).setRecords(kRecordFd).toArgs();
  return c;
}

}  // namespace ptw::core
