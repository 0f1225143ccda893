// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/stack_collector.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/command.h"
#include "common/processes.h"
#include "launch/stacks_file.h"

extern char** environ;

namespace ptw::core {
namespace {

using Clock = std::chrono::steady_clock;

// At most this many tools run at once, and no more than there are cores: each takes seconds
// of a core to read a worker's symbols (LibTorch's are large).
std::size_t toolsAtOnce() { return std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8); }
// A Python process's dump is whole once its file has not grown for this long.
constexpr auto kSettled = std::chrono::milliseconds(150);

std::string readWhole(const std::string& path, std::size_t limit = 4 << 20) {
  std::ifstream in(path, std::ios::binary);
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return text;
}

// The state letter of /proc/PID/stat ('R', 'S', 'Z', ...), or 0 when there is no such process.
char procState(pid_t pid) {
  const std::string line = readWhole("/proc/" + std::to_string(pid) + "/stat", 4096);
  const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= line.size()) return 0;
  return line[close + 2];
}

bool ended(pid_t pid) {
  const char s = procState(pid);
  return s == 0 || s == 'Z' || s == 'X';
}

// Every process's parent, read once per collection.
std::multimap<long, long> childrenByParent() {
  std::multimap<long, long> out;
  forEachProcess([&](long pid) {
    if (const long ppid = parentOf(pid); ppid >= 0) out.emplace(ppid, pid);
  });
  return out;
}

// `root`'s descendants, nearest first.
std::vector<pid_t> descendants(pid_t root, const std::multimap<long, long>& children) {
  std::vector<pid_t> out;
  std::vector<long> next{root};
  for (std::size_t i = 0; i < next.size() && next.size() < 4096; ++i) {
    auto [from, to] = children.equal_range(next[i]);
    for (auto it = from; it != to; ++it) {
      next.push_back(it->second);
      out.push_back(static_cast<pid_t>(it->second));
    }
  }
  return out;
}

// Whether `pid` has a handler for `sig` (SigCgt in /proc/PID/status).
bool catches(pid_t pid, int sig) {
  std::istringstream status(readWhole("/proc/" + std::to_string(pid) + "/status", 16384));
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("SigCgt:", 0) == 0) {
      const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
      return sig >= 1 && sig <= 64 && (mask >> (sig - 1)) & 1ULL;
    }
  return false;
}

std::string commOf(pid_t pid) {
  std::string name = readWhole("/proc/" + std::to_string(pid) + "/comm", 256);
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

// `name` on PATH (or in /usr/bin), as execvp would find it; "" when there is none.
std::string onPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = std::string(path ? path : "") + ":/usr/bin:/bin";
  std::istringstream in(dirs);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    const std::string file = dir + "/" + name;
    if (::access(file.c_str(), X_OK) == 0) return file;
  }
  return "";
}

// Frames are read as StacksFile reads them (Note [Shared frames] in stacks_file.h), so that
// the file's "same frames as" and the window's folding agree.
using Frame = StackFrame;
bool pythonFrame(const std::string& line, Frame& f) { return parseFrameLine("python", line, f); }
bool nativeFrame(const std::string& line, Frame& f) { return parseFrameLine("native", line, f); }
bool threadHeader(const std::string& line) { return isThreadHeader(line); }

// The frames with addresses, arguments and thread ids left out: equal for two ranks that
// stand in the same places.
std::string signature(const RankStacks& s) {
  std::string sig = s.kind + "\n";
  std::istringstream in(s.frames);
  std::string line;
  while (std::getline(in, line)) {
    Frame f;
    if (threadHeader(line) || line.rfind("process ", 0) == 0)
      sig += "thread\n";
    else if ((s.kind == "python" && pythonFrame(line, f)) || (s.kind == "native" && nativeFrame(line, f)))
      sig += f.function + " " + f.location + "\n";
  }
  return sig;
}

// The frames of the main thread: the last Python thread of the first process (faulthandler
// lists the newest thread first), gdb's thread 1, eu-stack's first.
std::vector<Frame> mainThread(const RankStacks& s) {
  std::vector<std::vector<Frame>> threads;
  std::size_t main = SIZE_MAX;  // gdb's thread 1
  std::istringstream in(s.frames);
  std::string line;
  bool secondProcess = false;
  while (std::getline(in, line)) {
    if (line.rfind("process ", 0) == 0) {
      secondProcess = !threads.empty();
      continue;
    }
    if (secondProcess) break;
    if (threadHeader(line)) {
      threads.emplace_back();
      if (line.rfind("Thread 1 ", 0) == 0) main = threads.size() - 1;
      continue;
    }
    Frame f;
    if (!threads.empty() &&
        ((s.kind == "python" && pythonFrame(line, f)) || (s.kind == "native" && nativeFrame(line, f))))
      threads.back().push_back(f);
  }
  if (threads.empty()) return {};
  if (s.kind == "python") return threads.back();
  return main < threads.size() ? threads[main] : threads.front();
}

