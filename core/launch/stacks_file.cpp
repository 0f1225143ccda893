// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/stacks_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace ptw::core {
namespace {

constexpr const char* kTitleStart = "ptw: stacks of every rank";

// "  File "/x/script.py", line 7 in wait_forever"
bool pythonFrame(const std::string& line, StackFrame& f) {
  const auto file = line.find("File \"");
  if (file == std::string::npos) return false;
  const auto quote = line.find('"', file + 6);
  const auto at = line.find(", line ", quote == std::string::npos ? line.size() : quote);
  const auto in = line.find(" in ", at == std::string::npos ? line.size() : at);
  if (quote == std::string::npos || at == std::string::npos || in == std::string::npos) return false;
  f.path = line.substr(file + 6, quote - file - 6);
  f.location = f.path.substr(f.path.rfind('/') + 1) + ":" + line.substr(at + 7, in - at - 7);
  f.function = line.substr(in + 4);
  return true;
}

// gdb's "#3  0x000055d0 in ptw::engine::Trainer::run (this=0x1) at /src/trainer.cpp:120",
// "#0  main () at x.cpp:3" or "#1  0x7f in poll () from /lib/libc.so.6"; eu-stack's
// "#0  0x00007f0c clock_nanosleep".
bool nativeFrame(const std::string& raw, StackFrame& f) {
  if (raw.empty() || raw[0] != '#') return false;
  std::string line = raw.substr(std::min(raw.size(), raw.find_first_of(' ')));
  line.erase(0, line.find_first_not_of(' '));
  if (line.rfind("0x", 0) == 0) {
    const auto space = line.find(' ');
    line = space == std::string::npos ? "" : line.substr(space + 1);
    if (line.rfind("in ", 0) == 0) line.erase(0, 3);
  }
  f.location.clear(), f.path.clear();
  if (const auto at = line.rfind(" at "); at != std::string::npos && line.find(':', at) != std::string::npos) {
    f.path = line.substr(at + 4);
    f.location = f.path.substr(f.path.rfind('/') + 1);
    f.path.erase(f.path.rfind(':'));
    line.erase(at);
  } else if (const auto from = line.rfind(" from "); from != std::string::npos) {
    line.erase(from);
  }
  // gdb writes the arguments' values after the name, in the last group of parentheses.
  if (!line.empty() && line.back() == ')') {
    int depth = 0;
    for (std::size_t i = line.size(); i-- > 0;) {
      depth += line[i] == ')' ? 1 : line[i] == '(' ? -1 : 0;
      if (depth == 0) {
        line.erase(i);
        break;
      }
    }
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  f.function = line.empty() ? "??" : line;
  return true;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "== rank 1 (pid 4243, host node1): python frames ==" into `s`; false for any other line.
bool sectionHeader(const std::string& line, StackSection& s) {
  if (line.rfind("== rank ", 0) != 0 || !endsWith(line, " ==")) return false;
  std::string body = line.substr(8, line.size() - 11);
  // "...): native frames" or, saying who took them, "...): native frames (ptw-worker)".
  if (const auto colon = body.find("): "); colon != std::string::npos) {
    const auto frames = body.find(" frames", colon);
    const auto after = frames == std::string::npos ? frames : frames + 7;
    if (after != std::string::npos && (after == body.size() || body.compare(after, 2, " (") == 0)) {
      s.kind = body.substr(colon + 3, frames - colon - 3);
      body.erase(colon + 1);
    }
  }
  char* end = nullptr;
  s.rank = static_cast<int>(std::strtol(body.c_str(), &end, 10));
  if (end == body.c_str() || std::strncmp(end, " (pid ", 6) != 0 || body.back() != ')') return false;
  const char* pid = end + 6;
  s.pid = static_cast<int>(std::strtol(pid, &end, 10));
  if (end == pid) return false;
  const std::string rest = body.substr(static_cast<std::size_t>(end - body.c_str()));  // ", host node1)" or ")"
  if (rest.rfind(", host ", 0) == 0) s.host = rest.substr(7, rest.size() - 8);
  return true;
}

// The rank a title names: "ptw: stacks of every rank, attempt 0: rank 1 stopped making progress".
int behindIn(const std::string& title) {
  const auto attempt = title.find(", attempt ");
  const auto named = title.find(": rank ", attempt == std::string::npos ? 0 : attempt);
  if (attempt == std::string::npos || named == std::string::npos) return -1;
  char* end = nullptr;
  const long rank = std::strtol(title.c_str() + named + 7, &end, 10);
  return end == title.c_str() + named + 7 ? -1 : static_cast<int>(rank);
}

// One line of a section after its header.
void addLine(StackSection& s, const std::string& line, std::string& process) {
  if (line.empty()) return;
  if (line.rfind("same frames as rank ", 0) == 0) {
    s.sameAs = std::atoi(line.c_str() + 20);
    return;
  }
  if (line.front() == '(' && line.back() == ')' && s.threads.empty()) {
    s.note = line.substr(1, line.size() - 2);
    return;
  }
  if (line.rfind("process ", 0) == 0 && line.back() == ':') {
    process = line;
    return;
  }
  if (isThreadHeader(line)) {
    s.threads.push_back(StackThread{line, process, {}, 0});
    return;
  }
  StackFrame f;
  if (!parseFrameLine(s.kind, line, f)) return;
  f.line = line;
  if (s.threads.empty()) s.threads.push_back(StackThread{"", process, {}, 0});
  s.threads.back().frames.push_back(std::move(f));
}

// Note [Shared frames].
void markShared(StacksFile& file) {
  std::vector<StackSection*> own;
  for (auto& s : file.sections)
    if (s.sameAs < 0 && !s.threads.empty()) own.push_back(&s);
  if (own.size() < 2) return;
  std::size_t most = 0;
  for (const auto* s : own) most = std::max(most, s->threads.size());
  for (std::size_t k = 0; k < most; ++k) {  // k: the place from the last thread
    auto nth = [k](StackSection* s) -> StackThread* {
      return k < s->threads.size() ? &s->threads[s->threads.size() - 1 - k] : nullptr;
    };
    if (std::any_of(own.begin(), own.end(), [&](StackSection* s) { return !nth(s); })) continue;
    const StackThread& first = *nth(own.front());
    std::size_t shared = 0;
    for (; shared < first.frames.size(); ++shared) {
      const StackFrame& f = first.frames[first.frames.size() - 1 - shared];
      const bool everyRank = std::all_of(own.begin(), own.end(), [&](StackSection* s) {
        const auto& frames = nth(s)->frames;
        return shared < frames.size() && frames[frames.size() - 1 - shared].samePlace(f);
      });
      if (!everyRank) break;
    }
    for (auto* s : own) nth(s)->shared = shared;
  }
}

}  // namespace

std::string StackFrame::describe() const { return location.empty() ? function : function + " (" + location + ")"; }

const StackSection* StacksFile::section(int rank) const {
  for (const auto& s : sections)
    if (s.rank == rank) return &s;
  return nullptr;
}

const StackSection* StacksFile::framesOf(int rank) const {
  const StackSection* s = section(rank);
  // A chain of "same frames as" is never longer than the sections; a malformed file that
  // loops is cut there.
  for (std::size_t hops = 0; s && s->sameAs >= 0 && hops < sections.size(); ++hops) s = section(s->sameAs);
  return s && s->sameAs < 0 ? s : nullptr;
}

bool parseFrameLine(const std::string& kind, const std::string& line, StackFrame& frame) {
  if (kind == "python") return pythonFrame(line, frame);
  if (kind == "native") return nativeFrame(line, frame);
  return false;
}

bool isThreadHeader(const std::string& line) {
  return line.rfind("Thread ", 0) == 0 || line.rfind("Current thread ", 0) == 0 || line.rfind("TID ", 0) == 0;
}

StacksFile parseStacksFile(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  StacksFile file;
  std::getline(in, file.title);
  PTW_CHECK(file.title.rfind(kTitleStart, 0) == 0, name,
            ": not a stacks file: expected its first line to start with \"", kTitleStart, "\", got \"",
            file.title.substr(0, 80), "\"");
  file.behind = behindIn(file.title);
  std::string line, process;
  while (std::getline(in, line)) {
    StackSection next;
    if (sectionHeader(line, next)) {
      file.sections.push_back(std::move(next));
      process.clear();
    } else if (file.sections.empty()) {
      continue;
    } else {
      addLine(file.sections.back(), line, process);
    }
    file.sections.back().text += line + "\n";
  }
  markShared(file);
  return file;
}

StacksFile readStacksFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PTW_CHECK(in, path, ": cannot read the stacks file: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parseStacksFile(text.str(), path);
}

StacksFileIds listStacksFiles(const std::string& dir) {
  StacksFileIds out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    struct stat st {};
    if (name.rfind("stacks-", 0) == 0 && name.size() > 11 && endsWith(name, ".txt") &&
        ::stat((dir + "/" + name).c_str(), &st) == 0)
      out[name] = {static_cast<std::uint64_t>(st.st_ino),
                   static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
  ::closedir(d);
  return out;
}

std::string newStacksFile(const std::string& runDir, const StacksFileIds& before) {
  for (const auto& [name, id] : listStacksFiles(runDir)) {
    const auto old = before.find(name);
    if (old == before.end() || old->second != id) return runDir + "/" + name;
  }
  return "";
}

std::string latestStacksFile(const std::string& runDir) {
  std::string latest;
  long highest = -1;
  for (const auto& [name, id] : listStacksFiles(runDir)) {
    char* end = nullptr;
    const long attempt = std::strtol(name.c_str() + 7, &end, 10);
    if (end != name.c_str() + 7 && std::strcmp(end, ".txt") == 0 && attempt > highest)
      highest = attempt, latest = runDir + "/" + name;
  }
  return latest;
}

}  // namespace ptw::core
