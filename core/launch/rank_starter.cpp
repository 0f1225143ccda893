#include "launch/rank_starter.h"

#include <unistd.h>

#include <cstdlib>

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

std::vector<std::string> remoteWorkerArgs(std::vector<std::string> workerArgs, const std::string& worker,
                                          const std::string& host, const std::string& address,
                                          const std::string& interface) {
  workerArgs.front() = worker;
  workerArgs.insert(workerArgs.end(), {"--remote", host, "--master", address});
  if (!interface.empty()) workerArgs.insert(workerArgs.end(), {"--interface", interface});
  return workerArgs;
}

RankCommand LocalStarter::command(int /*rank*/, const std::vector<std::string>& workerArgs) const {
  RankCommand c;
  c.argv = workerArgs;
  c.argv.insert(c.argv.end(), {"--records", "3"});  // the record pipe (launcher.cpp, kRecordFd)
  return c;
}

}  // namespace ptw::core
