// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/command_rank.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/child_setup.h"
#include "common/command.h"
#include "common/error.h"
#include "common/processes.h"

extern char** environ;

namespace ptw::engine {
namespace {

using Clock = std::chrono::steady_clock;

// Protocol lines may be long (a record with many scalars), never unbounded.
constexpr std::size_t kMaxMetricsLine = 64 * 1024;
// Said in the rank log one by one; past that only counted, so that a program writing garbage
// cannot flood the log.
constexpr int kProblemsSaid = 5;
// Note [Drained in batches]: a program that prints or reports every step would wake its rank,
// and through the rank's output ptw, once per step, on the cores its own ranks need. Once
// anything has come, the rank lets its pipes fill for this long before it reads again. The
// pipes hold far more than a period's output (F_SETPIPE_SZ below), and ptw_metrics drops
// rather than blocks if the channel ever fills. Lines reach the log and the charts this much
// later, well under a redraw.
constexpr auto kDrainPeriod = std::chrono::milliseconds(40);

// Where ptw_metrics.py is: installed (share/ptw/python beside bin/ or lib/ptw/), else the
// source tree this worker was built from.
std::string pythonDir() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::vector<std::string> candidates;
  if (n > 0) {
    const std::string exe(self, static_cast<std::size_t>(n));
    const std::string dir = exe.substr(0, exe.rfind('/'));
    candidates = {dir + "/../share/ptw/python", dir + "/../../share/ptw/python"};
  }
#ifdef PTW_SOURCE_DIR
  candidates.push_back(std::string(PTW_SOURCE_DIR) + "/resources/python");
#endif
  for (const auto& c : candidates) {
    char real[4096];
    if (::access((c + "/ptw_metrics.py").c_str(), R_OK) == 0 && ::realpath(c.c_str(), real)) return real;
  }
  return "";
}

void setNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

void writeAll(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // the launcher is gone: its death signal ends us
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// The children this process adopted (PR_SET_CHILD_SUBREAPER) or started and did not reap.
std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  core::forEachProcess([&](long pid) {
    if (core::parentOf(pid) == parent) out.push_back(static_cast<pid_t>(pid));
  });
  return out;
}

// Kills and reaps what the program left behind among this process's children (its orphans
// come here: subreaper). Bounded: 2 s.
void sweepChildren(int rank) {
  const auto until = Clock::now() + std::chrono::seconds(2);
  int killed = 0;
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    const auto left = childrenOf(::getpid());
    if (left.empty() || Clock::now() > until) break;
    for (pid_t pid : left) ::kill(pid, SIGKILL), ++killed;
    ::usleep(20000);
  }
  if (killed > 0) std::fprintf(stderr, "[rank %d] killed %d process(es) the program left behind\n", rank, killed);
}

class ScriptRunner {
 public:
  explicit ScriptRunner(ScriptRank& r)
      : m_r(r),
        m_metrics(r.rank, core::reportingRanks(r.profile), core::declaredBatch(r.profile)),
        m_channel(kMaxMetricsLine),
        m_outLines(core::OutputPattern::kMaxLine),
        m_errLines(core::OutputPattern::kMaxLine) {
    if (!r.profile.command.pattern.empty())
      m_pattern = std::make_unique<core::OutputPattern>(r.profile.command.pattern);
  }
  ~ScriptRunner() {
    for (int fd : {m_fifo, m_out, m_err})
      if (fd >= 0) ::close(fd);
    if (!m_fifoPath.empty()) ::unlink(m_fifoPath.c_str());
    if (!m_stacksPrefix.empty()) core::removePythonStacksFiles(m_stacksPrefix);
    if (m_r.outDir.empty() && !m_errorFile.empty()) ::unlink(m_errorFile.c_str());  // /tmp keeps nothing of a run
  }

