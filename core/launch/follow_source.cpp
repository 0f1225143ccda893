// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/follow_source.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/error.h"
#include "common/version.h"
#include "launch/follow_stream.h"
#include "launch/rank_starter.h"
#include "launch/run_follower.h"
#include "launch/run_program.h"
#include "launch/ssh_starter.h"
#include "launch/store_database.h"

extern char** environ;

namespace ptw::core {
namespace {

constexpr int kSshLost = 255;  // ssh's own exit code: the connection failed or broke

// The header line this build writes (Note [Follow frames]) but for its run id.
std::string expectedHeaderTail() {
  const std::uint32_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return " record_frame=" + std::to_string(kRecordFrameBytes) + " byte_order=" + (first ? "little" : "big");
}

std::string field(const std::string& header, const std::string& key) {
  const auto at = header.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const auto from = at + key.size() + 2;
  return header.substr(from, header.find(' ', from) - from);
}

}  // namespace

// A `ptw follow` child (or ssh running one): its stdout and stderr, read until both end.
struct FollowSource::Stream {
  pid_t pid = -1;
  int out = -1, err = -1;
  std::string errText;
  ~Stream() {
    if (out >= 0) ::close(out);
    if (err >= 0) ::close(err);
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  }
  // Its exit code once its output has ended (-1: killed by a signal).
  int wait() {
    int status = 0;
    const pid_t p = pid;
    pid = -1;
    while (::waitpid(p, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

bool splitRemoteRunsDir(const std::string& runsDir, std::string& host, std::string& dir) {
  const auto colon = runsDir.find(':');
  if (colon == std::string::npos || runsDir.find('/') < colon) return false;
  host = runsDir.substr(0, colon);
  dir = runsDir.substr(colon + 1);
  PTW_CHECK(plausibleHostName(host), "--runs-dir ", runsDir,
            ": expected HOST:DIR with a host name before the ':', got \"", host, "\"");
  PTW_CHECK(!dir.empty(), "--runs-dir ", runsDir, ": expected HOST:DIR, the runs directory on HOST after the ':'");
  return true;
}

std::vector<std::string> sshCommandLine(const HostsSpec& hosts, const std::string& host) {
  const std::string ssh = findProgram("ssh");
  PTW_CHECK(!ssh.empty(), "a runs directory on ", host, " is reached with OpenSSH's ssh, and there is none on PATH; ",
            "install openssh-client");
  const int alive = std::max(1, hosts.aliveIntervalS);
  std::vector<std::string> argv = {ssh,  "-T",
                                   "-o", "BatchMode=yes",
                                   "-o", "ServerAliveInterval=" + std::to_string(alive),
                                   "-o", "ServerAliveCountMax=3",
                                   "-o", "ConnectTimeout=" + std::to_string(std::max(5, 3 * alive)),
                                   "-o", "LogLevel=ERROR"};
  if (!hosts.sshConfig.empty()) argv.insert(argv.end(), {"-F", hosts.sshConfig});
  if (!hosts.sshIdentity.empty()) argv.insert(argv.end(), {"-i", hosts.sshIdentity});
  if (hosts.sshPort != 0) argv.insert(argv.end(), {"-p", std::to_string(hosts.sshPort)});
  if (!hosts.sshUser.empty()) argv.insert(argv.end(), {"-l", hosts.sshUser});
  argv.insert(argv.end(), {"--", host});
  return argv;
}

std::string thisPtwProgram() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string sibling = ec ? std::string() : (self.parent_path() / "ptw").string();
  return !sibling.empty() && ::access(sibling.c_str(), X_OK) == 0 ? sibling : std::string("ptw");
}

int runRemotePtw(const HostsSpec& hosts, const std::string& host, const std::vector<std::string>& args,
                 std::string& output, double limitS) {
  std::vector<std::string> argv = sshCommandLine(hosts, host);
  std::string line = quoteForShell(thisPtwProgram());
  for (const auto& a : args) line += " " + quoteForShell(a);
  argv.push_back(line);
  const int code = runProgram(argv, limitS, output);
  PTW_CHECK(code != kSshLost && code != -1, host,
            ": ssh cannot reach it: ", lastLine(output).empty() ? "no answer" : lastLine(output),
            " (check the host name and hosts.ssh_user, ssh_port, ssh_identity, ssh_config)");
  return code;
}

namespace {

// A row of `ptw runs`: id, status, started, strategy, world, final loss, samples/s, version, name.
bool parseRunLine(const std::string& line, RunRow& r) {
  std::istringstream in(line);
  std::string id, loss, rate;
  if (!(in >> id >> r.status >> r.startedAt >> r.strategy >> r.world >> loss >> rate >> r.ptwVersion)) return false;
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) return false;
  r.id = std::stoll(id);
  std::getline(in >> std::ws, r.name);
  return true;
}

}  // namespace

std::vector<RunRow> listRuns(const std::string& runsDir, const HostsSpec& hosts, bool running) {
  std::string host, dir;
  std::vector<RunRow> rows;
  if (splitRemoteRunsDir(runsDir, host, dir)) {
    std::string output;
    const int code = runRemotePtw(hosts, host, {"runs", "--runs-dir", dir}, output);
    PTW_CHECK(code == 0, host, ":", dir, ": ",
              lastLine(output).rfind("ptw: ", 0) == 0 ? lastLine(output).substr(5) : lastLine(output));
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      RunRow r;
      if (!parseRunLine(line, r)) continue;
      r.dir = runsDir;
      if (!running || r.status == "running") rows.push_back(std::move(r));
    }
    return rows;
  }
  PTW_CHECK(::access((runsDir + "/runs.sqlite").c_str(), F_OK) == 0, "runs directory ", runsDir,
            " holds no runs (no runs.sqlite there); give the folder that runs were written to");
  StoreDatabase db(runsDir + "/runs.sqlite", StoreDatabase::ReadOnly{});
  RunCatalog catalog(db);
  for (auto& r : catalog.runs())
    if (!running || (r.status == "running" && !supervisorGone(r))) rows.push_back(std::move(r));
  return rows;
}

FollowSource::FollowSource(FollowSourceOptions options) : m_options(std::move(options)) {
  if (!splitRemoteRunsDir(m_options.runsDir, m_host, m_dir)) m_dir = m_options.runsDir;
  if (m_options.ptw.empty()) m_options.ptw = thisPtwProgram();
  PTW_CHECK(::pipe2(m_wake, O_CLOEXEC | O_NONBLOCK) == 0, "follow: cannot make a pipe (", std::strerror(errno), ")");
}

FollowSource::~FollowSource() {
  for (int fd : m_wake)
    if (fd >= 0) ::close(fd);
}

void FollowSource::stop() {
  m_stop.store(true);
  const char c = 1;
  [[maybe_unused]] const auto n = ::write(m_wake[1], &c, 1);
}

// Note [Reattaching]: the smallest last step had of anything, once something was had.
std::vector<std::string> FollowSource::commandLine() const {
  const std::int64_t id = m_runId.load();
  std::vector<std::string> args = {
      m_options.ptw, "follow", id > 0 ? std::to_string(id) : m_options.run, "--runs-dir", m_dir, "--format", "frames"};
  std::int64_t from = std::numeric_limits<std::int64_t>::max();
  for (const auto& [rank, step] : m_lastStep) from = std::min(from, step);
  for (const auto& [key, step] : m_lastScalar) from = std::min(from, step);
  if (m_lastValidation != std::numeric_limits<std::int64_t>::min()) from = std::min(from, m_lastValidation);
  if (from == std::numeric_limits<std::int64_t>::max() &&
      m_options.fromStep != std::numeric_limits<std::int64_t>::min())
    from = m_options.fromStep;  // nothing had yet: where the caller asked to start
  if (from != std::numeric_limits<std::int64_t>::max()) args.insert(args.end(), {"--from-step", std::to_string(from)});
  if (m_host.empty()) return args;
  std::vector<std::string> argv = sshCommandLine(m_options.hosts, m_host);
  std::string line;
  for (const auto& a : args) line += (line.empty() ? "" : " ") + quoteForShell(a);
  argv.push_back(line);
  return argv;
}

// Note [Reattaching]: whether a record is new, and what it makes the last step had.
bool FollowSource::keep(const Record& r) {
  const std::int64_t step = r.step.step;
  switch (r.kind) {
    case Record::Kind::Step: {
      if (m_resuming) {
        const auto it = m_resumeStep.find(r.step.rank);
        if (it != m_resumeStep.end() && step <= it->second) return false;
      }
      auto& last = m_lastStep.try_emplace(r.step.rank, step).first->second;
      last = std::max(last, step);
      return true;
    }
    case Record::Kind::Validation:
      if (m_resuming && step <= m_resumeValidation) return false;
      m_lastValidation = std::max(m_lastValidation, step);
      return true;
    case Record::Kind::Scalar: {
      const std::pair<int, std::string> key(r.step.rank, std::string(r.scalarName()));
      if (m_resuming) {
        const auto it = m_resumeScalar.find(key);
        if (it != m_resumeScalar.end() && step <= it->second) return false;
      }
      auto& last = m_lastScalar.try_emplace(key, step).first->second;
      last = std::max(last, step);
      return true;
    }
    default: return true;
  }
}

int FollowSource::follow(Listener& listener) {
  auto delay = m_options.firstRetry;
  bool everStarted = false;
  while (!m_stop.load()) {
    std::string why;
    bool started = false;
    int exitCode = 0;
    m_resumeStep = m_lastStep;
    m_resumeValidation = m_lastValidation;
    m_resumeScalar = m_lastScalar;
    m_resuming = everStarted;
    m_logsThisStream.clear();
    const Outcome outcome = once(listener, why, started, exitCode);
    if (outcome == Outcome::Ended) return exitCode;
    if (outcome == Outcome::Stopped) break;
    PTW_CHECK(everStarted || started || m_options.waitForStart, why);
    if (started) delay = m_options.firstRetry;  // it was up: the next break starts the backoff again
    everStarted = true;
    const long long seconds = (delay.count() + 999) / 1000;
    listener.onState(State::Detached, "detached: " + why + "; attaching again in " + std::to_string(seconds) + " s");
    if (!waitBeforeRetry(delay)) break;
    delay = std::min(delay * 2, m_options.maxRetry);
    m_reattaches.fetch_add(1);
  }
  return -1;
}

// Passes the whole frames of `buf` on (Note [Reattaching]) and leaves the rest; true at the
// end frame, with its exit code.
bool FollowSource::deliver(Listener& listener, std::string& buf, FollowStream::Decoded& decoded,
                           std::vector<Record>& batch, int& exitCode) {
  bool malformed = false;
  decoded.records.clear();
  decoded.logs.clear();
  const std::size_t used = FollowStream::decode(buf, decoded, malformed);
  buf.erase(0, used);
  PTW_CHECK(!malformed, "follow: the stream of run ", m_runId.load(), " holds a frame this ptw does not know");
  batch.clear();
  batch.reserve(decoded.records.size());  // a batch handed on comes back empty: grown once, not by doubling
  for (const auto& r : decoded.records)
    if (keep(r)) batch.push_back(r);
  if (!batch.empty()) listener.onRecords(batch);
  for (const auto& [rank, line] : decoded.logs)
    if (++m_logsThisStream[rank] > m_logsHad[rank]) {
      m_logsHad[rank] = m_logsThisStream[rank];
      listener.onLog(rank, line);
    }
  if (decoded.hosts) {  // each stream tells them again: the same, or a restart's
    listener.onHosts(*decoded.hosts);
    decoded.hosts.reset();
  }
  if (!decoded.end) return false;
  exitCode = decoded.end->first;
  listener.onState(State::Ended, decoded.end->second);
  decoded.end.reset();
  return true;
}

bool FollowSource::waitBeforeRetry(std::chrono::milliseconds delay) {
  pollfd p{m_wake[0], POLLIN, 0};
  const int n = ::poll(&p, 1, static_cast<int>(delay.count()));
  return n == 0 && !m_stop.load();
}

// One stream: started, read to its end (or a stop), and said how it ended. `started`: its
// header came, so the run was found and is being followed.
FollowSource::Outcome FollowSource::once(Listener& listener, std::string& why, bool& started, int& exitCode) {
  const std::vector<std::string> argv = commandLine();
  Stream s;
  int outPipe[2], errPipe[2];
  PTW_CHECK(::pipe2(outPipe, O_CLOEXEC) == 0 && ::pipe2(errPipe, O_CLOEXEC) == 0, "follow: cannot make a pipe (",
            std::strerror(errno), ")");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int rc = ::posix_spawn(&s.pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  s.out = outPipe[0];
  s.err = errPipe[0];
  if (rc != 0) {
    s.pid = -1;
    why = "cannot run " + argv[0] + ": " + std::strerror(rc);
    return Outcome::Lost;
  }
  std::string buf, header;
  std::vector<Record> batch;
  FollowStream::Decoded decoded;
  bool gotEnd = false;
  char chunk[1 << 16];
  while (s.out >= 0 || s.err >= 0) {
    pollfd fds[3] = {{s.out, POLLIN, 0}, {s.err, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0 && errno != EINTR) break;
    if (fds[2].revents) return Outcome::Stopped;  // the Stream's end kills the child
    for (int i = 0; i < 2; ++i) {
      if (!fds[i].revents) continue;
      int& fd = i == 0 ? s.out : s.err;
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        ::close(fd);
        fd = -1;
        continue;
      }
      if (i == 1) {
        s.errText.append(chunk, static_cast<std::size_t>(n));
        if (s.errText.size() > 65536) s.errText.erase(0, s.errText.size() - 65536);
        continue;
      }
      buf.append(chunk, static_cast<std::size_t>(n));
      if (!started) {
        const auto nl = buf.find('\n');
        if (nl == std::string::npos) continue;
        header = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        const std::string version = field(header, "ptw");
        PTW_CHECK(header.rfind("ptw-follow 1 ", 0) == 0 && version == kVersion &&
                      header.size() >= expectedHeaderTail().size() &&
                      header.compare(header.size() - expectedHeaderTail().size(), std::string::npos,
                                     expectedHeaderTail()) == 0,
                  m_host.empty() ? "this machine" : m_host, "'s ptw follows with ",
                  version.empty() ? "another form" : "ptw " + version, ", not as this ptw ", kVersion,
                  " reads; attach with the ptw of that version");
        m_runId.store(std::stoll(field(header, "run")));
        started = true;
        listener.onState(State::Attached, header);
      }
      if (deliver(listener, buf, decoded, batch, exitCode)) gotEnd = true;
    }
  }
  const int code = s.wait();
  if (gotEnd) return Outcome::Ended;
  const std::string said = lastLine(s.errText);
  if (!m_host.empty() && code == kSshLost)
    why = m_host + ": " + (started ? "the connection broke" : "ssh cannot reach it") +
          (said.empty() ? std::string() : ": " + said) +
          (started ? "" : " (check the host name and hosts.ssh_user, ssh_port, ssh_identity, ssh_config)");
  else
    why = said.empty() ? "the follower ended without the run's end (exit " + std::to_string(code) + ")" : said;
  if (said.rfind("ptw: ", 0) == 0) why = (m_host.empty() ? "" : m_host + ":" + m_dir + ": ") + said.substr(5);
  return Outcome::Lost;
}

}  // namespace ptw::core