std::string describeFrame(const Frame& f) {
  return f.location.empty() ? f.function : f.function + " (" + f.location + ")";
}

// A rank's section of the file.
std::string header(const RankStacks& s) {
  std::string h = "== rank " + std::to_string(s.rank) + " (pid " + std::to_string(s.pid);
  h += s.host.empty() ? "" : ", host " + s.host;
  h += ")";
  if (!s.kind.empty()) h += ": " + s.kind + " frames";
  if (!s.kind.empty() && !s.tool.empty()) h += " (" + s.tool + ")";
  return h + " ==\n";
}

// One rank being taken.
struct Job {
  const StackTarget* target = nullptr;
  RankStacks out;
  bool done = false;
  // Python: the processes signalled, and their files.
  std::vector<std::pair<pid_t, std::string>> python;
  std::int64_t size = -1;
  Clock::time_point grewAt = Clock::now();
  // Native: the rank's own answer (Note [Native stacks]) while `own`, asked at askedAt.
  bool own = false;
  Clock::time_point askedAt = Clock::now();
  // Native: the process to read, and the tool reading it.
  pid_t tracee = 0;
  pid_t tool = -1;
  std::string toolName;  ///< "gdb" or "eu-stack"
  std::string toolOut;
};

std::int64_t fileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::int64_t>(st.st_size) : 0;
}

