// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/run_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "common/error.h"

namespace ptw::core {
namespace {

void makeDirs(const std::string& path) {
  std::string partial;
  for (std::size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty() && ::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
        PTW_FAIL("runs directory ", path, ": cannot create ", partial, " (", std::strerror(errno),
                 "); choose another with --runs-dir or PTW_RUNS_DIR");
    }
    if (i < path.size()) partial += path[i];
  }
}

std::string safeName(const std::string& name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return out.empty() ? "run" : out.substr(0, 48);
}

}  // namespace

std::string defaultRunsDirectory() {
  if (const char* v = std::getenv("PTW_RUNS_DIR"); v && *v) return v;
  if (const char* v = std::getenv("XDG_DATA_HOME"); v && *v) return std::string(v) + "/ptw/runs";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/share/ptw/runs";
}

std::string createRunDirectory(const std::string& runsDir, const Profile& profile) {
  makeDirs(runsDir);
  PTW_CHECK(::access(runsDir.c_str(), W_OK) == 0, "runs directory ", runsDir, " is not writable (",
            std::strerror(errno), "); choose another with --runs-dir or PTW_RUNS_DIR");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::string base = runsDir + "/" + stamp + "-" + safeName(profile.name);
  std::string dir = base;
  for (int n = 2; ::mkdir(dir.c_str(), 0755) != 0; ++n) {
    PTW_CHECK(errno == EEXIST, "runs directory ", runsDir, ": cannot create ", dir, " (", std::strerror(errno), ")");
    dir = base + "-" + std::to_string(n);
  }
  saveProfile(profile, dir + "/profile.json");
  // Absolute: workers run inside the folder, and a restart hands them paths in it.
  std::error_code ec;
  auto absolute = std::filesystem::absolute(dir, ec);
  return ec ? dir : absolute.lexically_normal().string();
}

}  // namespace ptw::core