  core::WorkerExit run() {
    const auto& cmd = m_r.profile.command;
    std::vector<std::string> argv, env;
    std::string program;
    try {
      argv = core::commandLine(m_r.profile);
      struct stat st {};
      PTW_CHECK(cmd.cwd.empty() || (::stat(cmd.cwd.c_str(), &st) == 0 && S_ISDIR(st.st_mode)), "command.cwd: ", cmd.cwd,
                " is not a folder");
      openChannel();
      m_errorFile = runFile(".error.json");
      // A file left by an earlier attempt (a restart reuses the run folder) must not be blamed.
      PTW_CHECK(::unlink(m_errorFile.c_str()) == 0 || errno == ENOENT, "cannot remove the old error file ", m_errorFile,
                ": ", std::strerror(errno));
      std::vector<std::string> base;
      for (char** e = environ; *e; ++e) base.emplace_back(*e);
      const std::string token = core::runToken(static_cast<long>(::getppid()), m_r.port);
      // The run folder's name is the run's, for every rank and attempt; without one, the token.
      std::string runId = m_r.outDir.substr(0, m_r.outDir.find_last_not_of('/') + 1);
      runId = runId.empty() ? token : runId.substr(runId.find_last_of('/') + 1);
      // Note [Python stacks]: what an earlier attempt's programs left is not theirs.
      m_stacksPrefix = core::pythonStacksPrefix(m_r.outDir, m_r.rank, static_cast<long>(::getpid()));
      core::removePythonStacksFiles(m_stacksPrefix);
      const core::ScriptContext ctx{m_r.rank, m_r.world,   m_r.port,    m_fifoPath,     pythonDir(), token,
                                    runId,    m_r.attempt, m_errorFile, m_stacksPrefix, m_r.place,   m_r.masterAddr};
      env = core::scriptEnvironment(m_r.profile, ctx, base);
      const char* path = std::getenv("PATH");
      program = core::resolveProgram(argv[0], cmd.cwd, path ? path : "/usr/local/bin:/usr/bin:/bin");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: [rank %d] %s\n", m_r.rank, e.what());
      return core::WorkerExit::BadInput;
    }
    std::fprintf(stderr, "[rank %d] %s: running %s in %s\n", m_r.rank, m_r.profile.name.c_str(), describe(argv).c_str(),
                 cmd.cwd.empty() ? "." : cmd.cwd.c_str());
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (!spawn(program, argv, env)) return core::WorkerExit::BadInput;
    int status = 0;
    try {
      status = supervise();
    } catch (...) {  // the records cannot be kept (a full disk): the program must not go on unrecorded
      ::kill(m_child, SIGKILL);
      ::waitpid(m_child, nullptr, 0);
      sweepChildren(m_r.rank);
      throw;
    }
    sweepChildren(m_r.rank);
    sayWhatItRaised(status);
    return verdict(describe(argv), status);
  }

 private:
  // The whole command line, each argument that a shell would split or expand in single
  // quotes, so that the line in the rank log can be pasted into a shell to run it by hand.
  static std::string describe(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) {
      if (!s.empty()) s += ' ';
      const bool plain = !a.empty() && a.find_first_not_of(
                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789_@%+=:,./-") == std::string::npos;
      if (plain) {
        s += a;
        continue;
      }
      s += '\'';
      for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
      s += '\'';
    }
    return s;
  }

  // rankN<suffix> in the run folder; in /tmp, with this process's id, without one.
  std::string runFile(const std::string& suffix) const {
    const std::string dir = m_r.outDir.empty() ? std::string("/tmp") : m_r.outDir;
    return dir + "/rank" + std::to_string(m_r.rank) + suffix +
           (m_r.outDir.empty() ? "." + std::to_string(::getpid()) : std::string());
  }

  // A program that failed on its own and left an error file (torch's @record) is named by
  // what it raised and where, as torchrun's "Root Cause" does; the launcher puts that in the
  // run's failure message (Launcher failureOf).
  void sayWhatItRaised(int status) {
    const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (clean || m_r.stop.load()) return;
    std::ifstream in(m_errorFile, std::ios::binary);
    if (!in) return;
    std::string text(64 * 1024, '\0');  // a traceback is far less; a larger file is not torch's
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    const std::string cause = core::errorFileCause(text);
    if (!cause.empty())
      std::fprintf(stderr, "error: [rank %d] %s%s\n", m_r.rank, std::string(core::kProgramRaised).c_str(),
                   cause.c_str());
  }