// Starts the tool on job.tracee, its output to a file of its own in /tmp.
bool startTool(Job& job, const std::string& tool) {
  char name[] = "/tmp/ptw-stack-XXXXXX";
  const int fd = ::mkstemp(name);
  if (fd < 0) {
    job.out.note = std::string("cannot make a file for the native stack: ") + std::strerror(errno);
    return false;
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  job.toolOut = name;
  const std::string pid = std::to_string(job.tracee);
  const bool gdb = tool.size() >= 3 && tool.compare(tool.size() - 3, 3, "gdb") == 0;
  job.toolName = gdb ? "gdb" : "eu-stack";
  std::vector<std::string> args = gdb ? std::vector<std::string>{tool,
                                                                 "-nx",
                                                                 "-batch",
                                                                 "-iex",
                                                                 "set debuginfod enabled off",
                                                                 "-p",
                                                                 pid,
                                                                 "-ex",
                                                                 "set pagination off",
                                                                 "-ex",
                                                                 "thread apply all bt"}
                                      : std::vector<std::string>{tool, "-p", pid};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  // Its own process group: nothing the run's group is sent reaches it.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  const int err = ::posix_spawn(&job.tool, tool.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fd);
  if (err != 0) {
    job.tool = -1;
    job.out.note = "cannot start " + tool + ": " + std::strerror(err);
    return false;
  }
  return true;
}

// The tool's lines that are frames or thread headers; the rest (gdb's attach chatter) is
// left out. With none, the tool's last line says why (ptrace not permitted, ...).
void takeToolOutput(Job& job) {
  std::istringstream in(readWhole(job.toolOut));
  ::unlink(job.toolOut.c_str());
  job.out.tool = job.toolName;
  std::string line, last;
  while (std::getline(in, line)) {
    if (threadHeader(line) || (!line.empty() && line[0] == '#'))
      job.out.frames += line + "\n";
    else if (!line.empty() && line.find("[New LWP") == std::string::npos)
      last = line;
  }
  if (!job.out.frames.empty()) return;
  job.out.kind.clear();
  job.out.note = "no native frames" + (last.empty() ? std::string() : ": " + last);
}

// Takes the rank's own answer when its file has come (Note [Native stacks]).
bool takeOwnAnswer(Job& job) {
  const std::string& file = job.target->nativeFile;
  if (::access(file.c_str(), F_OK) != 0) return false;
  job.out.frames = readWhole(file);
  ::unlink(file.c_str());
  job.out.tool = "ptw-worker";
  job.own = false;
  if (job.out.frames.empty()) job.out.kind.clear(), job.out.note = "its answer was empty";
  return true;
}

// A rank on another host, started over ssh, is asked on its control line and writes its
// answer to the run folder the hosts share (Note [Native stacks]).
void askRemote(Job& job, const StackTarget& t) {
  if (t.controlFd < 0 || t.nativeFile.empty() || !t.pythonPrefix.empty()) {
    job.out.note = "runs on host " + t.host +
                   ": stacks of ranks on other hosts are taken only from ptw's own ranks "
                   "started over ssh";
    return;
  }
  if (t.pid <= 0 || ended(t.pid)) {
    job.out.note = "the connection to host " + t.host + " ended before its stack was taken";
    return;
  }
  ::unlink(t.nativeFile.c_str());
  if (::write(t.controlFd, t.ask.data(), t.ask.size()) != static_cast<ssize_t>(t.ask.size())) {
    job.out.note = "host " + t.host + " cannot be asked: " + std::strerror(errno);
    return;
  }
  job.out.kind = "native";
  job.own = true;
  job.done = false;
}

// Begins taking `t`: notes what cannot be had, signals a command rank's Python processes,
// or marks it for the native tool (started by the poll loop, a few at a time).
void begin(Job& job, const StackTarget& t, const std::multimap<long, long>& children, const std::string& tool) {
  job.target = &t;
  job.out.rank = t.rank, job.out.pid = t.pid, job.out.host = t.host;
  job.done = true;
  if (t.remote) {
    askRemote(job, t);
    return;
  }
  if (t.pid <= 0 || ended(t.pid)) {
    job.out.note = "ended before its stack was taken";
    return;
  }
  job.done = false;
  job.tracee = t.pid;
  if (!t.pythonPrefix.empty()) {  // Note [Python stacks]
    const int sig = stacksSignal();
    const auto below = descendants(t.pid, children);
    for (pid_t p : below) {
      if (!catches(p, sig)) continue;
      const std::string file = t.pythonPrefix + "." + std::to_string(p);
      const int fd = ::open(file.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);  // an earlier dump goes
      if (fd < 0) continue;
      ::close(fd);
      if (::kill(p, sig) == 0) job.python.emplace_back(p, file);
    }
    if (!job.python.empty()) {
      job.out.kind = "python";
      return;
    }
    // Not Python (or Python without ptw's hook): the program itself is read natively.
    job.tracee = below.empty() ? t.pid : below.front();
  }
  job.out.kind = "native";
  if (!t.nativeFile.empty() && t.pythonPrefix.empty() && catches(t.pid, stacksSignal())) {
    ::unlink(t.nativeFile.c_str());  // an earlier answer goes
    job.own = ::kill(t.pid, stacksSignal()) == 0;
    if (job.own) return;
  }
  if (tool.empty()) {
    job.out.kind.clear();
    job.out.note = "gdb not found; install gdb for native stacks";
    job.done = true;
  }
}

// One pass of the wait: a Python job is done once its files stop growing (or its processes
// ended), a native one when its tool exits. Returns whether any job is left.
bool poll(std::vector<Job>& jobs, const std::string& tool, std::size_t& running) {
  const auto now = Clock::now();
  bool left = false;
  for (Job& job : jobs) {
    if (job.done) continue;
    if (job.out.kind == "python") {
      std::int64_t size = 0;
      for (const auto& [pid, file] : job.python) size += fileSize(file);
      if (size != job.size) job.size = size, job.grewAt = now;
      const bool allEnded = std::all_of(job.python.begin(), job.python.end(), [](auto& p) { return ended(p.first); });
      job.done = (size > 0 && now - job.grewAt >= kSettled) || allEnded;
    } else if (job.own) {
      if (takeOwnAnswer(job)) {
        job.done = true;
      } else if (job.target->remote && ended(job.target->pid)) {
        job.own = false, job.done = true, job.out.kind.clear();
        job.out.note = "host " + job.target->host + " dropped while its stack was taken (its ssh connection ended)";
      } else if (!job.target->remote && (ended(job.tracee) || now - job.askedAt >= std::chrono::duration<double>(
                                                                                       StackCollector::kOwnAnswerS))) {
        job.own = false;  // read from outside instead
        if (!ended(job.tracee)) job.out.note = "did not answer the stacks signal within 1.5 s; read with a debugger";
        if (tool.empty() || ended(job.tracee)) job.done = true, job.out.kind.clear();
        if (tool.empty() && !ended(job.tracee)) job.out.note += "; gdb not found; install gdb for native stacks";
      }
    } else if (job.tool < 0 && running < toolsAtOnce()) {
      if (startTool(job, tool))
        ++running;
      else
        job.out.kind.clear(), job.done = true;
    } else if (job.tool > 0 && ::waitpid(job.tool, nullptr, WNOHANG) == job.tool) {
      --running;
      job.done = true;
      takeToolOutput(job);
    }
    left = left || !job.done;
  }
  return left;
}

// What a job has when the wait is over: a tool still running is ended, Python's files read.
void finish(Job& job, const std::string& budget) {
  if (!job.done && job.tool > 0) {  // gdb killed while attached may leave its tracee stopped
    ::kill(job.tool, SIGKILL);
    ::waitpid(job.tool, nullptr, 0);
    ::kill(job.tracee, SIGCONT);
    ::unlink(job.toolOut.c_str());
    job.out.note = "not taken within " + budget + " s";
    job.out.kind.clear();
  } else if (!job.done && job.own) {
    job.out.note = (job.target->remote ? "host " + job.target->host + " did not answer" : std::string("no answer")) +
                   " within " + budget + " s";
    job.out.kind.clear();
    ::unlink(job.target->nativeFile.c_str());
  } else if (!job.done && job.out.kind == "native") {
    job.out.note = "not taken within " + budget + " s (too many ranks at once)";
    job.out.kind.clear();
  }
  if (job.out.kind == "python") {
    for (const auto& [pid, file] : job.python) {
      std::string text = readWhole(file);
      if (text.empty()) continue;
      if (text.back() != '\n') text += '\n';
      job.out.frames += "process " + std::to_string(pid) + " (" + commOf(pid) + "):\n" + text;
    }
    if (job.out.frames.empty()) job.out.kind.clear();
  }
  // A rank that ended while it was read: said, whatever was had of it.
  const bool pythonEnded =
      !job.python.empty() && std::all_of(job.python.begin(), job.python.end(), [](auto& p) { return ended(p.first); });
  if (job.target && job.out.note.empty() && !job.target->remote && (ended(job.target->pid) || pythonEnded))
    job.out.note = "ended while its stack was taken";
  else if (!job.python.empty() && job.out.frames.empty() && job.out.note.empty())
    job.out.note = "its program wrote no stack within " + budget + " s";
}

}  // namespace

std::vector<RankStacks> StackCollector::collect(const std::vector<StackTarget>& targets) const {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<long>(m_budgetS * 1000));
  const auto children = childrenByParent();
  std::string tool = onPath("gdb");
  if (tool.empty()) tool = onPath("eu-stack");
  std::vector<Job> jobs(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) begin(jobs[i], targets[i], children, tool);
  std::size_t running = 0;
  while (poll(jobs, tool, running) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  char budget[32];
  std::snprintf(budget, sizeof budget, "%g", m_budgetS);
  std::vector<RankStacks> out;
  for (Job& job : jobs) {
    finish(job, budget);
    out.push_back(std::move(job.out));
  }
  std::stable_sort(out.begin(), out.end(), [](const RankStacks& a, const RankStacks& b) { return a.rank < b.rank; });
  return out;
}

std::string StackCollector::render(const std::vector<RankStacks>& stacks, const std::string& title) {
  std::string text = title + "\n";
  std::vector<std::pair<std::string, int>> seen;  // signature, the first rank that had it
  for (const RankStacks& s : stacks) {
    text += "\n" + header(s);
    if (!s.note.empty()) text += "(" + s.note + ")\n";
    if (s.frames.empty()) continue;
    const std::string sig = signature(s);
    const auto same = std::find_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == sig; });
    if (same != seen.end()) {
      text += "same frames as rank " + std::to_string(same->second) + "\n";
      continue;
    }
    seen.emplace_back(sig, s.rank);
    text += s.frames;
  }
  return text;
}

std::string StackCollector::topFrames(const RankStacks& s) {
  const std::vector<Frame> frames = mainThread(s);
  if (frames.empty()) return "";
  if (s.kind == "python")
    return frames.size() == 1 ? describeFrame(frames[0])
                              : describeFrame(frames[0]) + " from " + describeFrame(frames[1]);
  // The innermost two of the program's own code: with a source file that is not the C or C++
  // library's (a system header, glibc's sysdeps), and not a library template inlined there.
  std::vector<std::string> own;
  for (const Frame& f : frames) {
    // Frames the rank wrote itself have no source file: ptw's namespace says they are its own.
    const bool library =
        (f.path.empty() || f.path.rfind("/usr/", 0) == 0 || f.path.find("sysdeps/") != std::string::npos ||
         f.function.rfind("std::", 0) == 0 || f.function.rfind("__", 0) == 0) &&
        f.function.rfind("ptw::", 0) != 0;
    if (!library) own.push_back(describeFrame(f));
    if (own.size() == 2) break;
  }
  if (own.empty())
    for (const Frame& f : frames)
      if (f.function != "??") return describeFrame(f);
  return own.empty() ? "" : own.size() == 1 ? own[0] : own[0] + " from " + own[1];
}

std::string StackCollector::write(const std::string& dir, int attempt, const std::string& text) {
  if (dir.empty()) return "";
  const std::string path = dir + "/stacks-" + std::to_string(attempt) + ".txt";
  const std::string part = dir + "/.stacks-" + std::to_string(attempt) + ".txt.part";
  {
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      ::unlink(part.c_str());
      return "";
    }
  }
  if (::rename(part.c_str(), path.c_str()) != 0) {
    ::unlink(part.c_str());
    return "";
  }
  return path;
}

}  // namespace ptw::core