  void openChannel() {
    m_fifoPath = runFile(".metrics");
    ::unlink(m_fifoPath.c_str());
    PTW_CHECK(::mkfifo(m_fifoPath.c_str(), 0600) == 0, "cannot make the metrics channel ", m_fifoPath, ": ",
              std::strerror(errno));
    reopenChannel();
  }
  // Reading with no writer, a FIFO reports its end once every writer has gone; opened again,
  // it waits quietly for the next writer.
  void reopenChannel() {
    if (m_fifo >= 0) ::close(m_fifo);
    m_fifo = ::open(m_fifoPath.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    PTW_CHECK(m_fifo >= 0, "cannot open the metrics channel ", m_fifoPath, ": ", std::strerror(errno));
    ::fcntl(m_fifo, F_SETPIPE_SZ, 1 << 20);  // bursts of records wait here, not in the program; best effort
  }

  bool spawn(const std::string& program, const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "error: [rank %d] cannot make pipes: %s\n", m_r.rank, std::strerror(errno));
      return false;
    }
    std::vector<char*> av, ev;
    for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    for (const auto& e : env) ev.push_back(const_cast<char*>(e.c_str()));
    ev.push_back(nullptr);
    const std::string& cwd = m_r.profile.command.cwd;
    const auto setup = core::ChildSetup(::getpid()).setStdout(out[1]).setStderr(err[1]);
    m_started = Clock::now();
    m_child = ::fork();
    if (m_child == 0) {
      // Async-signal-safe calls only. The program stays in the run's process group (Note
      // [Script ranks]) and dies with this rank.
      core::setUpChild(setup);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
      ::execve(program.c_str(), av.data(), ev.data());
      core::childExecFailed("error: exec of the command failed\n");
    }
    ::close(out[1]);
    ::close(err[1]);
    if (m_child < 0) {
      std::fprintf(stderr, "error: [rank %d] fork failed: %s\n", m_r.rank, std::strerror(errno));
      ::close(out[0]);
      ::close(err[0]);
      return false;
    }
    m_out = out[0], m_err = err[0];
    for (int fd : {m_out, m_err}) ::fcntl(fd, F_SETPIPE_SZ, 1 << 20);  // Note [Drained in batches]; best effort
    setNonBlocking(m_out);
    setNonBlocking(m_err);
    return true;
  }

  // Pumps the channel and the program's output until it exits and its output ends (or 2 s
  // after it exits, when children it left keep the pipes open). Returns its wait status.
  int supervise() {
    int status = 0;
    bool exited = false, forwarded = false;
    Clock::time_point exitedAt;
    for (;;) {
      pollfd fds[3] = {{m_fifo, POLLIN, 0}, {m_out, POLLIN, 0}, {m_err, POLLIN, 0}};
      ::poll(fds, 3, 50);
      const auto readAt = Clock::now();
      bool came = readChannel((fds[0].revents & POLLHUP) != 0);
      // Said only while the program goes on without it: every program closes it as it exits.
      if (!exited && m_closedAt && !m_closedSaid && Clock::now() - *m_closedAt > std::chrono::seconds(1)) {
        std::fprintf(stderr, "[rank %d] the program closed its metrics channel after %lld line(s)\n", m_r.rank,
                     static_cast<long long>(m_lines));
        m_closedSaid = true;
      }
      came = readOutput(m_out, 1, m_outLines) || came;
      came = readOutput(m_err, 2, m_errLines) || came;
      // A stop sent to this rank alone, from outside ptw, reaches the program too.
      if (m_r.stop.load() && m_r.stoppedBy.load() != 0 && !forwarded) {
        ::kill(m_child, SIGINT);
        forwarded = true;
      }
      sendHeld(core::ScriptMetrics::kHoldMs);
      if (!exited && ::waitpid(m_child, &status, WNOHANG) == m_child) {
        exited = true;
        exitedAt = Clock::now();
      }
      if (exited && ((m_out < 0 && m_err < 0) || Clock::now() - exitedAt > std::chrono::seconds(2))) break;
      if (came && !exited && !m_r.stop.load()) std::this_thread::sleep_until(readAt + kDrainPeriod);
    }
    readChannel(false);
    sendHeld(0);
    if (m_pattern && m_matched == 0 && !m_noMatchSaid && m_outputLines > 0) sayNoMatch();
    return status;
  }

  // The steps the metrics hold that are done (Note [Stretches of steps]).
  void sendHeld(double holdMs) {
    m_batch.clear();
    const double nowMs = std::chrono::duration<double, std::milli>(Clock::now() - m_started).count();
    m_metrics.flush(nowMs, holdMs, m_batch);
    for (const auto& r : m_batch) m_r.write(r);
  }

  void sayNoMatch() {
    m_noMatchSaid = true;
    std::fprintf(stderr,
                 "[rank %d] warning: command.pattern \"%s\" matched none of the first %lld output line(s); no "
                 "metrics are read from them (compare the pattern with the lines above)\n",
                 m_r.rank, m_r.profile.command.pattern.c_str(), static_cast<long long>(m_outputLines));
  }

  // `hangUp`: every writer has closed the FIFO (poll says so only after one had it open).
  // Returns whether any record bytes came.
  bool readChannel(bool hangUp) {
    char buf[65536];
    bool came = false;
    for (;;) {
      const ssize_t n = ::read(m_fifo, buf, sizeof buf);
      if (n > 0) {
        came = true;
        m_channelBytes += static_cast<std::size_t>(n);
        m_closedAt.reset();
        m_channel.feed(
            std::string_view(buf, static_cast<std::size_t>(n)), [&](std::string_view line) { takeLine(line); },
            [&](std::size_t bytes) {
              ++m_lines;
              problem("metrics line " + std::to_string(m_lines) + ": " + std::to_string(bytes) +
                      " bytes, longer than the " + std::to_string(kMaxMetricsLine) + " a line may have; dropped");
            });
        continue;
      }
      if (n == 0 && hangUp) {  // open it again, or poll would report the hang-up forever
        if (m_channelBytes > 0 && !m_closedAt) m_closedAt = Clock::now();
        reopenChannel();
      }
      return came;
    }
  }

  void takeLine(std::string_view line) {
    ++m_lines;
    if (line.empty() || line == "\r") return;
    core::ScriptRecord rec;
    std::string error;
    if (!core::parseMetricsLine(line, rec, error)) {
      problem("metrics line " + std::to_string(m_lines) + ": " + error + ": " + printable(line));
      return;
    }
    report(rec);
  }

  void report(const core::ScriptRecord& rec) {
    m_batch.clear();
    const double nowMs = std::chrono::duration<double, std::milli>(Clock::now() - m_started).count();
    const std::string error = m_metrics.take(rec, nowMs, m_batch);
    if (!error.empty()) return problem("record of step " + std::to_string(rec.step) + ": " + error);
    m_r.reported.store(true);
    for (const auto& r : m_batch) m_r.write(r);
    m_r.passed(m_metrics.progressStep());  // the rank furthest behind: after the writes, which note theirs
  }

  // Returns whether any output came.
  bool readOutput(int& fd, int to, core::LineSplitter& lines) {
    if (fd < 0) return false;
    char buf[65536];
    bool came = false;
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return came;  // EAGAIN: nothing more now
      if (n == 0) {
        ::close(fd);
        fd = -1;
        return came;
      }
      came = true;
      writeAll(to, buf, static_cast<std::size_t>(n));
      if (m_pattern)
        lines.feed(
            std::string_view(buf, static_cast<std::size_t>(n)), [&](std::string_view line) { takeOutputLine(line); },
            [&](std::size_t bytes) {
              ++m_outputLines;
              problem("output line " + std::to_string(m_outputLines) + ": " + std::to_string(bytes) +
                      " bytes, longer than the " + std::to_string(core::OutputPattern::kMaxLine) +
                      " command.pattern searches; not read");
            });
    }
  }

  // Lines of stdout and stderr are counted together: the rank log interleaves them alike.
  void takeOutputLine(std::string_view line) {
    ++m_outputLines;
    core::ScriptRecord rec;
    std::string bad;
    switch (m_pattern->match(line, rec, bad)) {
      case core::OutputPattern::Match::Record:
        ++m_matched;
        report(rec);
        break;
      case core::OutputPattern::Match::Bad:
        problem("output line " + std::to_string(m_outputLines) + ": command.pattern: " + bad + ": " + printable(line));
        break;
      case core::OutputPattern::Match::None: break;
    }
    if (m_matched == 0 && !m_noMatchSaid && m_outputLines == kNoMatchLines) sayNoMatch();
  }

  static std::string printable(std::string_view line) {
    std::string s;
    for (char c : line.substr(0, 80)) s += (c >= 0x20 && c < 0x7f) ? c : '?';
    return line.size() > 80 ? s + "..." : s;
  }

  void problem(const std::string& what) {
    if (++m_problems <= kProblemsSaid)
      std::fprintf(stderr, "[rank %d] %s\n", m_r.rank, what.c_str());
    else if (m_problems == kProblemsSaid + 1)
      std::fprintf(stderr, "[rank %d] further bad metrics lines are only counted\n", m_r.rank);
  }

  core::WorkerExit verdict(const std::string& name, int status) {
    if (m_problems > kProblemsSaid)
      std::fprintf(stderr, "[rank %d] %lld metrics line(s) were rejected in all\n", m_r.rank,
                   static_cast<long long>(m_problems));
    const bool stopped = m_r.stop.load();
    const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean && !stopped) {
      if (WIFSIGNALED(status))
        std::fprintf(stderr, "error: [rank %d] %s was killed by signal %d (%s)\n", m_r.rank, name.c_str(),
                     WTERMSIG(status), strsignal(WTERMSIG(status)));
      else
        std::fprintf(stderr, "error: [rank %d] %s exited with code %d\n", m_r.rank, name.c_str(), WEXITSTATUS(status));
      return core::WorkerExit::Failed;
    }
    core::Record done;
    done.kind = core::Record::Kind::Done;
    done.step.rank = m_r.rank;
    done.step.step = std::max<std::int64_t>(m_metrics.lastStep(), 0);
    m_r.write(done);
    std::fprintf(stderr, "[rank %d] %s %s after %lld reported step(s)\n", m_r.rank, name.c_str(),
                 stopped ? "stopped" : "finished",
                 static_cast<long long>(std::max<std::int64_t>(m_metrics.lastStep(), 0)));
    return stopped && m_r.stoppedBy.load() != 0 ? core::WorkerExit::StoppedFromOutside : core::WorkerExit::Finished;
  }

  ScriptRank& m_r;
  core::ScriptMetrics m_metrics;
  std::unique_ptr<core::OutputPattern> m_pattern;
  core::LineSplitter m_channel, m_outLines, m_errLines;
  std::vector<core::Record> m_batch;
  std::string m_fifoPath;
  std::string m_errorFile;     ///< TORCHELASTIC_ERROR_FILE
  std::string m_stacksPrefix;  ///< PTW_STACKS_FILE (Note [Python stacks])
  int m_fifo = -1, m_out = -1, m_err = -1;
  pid_t m_child = -1;
  Clock::time_point m_started = Clock::now();
  std::size_t m_channelBytes = 0;
  std::optional<Clock::time_point> m_closedAt;  ///< when the program last closed the channel
  std::int64_t m_lines = 0, m_problems = 0;
  std::int64_t m_outputLines = 0, m_matched = 0;  ///< of the program's output, and those the pattern took
  bool m_closedSaid = false, m_noMatchSaid = false;
  /// A pattern that took none of this many output lines is said to match nothing.
  static constexpr std::int64_t kNoMatchLines = 1000;
};

}  // namespace

core::WorkerExit runScriptRank(ScriptRank& rank) {
  std::unique_ptr<ScriptRunner> runner;
  try {
    runner = std::make_unique<ScriptRunner>(rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: [rank %d] %s\n", rank.rank, e.what());
    return core::WorkerExit::BadInput;
  }
  return runner->run();
}

}  // namespace ptw::engine
