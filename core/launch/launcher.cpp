// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "common/child_setup.h"
#include "common/command.h"
#include "common/error.h"
#include "common/processes.h"
#include "common/shm_names.h"
#include "common/version.h"
#include "launch/agent_text_stream.h"
#include "launch/collective_blame.h"
#include "launch/host_agent.h"
#include "launch/stack_collector.h"

namespace ptw::core {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void setNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// A rank's unread record bytes. The pipe is read straight into it, a worker's batch of up
// to ~900 KiB (worker.cpp) in one read: no bounce buffer and no zero-filling before each
// read, which at the shared-memory rate would take a sizeable share of the window's time.
// What decoding leaves (a partial frame) moves to the front.
class RecordBuffer {
 public:
  // Reads what is available; returns false at end of file.
  bool readFrom(int fd) {
    for (;;) {
      if (m_capacity - m_size < kRecordFrameBytes) grow();
      const std::size_t room = m_capacity - m_size;
      ssize_t n = ::read(fd, m_data.get() + m_size, room);
      if (n > 0) {
        m_size += static_cast<std::size_t>(n);
        // A short read emptied the pipe; a worker writing faster than this reads is decoded
        // in parts of a few MiB. After a worker has exited its pipe holds at most 1 MiB (the
        // size the launcher sets), which the first read takes whole, so the final pass over a
        // dead rank's pipe leaves nothing behind.
        if (static_cast<std::size_t>(n) < room || m_size >= 4 * kInitialBytes) return true;
        continue;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }
  // Appends bytes that came another way (a host agent's frames).
  void append(const char* data, std::size_t n) {
    while (m_capacity - m_size < n) grow();
    std::memcpy(m_data.get() + m_size, data, n);
    m_size += n;
  }
  std::string_view view() const { return {m_data.get(), m_size}; }
  std::size_t size() const { return m_size; }
  void consume(std::size_t n) {
    std::memmove(m_data.get(), m_data.get() + n, m_size - n);
    m_size -= n;
  }
  void clear() { m_size = 0; }

 private:
  void grow() {
    const std::size_t capacity = std::max<std::size_t>(2 * m_capacity, kInitialBytes);
    std::unique_ptr<char[]> data(new char[capacity]);
    if (m_size) std::memcpy(data.get(), m_data.get(), m_size);
    m_data = std::move(data);
    m_capacity = capacity;
  }
  static constexpr std::size_t kInitialBytes = (1 << 20) + 4096;  // the record pipe's size, and a partial frame
  std::unique_ptr<char[]> m_data;
  std::size_t m_size = 0, m_capacity = 0;
};

// Per-rank state of a running worker.
struct Rank {
  int rank = 0;
  pid_t pid = -1;
  int outFd = -1;  // stdout: log lines
  int errFd = -1;  // stderr: log lines
  int recFd = -1;  // records (common/record.h)
  int ctlFd = -1;  // a remote rank's control line, its stdin (Note [Remote ranks])
  bool remote = false;
  int connectionLostCode = 0;  // RankCommand's: the exit code that is the connection's
  int agent = -1;              // its host agent's index (Note [Host agent]); -1: a process of its own
  bool agentReported = false;  // its end has come from its agent (or the agent's own end)
  bool agentFramed = false;    // ...in the agent's Exit frame: the rank's own status, not the connection's
  int agentStatus = 0;         // that end, as a wait status
  bool toldStop = false;
  std::string host;  // "" = this machine
  std::string outBuf, errBuf;
  RecordBuffer recBuf;
  bool recMalformed = false;
  std::deque<std::string> tail;
  std::unique_ptr<std::ofstream> logFile;
  bool exited = false;
  RankExit exit;
  Clock::time_point lastSeen = Clock::now();
  double startedS = -1;  // seconds from the launch to its first record (RunReport::lastStartedS)
  std::int64_t lastStep = -1;
  std::string state = "start";
  CollectiveCount collectives;  // from its last heartbeat (Note [Collective positions])

  Rank() = default;
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;
  ~Rank() {
    for (int fd : {outFd, errFd, recFd, ctlFd})
      if (fd >= 0) ::close(fd);
  }
  // "rank 2", or "rank 2 on host node1" for a rank on another host.
  std::string who() const { return "rank " + std::to_string(rank) + (host.empty() ? "" : " on host " + host); }
};

// The process that stands for every rank of one host (Note [Host agent]): ssh running the
// agent there. Its stdin takes ptw's request, then control lines; its stdout is agent frames;
// its stderr what ssh and the agent themselves say. Or, under SLURM, srun for the agents of
// every node (Note [One step for all nodes]): their frames come as labelled text.
struct HostAgent {
  // A node whose agent srun says ended before it reported all its ranks: its ranks end with
  // it, once its last output has had time to come (the news takes another way than the output).
  struct NodeEnd {
    std::string node;
    int status = 0;
    Clock::time_point at;
  };
  int index = 0;
  std::string host;  // its host; for srun's, the nodes joined by ','
  pid_t pid = -1;
  int outFd = -1, errFd = -1, ctlFd = -1;
  std::vector<int> ranks;
  AgentStreamDecoder decoder;
  std::unique_ptr<LabelledAgentStreams> labelled;  // srun's for every node, else none
  std::map<int, std::string> taskNode;             // srun's task number -> its node (AgentFrame::Node)
  std::vector<NodeEnd> nodeEnds;
  std::string errBuf;
  std::string input;  // bytes for its stdin not yet taken, in order
  bool exited = false;
  bool broken = false;      // its stream could not be read: it is killed
  int lastSignal = 0;       // the last signal it was told to send (killAll)
  int endSignal = SIGKILL;  // RankCommand::endSignal
  bool endSent = false;
  Clock::time_point killAt = Clock::time_point::max();

  HostAgent() = default;
  HostAgent(const HostAgent&) = delete;
  HostAgent& operator=(const HostAgent&) = delete;
  ~HostAgent() {
    for (int fd : {outFd, errFd, ctlFd})
      if (fd >= 0) ::close(fd);
  }
};

}  // namespace

namespace {
std::string exitStatusText(const RankExit& e) {
  if (e.connectionLost) return "ssh exit code 255 (the connection to " + e.host + " failed or was lost)";
  if (e.signal != 0) {
    const char* name = ::strsignal(e.signal);
    return "signal " + std::to_string(e.signal) + " (" + (name ? name : "unknown") + ")";
  }
  if (e.exitedWith(WorkerExit::StoppedFromOutside))
    return "exit code " + std::to_string(e.exitCode) + " (stopped from outside ptw)";
  if (e.exitedWith(WorkerExit::CannotStoreMetrics))
    return "exit code " + std::to_string(e.exitCode) + " (could not write the run's metrics)";
  return "exit code " + std::to_string(e.exitCode);
}
}  // namespace

// A program that catches the stop (Python's KeyboardInterrupt) and exits 0 was stopped all
// the same: "exit code 0" alone would read as if it had finished.
std::string RankExit::describe() const {
  return stoppedByPtw ? "stopped (" + exitStatusText(*this) + ")" : exitStatusText(*this);
}

std::string divergedMessage(const RunReport& r) {
  if (r.divergedRank < 0) return "";
  const char* what = std::isnan(r.divergedLoss) ? "NaN" : r.divergedLoss > 0 ? "infinite" : "-infinite";
  return "rank " + std::to_string(r.divergedRank) + ": loss is " + what + " since step " +
         std::to_string(r.divergedAtStep);
}

const char* statusName(RunReport::Status s) {
  switch (s) {
    case RunReport::Status::Finished: return "finished";
    case RunReport::Status::Failed: return "failed";
    case RunReport::Status::Stopped: return "stopped";
  }
  return "unknown";
}

Launcher::Launcher(LaunchOptions options) : m_options(std::move(options)) {
  PTW_CHECK(::pipe2(m_wakePipe, O_CLOEXEC | O_NONBLOCK) == 0, "cannot create pipe: ", std::strerror(errno));
}

Launcher::~Launcher() {
  for (int fd : m_wakePipe)
    if (fd >= 0) ::close(fd);
}

void Launcher::requestStop() {
  m_stopRequested.store(true);
  char c = 's';
  [[maybe_unused]] auto n = ::write(m_wakePipe[1], &c, 1);
}

void Launcher::requestStacks() {
  m_stacksRequested.store(true);
  char c = 't';
  [[maybe_unused]] auto n = ::write(m_wakePipe[1], &c, 1);
}

int Launcher::pickFreePort(int* held) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  PTW_CHECK(fd >= 0, "cannot create a socket: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int err = errno;
  if (ok && held)
    *held = fd;
  else
    ::close(fd);
  PTW_CHECK(ok, "cannot find a free port on 127.0.0.1: ", std::strerror(err));
  return ntohs(addr.sin_port);
}

std::string Launcher::defaultWorkerPath() {
  if (const char* env = std::getenv("PTW_WORKER"); env && *env) return env;
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "ptw-worker";
  std::string exe(buf, static_cast<std::size_t>(n));
  const std::string dir = exe.substr(0, exe.rfind('/') + 1);
  // Beside ptw in a build tree; installed, in a folder of its own off PATH (PTW_WORKER_FROM_BIN,
  // relative to ptw's folder, so an installed tree may be moved). Where neither is there, the
  // first is named in the error.
  const std::string beside = dir + "ptw-worker";
  if (::access(beside.c_str(), X_OK) == 0) return beside;
  const std::string installed = dir + PTW_WORKER_FROM_BIN;
  return ::access(installed.c_str(), X_OK) == 0 ? installed : beside;
}

namespace {

bool portIsFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// Writes `text` to a pipe whose reader may be gone (a remote rank's ssh that exited) without
// the SIGPIPE that would end ptw: the signal is held back in this thread and taken if raised.
void writeWithoutSigpipe(int fd, const std::string& text) {
  sigset_t pipe, old;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe, &old);
  const bool failed = ::write(fd, text.data(), text.size()) < 0 && errno == EPIPE;
  if (failed) {
    const timespec zero{0, 0};
    ::sigtimedwait(&pipe, nullptr, &zero);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// As writeWithoutSigpipe, on a non-blocking descriptor: the bytes taken, -1 when no one reads.
ssize_t writeSomeWithoutSigpipe(int fd, const std::string& text) {
  sigset_t pipe, old;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe, &old);
  ssize_t n = ::write(fd, text.data(), text.size());
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) n = 0;
  if (n < 0 && errno == EPIPE) {
    const timespec zero{0, 0};
    ::sigtimedwait(&pipe, nullptr, &zero);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return n;
}

// Reads what is available; returns false at end of file.
bool drain(int fd, std::string& buf) {
  char chunk[65536];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      buf.append(chunk, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

template <class F>
void forEachLine(std::string& buf, bool flushPartial, F&& f) {
  std::size_t start = 0;
  for (;;) {
    std::size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    f(std::string_view(buf).substr(start, nl - start));
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flushPartial && !buf.empty()) {
    f(std::string_view(buf));
    buf.clear();
  }
}

}  // namespace

void Launcher::checkPortFree(int port) {
  PTW_CHECK(portIsFree(port), "run.port: port ", port,
            " on 127.0.0.1 is already in use; choose another port or set run.port to 0 to pick a free one");
}

void Launcher::checkWorker(const std::string& path) {
  PTW_CHECK(::access(path.c_str(), X_OK) == 0, "worker program ", path, " is not executable (", std::strerror(errno),
            "); build ptw-worker or set PTW_WORKER");
}

// One run of the ranks: spawning, the supervision loop and the report, in named parts.
// Whatever way run() leaves (its return or an exception: a pipe or fork failing midway, an
// observer throwing), the destructor leaves no rank running or unreaped and removes the
// rendezvous file and shared-memory names.
class Launcher::Impl {
 public:
  Impl(const LaunchOptions& options, LaunchObserver& observer, int wakeFd, const std::atomic<bool>& stopRequested,
       std::atomic<bool>& stacksRequested)
      : o(options),
        m_observer(observer),
        m_wakeFd(wakeFd),
        m_stopRequested(stopRequested),
        m_stacksRequested(stacksRequested),
        m_ranks(static_cast<std::size_t>(options.worldSize)) {}
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  RunReport run();

 private:
  // Spawning.
  void openRendezvous();
  WorkerInvocation workerInvocation(int rank) const;
  void spawnAll();
  void spawnRank(Rank& rk, const RankCommand& command);
  void spawnAgents(const std::vector<RankCommand>& commands);
  void spawnAgent(HostAgent& a, const RankCommand& command);
  void killAll(int sig);
  void signalAgent(HostAgent& a, int sig);
  void endAgentProcess(HostAgent& a);
  bool anyRemote() const;

  // The supervision loop.
  void waitForActivity();
  void handleStopRequest();
  void pump(Rank& rk, bool final, Clock::time_point now);
  void tellAgent(HostAgent& a, const std::string& text);
  void pumpAgent(HostAgent& a, bool final, Clock::time_point now);
  void onAgentFrame(HostAgent& a, const AgentFrame& f, Clock::time_point now);
  void agentLine(HostAgent& a, std::string_view line, const std::string& node = "");
  void nodeAgentLine(HostAgent& a, std::string_view line, Clock::time_point now);
  void reapAgents();
  void takeRecords(Rank& rk);
  void watchSteps(Rank& rk, const Record& rec);
  void stopAtStepIfReached();
  void keepLog(Rank& rk, std::string_view line);
  void flushBatch();
  void reap();
  void onExited(Rank& rk, int status, Rank*& firstFailed);
  void judgePending(Rank* firstFailed);
  void detectStalls(Clock::time_point now);
  void blameNoProgress(std::int64_t minStep);
  void enforceKillDeadline();
  std::string takeStacks(const std::string& why, const Rank* behind);

  // Failure blame and the report.
  void beginTeardown(double graceS, bool graded = false);
  void sweepStragglers();
  void fail(Rank& rk, const std::string& why, bool stalled);
  static std::string failureOf(const Rank& rk);
  RunReport finishReport();

  const LaunchOptions& o;
  LaunchObserver& m_observer;
  const int m_wakeFd;
  const std::atomic<bool>& m_stopRequested;
  std::atomic<bool>& m_stacksRequested;

  int m_port = 0;
  std::string m_storeFile;
  int m_heldPort = -1;
  int m_devNull = -1;
  pid_t m_pgid = 0;
  std::vector<Rank> m_ranks;
  std::vector<std::unique_ptr<HostAgent>> m_agents;  // Note [Host agent]: one a host, when the starter uses them
  std::size_t m_alive = 0;
  RunReport m_report;
  Clock::time_point m_started = Clock::now();

  std::vector<Record> m_batch;
  Clock::time_point m_killAt = Clock::time_point::max();
  std::vector<int> m_ladder;  ///< signals still to send, each a grace apart, before SIGKILL
  double m_ladderGraceS = 0;
  bool m_tearingDown = false;
  bool m_stopHandled = false;
  std::optional<std::string> m_stoppedFromOutside;  ///< why, when a rank was stopped by someone else
  std::int64_t m_progressStep = -1;
  Clock::time_point m_progressAt = Clock::now();
  // A remote rank that failed with an exit code, held back briefly (Note [Remote ranks]).
  Rank* m_pending = nullptr;
  Clock::time_point m_pendingUntil;
  std::shared_ptr<const RankStarter> m_starter;
  std::vector<std::int64_t> m_reported;  ///< per reporting rank, the highest step its records named (stopAtStep)
};

Launcher::Impl::~Impl() {
  if (m_devNull >= 0) ::close(m_devNull);
  // An agent's ssh killed ends its connection, and the agent then ends its ranks there; srun
  // told SIGTERM cancels its step, the agents with it (RankCommand::endSignal).
  for (auto& a : m_agents)
    if (a->pid > 0 && !a->exited) ::kill(a->pid, a->endSignal);
  const auto agentsGone = Clock::now() + std::chrono::seconds(5);
  for (auto& a : m_agents) {
    while (a->pid > 0 && !a->exited) {
      if (::waitpid(a->pid, nullptr, WNOHANG) != 0) {
        a->exited = true;
      } else if (Clock::now() >= agentsGone) {
        ::kill(a->pid, SIGKILL);
        ::waitpid(a->pid, nullptr, 0);
        a->exited = true;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  // Only while a rank is left: the group's id could name another process group once all are reaped.
  if (std::any_of(m_ranks.begin(), m_ranks.end(), [](const Rank& rk) { return rk.pid > 0 && !rk.exited; }))
    killAll(SIGKILL);
  // A rank that does not die within 5 s of SIGKILL, stuck in the kernel, is not waited for.
  const auto giveUp = Clock::now() + std::chrono::seconds(5);
  for (auto& rk : m_ranks)
    while (rk.pid > 0 && !rk.exited && ::waitpid(rk.pid, nullptr, WNOHANG) == 0 && Clock::now() < giveUp)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!m_storeFile.empty()) ::unlink(m_storeFile.c_str());
  // Rank 0 removes a segment's name once every rank has mapped it; a rank killed before that
  // leaves the name in /dev/shm.
  for (const char* use : kSharedSegmentUses) ::shm_unlink(sharedSegmentName(m_port, use).c_str());
  if (m_heldPort >= 0) ::close(m_heldPort);
}

RunReport Launcher::Impl::run() {
  openRendezvous();
  m_started = Clock::now();
  m_report.port = m_port;
  spawnAll();
  m_alive = m_ranks.size();
  while (m_alive > 0) {
    waitForActivity();
    handleStopRequest();
    if (m_stacksRequested.exchange(false)) takeStacks("on request", nullptr);
    const auto now = Clock::now();
    for (auto& rk : m_ranks) pump(rk, false, now);
    for (auto& a : m_agents) pumpAgent(*a, false, now);
    flushBatch();
    stopAtStepIfReached();
    reap();
    if (!m_tearingDown && o.stallTimeoutS > 0) detectStalls(now);
    enforceKillDeadline();
  }
  // An agent exits by itself once it has reported every rank and swept what their programs
  // left behind: given up to 2 s for that before the destructor kills its ssh (an agent
  // whose input ends still sweeps).
  const auto agentsBy = Clock::now() + std::chrono::seconds(2);
  for (auto& a : m_agents)
    while (!a->exited && Clock::now() < agentsBy) {
      if (::waitpid(a->pid, nullptr, WNOHANG) == a->pid)
        a->exited = true;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  if (o.commandRanks) sweepStragglers();
  // Note [Python stacks]: the files of programs killed before their rank could remove them.
  if (o.commandRanks)
    for (auto& rk : m_ranks) removePythonStacksFiles(pythonStacksPrefix(o.outDir, rk.rank, rk.pid));
  // Note [Native stacks]: an answer that came after its collection was over.
  if (!o.commandRanks)
    for (auto& rk : m_ranks)
      for (const std::string& f :
           {nativeStacksFile(o.outDir, rk.rank, rk.pid), nativeStacksFile(o.outDir, rk.rank, rk.pid) + ".part"})
        ::unlink(f.c_str());
  return finishReport();
}

// Note [Script ranks]: a program's children may have left the run's process group (mpirun
// gives each of its ranks a group of its own) and outlived it; each still carries the run's
// token in its environment. Only this user's processes can be read, and so killed. Bounded:
// at most 2 s.
void Launcher::Impl::sweepStragglers() {
  const std::size_t killed =
      sweepProcessesWithVariable("PTW_RUN_TOKEN=" + runToken(static_cast<long>(::getpid()), m_port));
  if (killed > 0)
    m_observer.onLog(-1, "ptw: killed " + std::to_string(killed) +
                             " process(es) the run's programs left behind outside its process group");
}

// Note [Local rendezvous]
// With no port from the user the ranks meet through a c10d FileStore in the run folder
// (or /tmp), so nothing listens on a network interface: LibTorch 1.13's TCPStore has
// no bind address and would listen on all of them, and Gloo's own sockets are bound to
// 127.0.0.1 (compat.h). The port picked here then only names the run's shared-memory
// segments. A port given by the user selects a TCPStore on it, as torchrun would.
// A picked port stays bound (nothing listens on it) until the run's shared-memory names
// are removed at its end, so that no concurrent run is handed the same port, and names.
void Launcher::Impl::openRendezvous() {
  m_starter = o.starter ? o.starter : std::make_shared<LocalStarter>();
  if (const int remotePort = m_starter->rendezvousPort()) {  // a TCPStore on another host
    m_port = remotePort;
    return;
  }
  m_port = o.port;
  if (m_port != 0) {
    checkPortFree(m_port);
    return;
  }
  m_port = pickFreePort(&m_heldPort);
  // A user's program listens on it (MASTER_PORT, torchrun's rendezvous): it must be free.
  if (o.commandRanks) {
    ::close(m_heldPort);
    m_heldPort = -1;
  }
  m_storeFile = (o.outDir.empty() ? std::string("/tmp") : o.outDir) + "/ptw-store-" + std::to_string(m_port);
  ::unlink(m_storeFile.c_str());  // a FileStore must start empty (a restarted run reuses its folder)
}

WorkerInvocation Launcher::Impl::workerInvocation(int rank) const {
  WorkerInvocation w(o.workerPath);
  w.setProfile(o.profilePath).setRank(rank).setWorld(o.worldSize).setPort(m_port);
  w.out = o.outDir;
  w.store = m_storeFile;
  w.steps = o.stepFile;
  if (!o.stepFile.empty()) w.stepsLimit = o.stepFileLimit;
  w.attempt = o.attempt;
  w.passOn = o.extraWorkerArgs;
  return w;
}

// A remote rank of its own is asked to stop on its control line, not by a signal, which would
// end its connection. A host agent is told the signal for its ranks (Note [Host agent]); its ssh
// or srun (Note [SLURM ranks]) is killed only when SIGKILL was told and the agent has not ended 3 s later.
void Launcher::Impl::killAll(int sig) {
  const bool ask = sig != SIGKILL;
  if (m_pgid > 0 && m_agents.empty() && !(ask && anyRemote())) ::kill(-m_pgid, sig);
  for (auto& a : m_agents) signalAgent(*a, sig);
  for (auto& rk : m_ranks) {
    if (rk.pid <= 0 || rk.exited || rk.agent >= 0) continue;
    if (!rk.remote || !ask) {
      ::kill(rk.pid, sig);
      continue;
    }
    if (rk.toldStop || rk.ctlFd < 0) continue;
    rk.toldStop = true;
    writeWithoutSigpipe(rk.ctlFd, "stop\n");
  }
}

void Launcher::Impl::signalAgent(HostAgent& a, int sig) {
  if (a.exited || a.pid <= 0) return;
  if (sig == SIGKILL && a.lastSignal == SIGKILL) {
    if (Clock::now() >= a.killAt) endAgentProcess(a);
    return;
  }
  if (sig == a.lastSignal) return;
  a.lastSignal = sig;
  if (sig == SIGKILL) a.killAt = Clock::now() + std::chrono::seconds(3);
  tellAgent(a, "signal " + std::to_string(sig) + "\n");
}

// The process itself, once what it was told has not ended it: its end signal (SIGTERM for
// srun, which then cancels its step), SIGKILL 3 s later if it is still there.
void Launcher::Impl::endAgentProcess(HostAgent& a) {
  if (a.exited || a.pid <= 0) return;
  if (a.endSent && a.endSignal != SIGKILL) {
    if (Clock::now() >= a.killAt) ::kill(a.pid, SIGKILL);
    return;
  }
  ::kill(a.pid, a.endSignal);
  a.endSent = true;
  a.killAt = Clock::now() + std::chrono::seconds(3);
}

bool Launcher::Impl::anyRemote() const {
  return std::any_of(m_ranks.begin(), m_ranks.end(), [](const Rank& rk) { return rk.remote; });
}

void Launcher::Impl::spawnAll() {
  m_devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  PTW_CHECK(m_devNull >= 0, "cannot open /dev/null: ", std::strerror(errno));
  std::vector<int> pids;
  std::vector<RankCommand> commands(static_cast<std::size_t>(o.worldSize));
  for (int r = 0; r < o.worldSize; ++r) {
    Rank& rk = m_ranks[static_cast<std::size_t>(r)];
    rk.rank = r;
    RankCommand& command = commands[static_cast<std::size_t>(r)];
    command = m_starter->command(r, workerInvocation(r));
    if (!command.viaAgent) spawnRank(rk, command);
  }
  spawnAgents(commands);
  for (const auto& rk : m_ranks) pids.push_back(rk.pid);
  ::close(m_devNull);
  m_devNull = -1;
  m_observer.onStarted(m_port, pids);
}

namespace {

// The child's side of fork(): join the run's process group, die with the launcher (Note
// [Worker lifetime]), take the pipes as its standard descriptors (setUpChild) and the record
// pipe as kRecordFd, and exec the worker. Only async-signal-safe calls: everything it needs
// was built before fork().
// A remote rank (recFd < 0) has its records on stdout, and its stdin is its control line.
[[noreturn]] void execWorker(char** argv, const ChildSetup& setup, int recFd) {
  setUpChild(setup);
  if (recFd >= 0) ::dup2(recFd, kRecordFd);  // dup2 clears close-on-exec on the copy
  // Nothing else of the launcher's reaches the worker: the logs of ranks started before
  // this one, the store's database, a window's descriptors.
  static_assert(kRecordFd == 3, "the descriptors above the record pipe are closed");
  bool closed = false;
#ifdef SYS_close_range  // Linux 5.9; the system call itself, for C libraries older than glibc 2.34
  const unsigned firstToClose = recFd >= 0 ? kRecordFd + 1 : kRecordFd;
  closed = ::syscall(SYS_close_range, firstToClose, ~0U, 0) == 0;
#else
  const int firstToClose = recFd >= 0 ? kRecordFd + 1 : kRecordFd;
#endif
  if (!closed)
    for (int fd = static_cast<int>(firstToClose); fd < 65536; ++fd) ::close(fd);
  ::execv(argv[0], argv);
  childExecFailed("ptw-worker: exec failed\n");
}

}  // namespace

void Launcher::Impl::spawnRank(Rank& rk, const RankCommand& command) {
  rk.remote = command.remote;
  rk.connectionLostCode = command.connectionLostCode;
  rk.host = command.host;
  rk.exit.host = command.host;
  int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1}, recPipe[2] = {-1, -1}, ctlPipe[2] = {-1, -1};
  bool piped = ::pipe2(outPipe, O_CLOEXEC) == 0 && ::pipe2(errPipe, O_CLOEXEC) == 0 &&
               ::pipe2(recPipe, O_CLOEXEC) == 0 && (!rk.remote || ::pipe2(ctlPipe, O_CLOEXEC) == 0);
  int pipeErr = errno;
  if (piped) {
    // The record pipe's write end moves above kRecordFd, so the child's dup2s cannot clobber it.
    const int moved = ::fcntl(recPipe[1], F_DUPFD_CLOEXEC, kRecordFd + 1);
    pipeErr = errno;
    ::close(recPipe[1]);
    recPipe[1] = moved;
    piped = moved >= 0;
  }
  if (!piped) {
    for (int fd : {outPipe[0], outPipe[1], errPipe[0], errPipe[1], recPipe[0], recPipe[1], ctlPipe[0], ctlPipe[1]})
      if (fd >= 0) ::close(fd);
    killAll(SIGKILL);
    PTW_FAIL("cannot create pipes for rank ", rk.rank, ": ", std::strerror(pipeErr));
  }
  std::vector<std::string> args = command.argv;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  ChildSetup setup(::getpid());
  setup.setProcessGroup(m_pgid).setStderr(errPipe[1]);
  if (rk.remote)  // Note [Remote ranks]: records on stdout, the control line on stdin
    setup.setStdin(ctlPipe[0]).setStdout(recPipe[1]);
  else
    setup.setStdin(m_devNull).setStdout(outPipe[1]);
  const pid_t pid = ::fork();
  if (pid == 0) execWorker(argv.data(), setup, rk.remote ? -1 : recPipe[1]);
  const int forkErr = errno;
  for (int fd : {outPipe[1], errPipe[1], recPipe[1], ctlPipe[0]})
    if (fd >= 0) ::close(fd);
  if (rk.remote) ::close(outPipe[0]);
  if (pid < 0) {
    for (int fd : {outPipe[0], errPipe[0], recPipe[0], ctlPipe[1]})
      if (fd >= 0 && !(rk.remote && fd == outPipe[0])) ::close(fd);
    killAll(SIGKILL);
    PTW_FAIL("cannot start rank ", rk.rank, ": fork failed: ", std::strerror(forkErr));
  }
  if (m_pgid == 0) m_pgid = pid;
  ::setpgid(pid, m_pgid);  // also in the parent, so kill(-pgid) works at once
  rk.pid = pid;
  rk.outFd = rk.remote ? -1 : outPipe[0];
  rk.errFd = errPipe[0];
  rk.recFd = recPipe[0];
  rk.ctlFd = ctlPipe[1];
  if (rk.outFd >= 0) setNonBlocking(rk.outFd);
  setNonBlocking(rk.errFd);
  setNonBlocking(rk.recFd);
  if (rk.ctlFd >= 0) setNonBlocking(rk.ctlFd);
  ::fcntl(rk.recFd, F_SETPIPE_SZ, 1 << 20);  // a worker's full batch (worker.cpp) in one write; best effort
  if (!o.outDir.empty())
    rk.logFile = std::make_unique<std::ofstream>(o.outDir + "/rank" + std::to_string(rk.rank) + ".log", std::ios::app);
}

// Note [Host agent]: the ranks started through an agent, one agent a host in the order the
// hosts first come, each sent the run's profile and its ranks' command lines; or one process
// for the agents of every host, sent one request for them all (Note [One step for all nodes]).
void Launcher::Impl::spawnAgents(const std::vector<RankCommand>& commands) {
  const bool oneProcess = m_starter->oneProcessForAllAgents();
  std::vector<AgentRequest> requests;
  std::vector<std::string> hosts;
  for (int r = 0; r < o.worldSize; ++r) {
    const RankCommand& c = commands[static_cast<std::size_t>(r)];
    if (!c.viaAgent) continue;
    Rank& rk = m_ranks[static_cast<std::size_t>(r)];
    rk.remote = true;
    rk.connectionLostCode = c.connectionLostCode;
    rk.host = rk.exit.host = c.host;
    if (std::find(hosts.begin(), hosts.end(), c.host) == hosts.end()) hosts.push_back(c.host);
    const std::string key = oneProcess ? std::string() : c.host;
    auto found = std::find_if(m_agents.begin(), m_agents.end(), [&](const auto& a) { return a->host == key; });
    if (found == m_agents.end()) {
      m_agents.push_back(std::make_unique<HostAgent>());
      m_agents.back()->index = static_cast<int>(m_agents.size()) - 1;
      m_agents.back()->host = key;
      requests.emplace_back();
      found = m_agents.end() - 1;
    }
    rk.agent = (*found)->index;
    (*found)->ranks.push_back(r);
    requests[static_cast<std::size_t>(rk.agent)].ranks.push_back(AgentRank{r, c.argv, c.host});
    if (!o.outDir.empty())
      rk.logFile = std::make_unique<std::ofstream>(o.outDir + "/rank" + std::to_string(r) + ".log", std::ios::app);
  }
  if (m_agents.empty()) return;
  std::ifstream in(o.profilePath, std::ios::binary);
  const std::string profile((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  PTW_CHECK(in.good() || in.eof(), "profile ", o.profilePath, " cannot be read");
  for (auto& a : m_agents) {
    AgentRequest& request = requests[static_cast<std::size_t>(a->index)];
    request.version = kVersion;
    request.profile = profile;
    request.allNodes = oneProcess;
    if (oneProcess) {
      for (const auto& h : hosts) a->host += (a->host.empty() ? "" : ",") + h;
      a->labelled = std::make_unique<LabelledAgentStreams>();
    }
    spawnAgent(*a, oneProcess ? m_starter->agentsCommand(hosts) : m_starter->agentCommand(a->host));
    tellAgent(*a, encodeAgentRequest(request));
    for (int r : a->ranks) m_ranks[static_cast<std::size_t>(r)].pid = a->pid;
  }
}

void Launcher::Impl::spawnAgent(HostAgent& a, const RankCommand& command) {
  int ctl[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  const bool piped = ::pipe2(ctl, O_CLOEXEC) == 0 && ::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0;
  const int pipeErr = errno;
  if (!piped) {
    for (int fd : {ctl[0], ctl[1], out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
    killAll(SIGKILL);
    PTW_FAIL("cannot create pipes for the agent of host ", a.host, ": ", std::strerror(pipeErr));
  }
  std::vector<std::string> args = command.argv;
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ChildSetup setup(::getpid());
  setup.setProcessGroup(m_pgid).setStdin(ctl[0]).setStdout(out[1]).setStderr(err[1]);
  setup.setDeathSignal(command.endSignal);
  a.endSignal = command.endSignal;
  const pid_t pid = ::fork();
  if (pid == 0) execWorker(argv.data(), setup, -1);
  const int forkErr = errno;
  for (int fd : {ctl[0], out[1], err[1]}) ::close(fd);
  a.ctlFd = ctl[1], a.outFd = out[0], a.errFd = err[0];
  if (pid < 0) {
    killAll(SIGKILL);
    PTW_FAIL("cannot start the agent of host ", a.host, ": fork failed: ", std::strerror(forkErr));
  }
  if (m_pgid == 0) m_pgid = pid;
  ::setpgid(pid, m_pgid);
  a.pid = pid;
  for (int fd : {a.ctlFd, a.outFd, a.errFd}) setNonBlocking(fd);
  ::fcntl(a.outFd, F_SETPIPE_SZ, 1 << 20);  // as a rank's record pipe; best effort
}

// In order: the request first, then control lines; what the pipe does not take now waits.
void Launcher::Impl::tellAgent(HostAgent& a, const std::string& text) {
  a.input += text;
  if (a.ctlFd < 0 || a.input.empty()) return;
  const ssize_t n = writeSomeWithoutSigpipe(a.ctlFd, a.input);
  if (n < 0)
    a.input.clear();  // ssh is gone: its end is reaped and reported
  else
    a.input.erase(0, static_cast<std::size_t>(n));
}

// Reads what an agent has sent; at end of file (or when `final`) closes its pipes.
void Launcher::Impl::pumpAgent(HostAgent& a, bool final, Clock::time_point now) {
  if (!a.input.empty()) tellAgent(a, "");
  if (a.outFd >= 0) {
    // A few MiB a pass, as a rank's record pipe (RecordBuffer): a host that sends faster than
    // this reads does not hold up the other hosts. At its end, to the end.
    std::string bytes;
    bool open = true;
    char chunk[65536];
    while (final || bytes.size() < (4u << 20)) {
      const ssize_t n = ::read(a.outFd, chunk, sizeof chunk);
      if (n > 0) {
        bytes.append(chunk, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !final;
      break;
    }
    std::string error;
    if (a.labelled) {
      a.labelled->feed(bytes.data(), bytes.size(), [&](int task, const AgentFrame& f) {
        if (f.kind == AgentFrame::Node)
          a.taskNode[task] = f.payload;
        else
          onAgentFrame(a, f, now);
      });
      error = a.labelled->error();
    } else {
      a.decoder.feed(bytes.data(), bytes.size(), [&](const AgentFrame& f) { onAgentFrame(a, f, now); });
      error = a.decoder.error();
    }
    if (!error.empty() && !a.broken) {
      a.broken = true;
      agentLine(a, "ptw: " + error);
      endAgentProcess(a);
    }
    if (!open) ::close(a.outFd), a.outFd = -1;
  }
  if (a.errFd >= 0) {
    const bool open = drain(a.errFd, a.errBuf) && !final;
    forEachLine(a.errBuf, !open, [&](std::string_view l) {
      if (a.labelled)
        nodeAgentLine(a, l, now);
      else
        agentLine(a, l);
    });
    if (!open) ::close(a.errFd), a.errFd = -1;
  }
}

void Launcher::Impl::onAgentFrame(HostAgent& a, const AgentFrame& f, Clock::time_point now) {
  if (f.rank < 0 || f.rank >= o.worldSize) return;
  Rank& rk = m_ranks[static_cast<std::size_t>(f.rank)];
  if (rk.agent != a.index || rk.agentReported) return;
  switch (f.kind) {
    case AgentFrame::Records:
      rk.recBuf.append(f.payload.data(), f.payload.size());
      rk.lastSeen = now;
      if (rk.startedS < 0) rk.startedS = std::chrono::duration<double>(now - m_started).count();
      takeRecords(rk);
      break;
    case AgentFrame::Log:
      rk.lastSeen = now;
      keepLog(rk, f.payload);
      break;
    case AgentFrame::Node: break;  // taken where frames come labelled (pumpAgent)
    case AgentFrame::Exit: {
      int n = 0;
      rk.agentReported = rk.agentFramed = true;
      if (std::sscanf(f.payload.c_str(), "signal %d", &n) == 1)
        rk.agentStatus = n & 0x7f;  // as waitpid gives a death by signal n
      else if (std::sscanf(f.payload.c_str(), "code %d", &n) == 1)
        rk.agentStatus = (n & 0xff) << 8;
      else
        rk.agentStatus = exitCode(WorkerExit::Failed) << 8;
      break;
    }
  }
}

// What ssh or the agent itself says concerns every rank of its host: in each one's log and
// last lines (where a failure's cause is looked for), shown once.
void Launcher::Impl::agentLine(HostAgent& a, std::string_view line, const std::string& node) {
  bool shown = false;
  for (int r : a.ranks) {
    Rank& rk = m_ranks[static_cast<std::size_t>(r)];
    if (rk.exited || (!node.empty() && rk.host != node)) continue;
    if (!shown) {
      keepLog(rk, line);
      shown = true;
      continue;
    }
    if (rk.logFile) *rk.logFile << line << '\n';
    rk.tail.emplace_back(line);
    while (rk.tail.size() > o.logTail) rk.tail.pop_front();
  }
}

// A line srun says for the agents of every node, or one of them says (labelled with its task):
// shown with the ranks of the node it concerns, or with every rank where it names none. srun's
// "srun: error: NODE: task N: Killed" (or "Exited with exit code N") is how an agent that died
// before it reported its ranks is known: they end as it did (Note [One step for all nodes]).
void Launcher::Impl::nodeAgentLine(HostAgent& a, std::string_view line, Clock::time_point now) {
  std::string_view text;
  const int task = splitTaskLabel(line, text);
  std::string node;
  if (task >= 0) {
    const auto known = a.taskNode.find(task);
    if (known != a.taskNode.end()) node = known->second;
  } else if (int status = 0; srunTaskEnd(line, node, status)) {
    a.nodeEnds.push_back({node, status, now});
  }
  const bool known = std::any_of(a.ranks.begin(), a.ranks.end(),
                                 [&](int r) { return m_ranks[static_cast<std::size_t>(r)].host == node; });
  agentLine(a, task >= 0 ? text : line, known ? node : std::string());
}

// An agent that ended reports, for each of its ranks it had not reported, its own end: ssh's
// 255 is the connection lost (Note [Remote ranks]).
void Launcher::Impl::reapAgents() {
  for (auto& ap : m_agents) {
    HostAgent& a = *ap;
    int status = 0;
    const bool ended = !a.exited && ::waitpid(a.pid, &status, WNOHANG) == a.pid;
    if (ended) {
      a.exited = true;
      pumpAgent(a, true, Clock::now());
    }
    // A node's agent that srun says ended, once its output has had time to come (the news
    // takes another way): an agent killed by a signal could send no more, a second will do;
    // one that exited by itself reported every rank it started first, so its frames are
    // waited for, up to 10 s. Or at once when srun itself has ended, and all of it came.
    for (auto e = a.nodeEnds.begin(); e != a.nodeEnds.end();) {
      const bool killed = WIFSIGNALED(e->status);
      if (!a.exited && Clock::now() - e->at < std::chrono::seconds(killed ? 1 : 10)) {
        ++e;
        continue;
      }
      for (int r : a.ranks) {
        Rank& rk = m_ranks[static_cast<std::size_t>(r)];
        if (rk.host != e->node || rk.agentReported) continue;
        rk.agentReported = true;
        rk.agentStatus = e->status;
      }
      e = a.nodeEnds.erase(e);
    }
    if (!ended) continue;
    for (int r : a.ranks) {
      Rank& rk = m_ranks[static_cast<std::size_t>(r)];
      if (rk.agentReported) continue;
      rk.agentReported = true;
      rk.agentStatus = status;
    }
  }
}

void Launcher::Impl::waitForActivity() {
  std::vector<pollfd> fds;
  fds.push_back({m_wakeFd, POLLIN, 0});
  for (auto& rk : m_ranks)
    for (int fd : {rk.outFd, rk.errFd, rk.recFd})
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  for (auto& a : m_agents)
    for (int fd : {a->outFd, a->errFd})
      if (fd >= 0) fds.push_back({fd, POLLIN, 0});
  ::poll(fds.data(), fds.size(), 100);
  char sink[64];
  while (::read(m_wakeFd, sink, sizeof sink) > 0) {
  }
}

void Launcher::Impl::handleStopRequest() {
  if (!m_stopRequested.load() || m_stopHandled) return;
  m_stopHandled = true;
  if (m_report.failedRank < 0) m_report.status = RunReport::Status::Stopped;
  beginTeardown(o.stopGraceS, o.commandRanks);
}

void Launcher::Impl::keepLog(Rank& rk, std::string_view line) {
  std::string s(line);
  if (rk.logFile) *rk.logFile << s << '\n';
  rk.tail.push_back(s);
  while (rk.tail.size() > o.logTail) rk.tail.pop_front();
  m_observer.onLog(rk.rank, s);
}

void Launcher::Impl::takeRecords(Rank& rk) {
  if (rk.recMalformed) {
    rk.recBuf.clear();
    return;
  }
  const std::size_t first = m_batch.size();
  bool malformed = false;
  rk.recBuf.consume(decodeRecords(rk.recBuf.view(), m_batch, malformed));
  for (std::size_t i = first; i < m_batch.size(); ++i) {
    Record& rec = m_batch[i];
    // A worker speaks only for itself; a run of one process (DataParallel) reports one
    // series per replica, which it numbers itself.
    // A command rank names the rank of each record itself, checked against the profile's
    // command.report_ranks (mpirun's ranks under one process); so does a synthetic rank's process.
    const bool namesRanks = o.commandRanks || o.workersNameRanks;
    if (!namesRanks && (o.worldSize > 1 || !holdsSteps(rec))) rec.step.rank = rk.rank;
    // A process may stand for several ranks (mpirun's): its heartbeats give the step of the
    // one furthest behind, which is what a stall is judged on.
    if (!namesRanks || rec.kind == Record::Kind::Heartbeat) rk.lastStep = std::max(rk.lastStep, rec.step.step);
    if (rec.kind == Record::Kind::Heartbeat)
      rk.collectives = {rk.rank, rec.countsCollectives, rec.collectivesEntered, rec.collectivesCompleted,
                        std::string(rec.collectiveName())};
    watchSteps(rk, rec);
  }
  if (m_batch.size() > first) {
    const Record& last = m_batch.back();
    if (last.kind == Record::Kind::Heartbeat)
      rk.state = last.state;
    else if (last.kind == Record::Kind::Done)
      rk.state = "done";
    else
      rk.state = "train";
  }
  if (malformed) {
    rk.recMalformed = true;
    rk.recBuf.clear();
    keepLog(rk, "ptw: malformed data on this rank's record pipe; its further records are ignored");
  }
}

// Note [Diverged runs], and the steps each reporting rank reached (stopAtStep).
void Launcher::Impl::watchSteps(Rank& rk, const Record& rec) {
  if (rec.kind == Record::Kind::Heartbeat || rec.kind == Record::Kind::Done) return;
  const int rank = rec.step.rank;
  if (o.stopAtStep > 0 && rank >= 0) {
    if (static_cast<std::size_t>(rank) >= m_reported.size()) m_reported.resize(static_cast<std::size_t>(rank) + 1, -1);
    m_reported[static_cast<std::size_t>(rank)] = std::max(m_reported[static_cast<std::size_t>(rank)], rec.step.step);
  }
  if (!holdsSteps(rec) || m_report.divergedRank >= 0) return;
  // A group's extremes: its first loss where that is the one that diverged, an infinity
  // wherever it came (Note [Not reported]: a group without losses holds notReported()).
  const bool group = rec.kind == Record::Kind::Group;
  const double low = group ? rec.group.lossMin : rec.step.loss, high = group ? rec.group.lossMax : rec.step.loss;
  double bad = 0;
  if (isReportedLoss(low) && !std::isfinite(low))
    bad = low;
  else if (isReportedLoss(high) && !std::isfinite(high))
    bad = high;
  else
    return;
  m_report.divergedRank = rank;
  m_report.divergedAtStep = group ? rec.group.first : rec.step.step;
  m_report.divergedLoss = bad;
  const std::string what = divergedMessage(m_report);
  if (o.stopOnDiverged && !m_tearingDown) {
    fail(rk, "diverged: " + what + " (run.on_nan is \"stop\")", false);
    m_report.message = what + "; stopped the run (run.on_nan is \"stop\")";
  } else {
    m_observer.onLog(-1, "ptw: warning: " + what + " (run.on_nan \"stop\" ends a run there)");
  }
}

void Launcher::Impl::stopAtStepIfReached() {
  if (o.stopAtStep <= 0 || m_tearingDown) return;
  const int ranks = o.reportRanks > 0 ? o.reportRanks : o.worldSize;
  if (static_cast<int>(m_reported.size()) < ranks) return;
  for (int r = 0; r < ranks; ++r)
    if (m_reported[static_cast<std::size_t>(r)] < o.stopAtStep) return;
  m_report.reachedStopStep = true;
  m_observer.onLog(-1, "ptw: every rank reached step " + std::to_string(o.stopAtStep) +
                           " (hyper.max_steps); stopping the program as a stop does");
  beginTeardown(o.stopGraceS, true);
}

// Reads what a rank has written; at end of file (or when `final`) closes its pipes.
void Launcher::Impl::pump(Rank& rk, bool final, Clock::time_point now) {
  for (int* fd : {&rk.outFd, &rk.errFd, &rk.recFd}) {
    if (*fd < 0) continue;
    bool open;
    if (fd == &rk.recFd) {
      const std::size_t before = rk.recBuf.size();
      open = rk.recBuf.readFrom(*fd) && !final;
      if (rk.recBuf.size() != before) {
        rk.lastSeen = now;
        if (rk.startedS < 0) rk.startedS = std::chrono::duration<double>(now - m_started).count();
      }
      takeRecords(rk);
    } else {
      std::string& buf = fd == &rk.outFd ? rk.outBuf : rk.errBuf;
      const std::size_t before = buf.size();
      open = drain(*fd, buf) && !final;
      if (buf.size() != before) rk.lastSeen = now;
      forEachLine(buf, !open, [&](std::string_view l) { keepLog(rk, l); });
    }
    if (!open) {
      ::close(*fd);
      *fd = -1;
    }
  }
}

void Launcher::Impl::flushBatch() {
  if (m_batch.empty()) return;
  m_observer.onRecords(m_batch);
  m_batch.clear();
}

// Among ranks that fail in the same pass, one killed by a signal is the cause and the others
// (whose collectives broke) are the effect (one that could not write the run's metrics is
// named after the run, in finishReport). A rank that exits 0 before the others finish is fine
// (it may have fewer batches); the others end their run on their own.
void Launcher::Impl::reap() {
  Rank* firstFailed = nullptr;
  reapAgents();
  for (auto& rk : m_ranks) {
    if (rk.exited) continue;
    if (rk.agent >= 0) {
      if (rk.agentReported) onExited(rk, rk.agentStatus, firstFailed);
      continue;
    }
    int status = 0;
    if (::waitpid(rk.pid, &status, WNOHANG) != rk.pid) continue;
    onExited(rk, status, firstFailed);
  }
  judgePending(firstFailed);
}

// A failure's cause is a rank killed by a signal or a lost host; the others' exit codes are
// the collectives it broke. Locally the cause is reaped in the same pass; a remote rank's
// status crosses a connection, and its peers' may arrive first: a remote rank failing with an
// exit code is held back for up to 2 s, for a cause to arrive and be named instead.
void Launcher::Impl::judgePending(Rank* firstFailed) {
  auto isCause = [](const Rank& rk) { return rk.exit.signal != 0 || rk.exit.connectionLost; };
  if (firstFailed && !m_pending && !isCause(*firstFailed) && anyRemote() && m_report.failedRank < 0) {
    m_pending = firstFailed;
    m_pendingUntil = Clock::now() + std::chrono::seconds(2);
    return;
  }
  if (m_pending && m_report.failedRank < 0) {
    if (firstFailed && isCause(*firstFailed)) {
      m_pending = nullptr;
    } else if (Clock::now() >= m_pendingUntil || m_alive == 0) {
      firstFailed = m_pending;
      m_pending = nullptr;
    } else {
      return;
    }
  }
  if (firstFailed) fail(*firstFailed, failureOf(*firstFailed), false);
}

void Launcher::Impl::onExited(Rank& rk, int status, Rank*& firstFailed) {
  pump(rk, true, Clock::now());  // what is left in its pipes, before judging it
  flushBatch();
  rk.exited = true;
  --m_alive;
  rk.exit.rank = rk.rank;
  rk.exit.pid = rk.pid;
  // Every rank left running was told to stop when the teardown began (beginTeardown, fail).
  rk.exit.stoppedByPtw = m_tearingDown;
  if (WIFSIGNALED(status))
    rk.exit.signal = WTERMSIG(status);
  else
    rk.exit.exitCode = WEXITSTATUS(status);
  // Note [Remote ranks]: ssh's 255 is its own (the connection); the remote shell gives a
  // worker's death by signal N as 128+N, as srun does (Note [SLURM ranks]). ssh or srun
  // itself killed here is the launcher's doing.
  if (rk.remote && !rk.agentFramed && rk.exit.signal == 0) {
    if (rk.connectionLostCode != 0 && rk.exit.exitCode == rk.connectionLostCode) {
      rk.exit.connectionLost = true;
    } else if (rk.exit.exitCode > 128 && rk.exit.exitCode < 128 + 65) {
      rk.exit.signal = rk.exit.exitCode - 128;
      rk.exit.exitCode = -1;
    }
  }
  // How it ended closes its log, where the program's last words are.
  if (rk.logFile) *rk.logFile << "ptw: rank " << rk.rank << " ended: " << rk.exit.describe() << '\n' << std::flush;
  m_observer.onRankExit(rk.exit);
  // Stopped by a signal someone sent to the rank, not to ptw: the ranks agreed on a step
  // and stopped there, which is a stop, not a failure (no restart), said as such.
  if (rk.exit.exitedWith(WorkerExit::StoppedFromOutside) && m_report.failedRank < 0) {
    if (!m_stoppedFromOutside)
      m_stoppedFromOutside = "rank " + std::to_string(rk.rank) +
                             " was sent a stop signal from outside ptw; the ranks stopped together at their next step";
    m_report.status = RunReport::Status::Stopped;
    beginTeardown(o.stopGraceS);
    return;
  }
  const auto isCause = [](const Rank& r) { return r.exit.signal != 0 || r.exit.connectionLost; };
  if (rk.exit.failed() && !m_tearingDown && (!firstFailed || (isCause(rk) && !isCause(*firstFailed))))
    firstFailed = &rk;
}

// Stalls: a rank silent for the timeout (stopped, hung), or no rank making progress.
void Launcher::Impl::detectStalls(Clock::time_point now) {
  // A command rank whose program has reported nothing yet ("quiet") has no steps to count.
  std::int64_t minStep = INT64_MAX;
  for (auto& rk : m_ranks)
    if (!rk.exited && rk.state != "done" && rk.state != "quiet") minStep = std::min(minStep, rk.lastStep);
  if (minStep != m_progressStep) {
    m_progressStep = minStep;
    m_progressAt = now;
  }
  for (auto& rk : m_ranks) {
    if (rk.exited || m_tearingDown) continue;
    const double silent = std::chrono::duration<double>(now - rk.lastSeen).count();
    if (silent > o.stallTimeoutS)
      fail(rk,
           "stalled: no output for " + std::to_string(static_cast<int>(silent)) + " s (stopped or hung) after step " +
               std::to_string(rk.lastStep),
           true);
  }
  if (!m_tearingDown && minStep != INT64_MAX &&
      std::chrono::duration<double>(now - m_progressAt).count() > o.stallTimeoutS)
    blameNoProgress(minStep);
}

// Note [Who stalled]
// No rank past minStep for the timeout: the rank to blame is one at minStep that is
// not waiting for the others. Each heartbeat says whether its rank is inside a
// barrier or collective ("comm") or working on its own ("train"); ranks stuck in a
// collective are the effect of the one that never arrived. The ranks' own wait limit is
// 5 s longer (engine::peerTimeout), so this fires first and names the cause.
// Where every rank counts its collectives (Note [Collective positions]), the counts name
// the rank that is behind and the collective the others wait in, exactly.
void Launcher::Impl::blameNoProgress(std::int64_t minStep) {
  const std::string seconds = std::to_string(static_cast<int>(o.stallTimeoutS)) + " s";
  std::vector<CollectiveCount> counts;
  for (auto& rk : m_ranks)
    if (!rk.exited && rk.state != "done") counts.push_back(rk.collectives);
  if (const CollectiveBlame blame = blameCollectives(counts); !blame.empty() && minStep > 0) {
    for (auto& rk : m_ranks)
      if (rk.rank == blame.behind.front() && !rk.exited) {
        fail(rk,
             std::string("stopped making progress: ") +
                 (rk.state == "comm" ? "behind the others" : "stuck in its own work") + " after step " +
                 std::to_string(minStep) + " for " + seconds + "; " + blame.sentence(),
             true);
        return;
      }
  }
  Rank* stuck = nullptr;
  std::string waiting;
  for (auto& rk : m_ranks) {
    if (rk.exited || rk.lastStep != minStep || rk.state == "quiet") continue;
    if (rk.state == "comm")
      waiting += (waiting.empty() ? "" : ", ") + std::to_string(rk.rank);
    else if (!stuck)
      stuck = &rk;
  }
  if (stuck && minStep <= 0 && !waiting.empty()) {
    fail(*stuck,
         "never joined the rendezvous (port " + std::to_string(m_port) + ") within " + seconds +
             " of the start; rank(s) " + waiting +
             " waited for it there (still loading, or it cannot reach the "
             "rendezvous address; run.timeout_s)",
         true);
  } else if (stuck && minStep <= 0) {
    fail(*stuck,
         "did not finish its first step within " + seconds +
             " of the start (loading, or meeting the other ranks; run.timeout_s)",
         true);
  } else if (stuck) {
    fail(*stuck,
         "stopped making progress: stuck in its own work after step " + std::to_string(minStep) + " for " + seconds +
             (waiting.empty() ? "" : "; rank(s) " + waiting + " waited for it"),
         true);
  } else {
    for (auto& rk : m_ranks)
      if (!rk.exited && rk.lastStep == minStep && rk.state != "quiet") {
        fail(rk,
             "stopped making progress: every rank waits for the others after step " + std::to_string(minStep) +
                 " for " + seconds + " (a collective that never completes)",
             true);
        break;
      }
  }
}

// Note [Taking stacks]. Returns the top frames of `behind` ("" without them). Bounded by
// stacksBudgetS; the loop is held that long, and the ranks' pipes wait for it.
std::string Launcher::Impl::takeStacks(const std::string& why, const Rank* behind) {
  if (o.stacksBudgetS <= 0) return "";
  std::vector<StackTarget> targets;
  for (const auto& rk : m_ranks) {
    if (rk.pid <= 0 || rk.exited) continue;
    StackTarget t;
    t.rank = rk.rank, t.pid = rk.pid, t.host = rk.host, t.remote = rk.remote;
    if (o.commandRanks)
      t.pythonPrefix = pythonStacksPrefix(o.outDir, rk.rank, rk.pid);
    else if (!rk.remote || !o.outDir.empty())  // Note [Native stacks]: a remote rank writes to the shared folder
      t.nativeFile = nativeStacksFile(o.outDir, rk.rank, rk.pid);
    t.controlFd = rk.ctlFd;
    if (rk.agent >= 0) {  // Note [Host agent]: asked through its host's agent
      HostAgent& a = *m_agents[static_cast<std::size_t>(rk.agent)];
      // Behind what its input still holds (the request, a signal line), the ask would cut
      // into it: such an agent is not asked now.
      tellAgent(a, "");
      t.controlFd = a.input.empty() ? a.ctlFd : -1;
      t.ask = "stacks " + std::to_string(rk.rank) + "\n";
    }
    // The rank that is behind first: where cores are few, its stack is the one to have.
    targets.insert(behind && rk.rank == behind->rank ? targets.begin() : targets.end(), std::move(t));
  }
  if (targets.empty()) return "";
  auto stacks = StackCollector(o.stacksBudgetS).collect(targets);
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  for (auto& s : stacks)
    if (s.host.empty()) s.host = host;
  const std::string title = "ptw: stacks of every rank, attempt " + std::to_string(o.attempt) + ": " + why;
  const std::string path = StackCollector::write(o.outDir, o.attempt, StackCollector::render(stacks, title));
  if (!path.empty()) {
    m_report.stacksFile = path;
    m_observer.onLog(-1, "ptw: every rank's stacks are in " + path);
  }
  for (const auto& s : stacks)
    if (behind && s.rank == behind->rank) return StackCollector::topFrames(s);
  return "";
}

// After the grace period, SIGKILL. A rank SIGKILL does not end within 5 s is stuck in the
// kernel (a driver, a network file system): said, and not waited for, rather than the run
// never ending.
void Launcher::Impl::enforceKillDeadline() {
  if (!m_tearingDown) return;
  if (!m_ladder.empty() && Clock::now() >= m_killAt) {
    killAll(m_ladder.front());
    m_ladder.erase(m_ladder.begin());
    m_killAt = Clock::now() + std::chrono::milliseconds(static_cast<long>(m_ladderGraceS * 1000));
    return;
  }
  if (Clock::now() >= m_killAt) killAll(SIGKILL);
  if (Clock::now() < m_killAt + std::chrono::seconds(5)) return;
  for (auto& rk : m_ranks) {
    if (rk.exited) continue;
    m_observer.onLog(-1, "ptw: rank " + std::to_string(rk.rank) + " (pid " + std::to_string(rk.pid) +
                             ") did not end 5 s after SIGKILL (stuck in the kernel); no longer waiting for it");
    rk.exited = true;
    rk.exit.rank = rk.rank;
    rk.exit.pid = rk.pid;
    rk.exit.signal = SIGKILL;
    rk.exit.stoppedByPtw = true;
    --m_alive;
  }
}

// A graded stop (users' programs) asks with SIGINT, as Ctrl-C would, then SIGTERM, each a
// grace apart; ptw's own ranks stop on SIGTERM.
void Launcher::Impl::beginTeardown(double graceS, bool graded) {
  if (m_tearingDown) return;
  m_tearingDown = true;
  killAll(graded ? SIGINT : SIGTERM);
  if (graded) m_ladder = {SIGTERM};
  m_ladderGraceS = graceS;
  m_killAt = Clock::now() + std::chrono::milliseconds(static_cast<long>(graceS * 1000));
}

void Launcher::Impl::fail(Rank& rk, const std::string& why, bool stalled) {
  if (m_report.failedRank >= 0) return;
  m_report.status = RunReport::Status::Failed;
  m_report.failedRank = rk.rank;
  m_report.stalled = stalled;
  m_report.message = rk.who() + " " + why;
  if (stalled) {
    // Where it is stuck, taken before the kill that ends it (Note [Taking stacks]).
    if (const std::string where = takeStacks(rk.who() + " " + why, &rk); !where.empty())
      m_report.message += "; at " + where;
    // A stalled process never exits by itself: it must be killed now.
    m_tearingDown = true;
    killAll(SIGKILL);
    m_killAt = Clock::now();
  } else {
    beginTeardown(o.failGraceS);
  }
}

// Why a rank failed; one that could not write the run's metrics said why in its last error line.
std::string Launcher::Impl::failureOf(const Rank& rk) {
  if (rk.exit.connectionLost) {
    // ssh's last line says how: "Timeout, server ... not responding.", "connect to host ...".
    std::string how;
    for (auto line = rk.tail.rbegin(); line != rk.tail.rend() && how.empty(); ++line)
      if (!line->empty() && line->rfind("[rank ", 0) != 0 && line->rfind("error: ", 0) != 0) how = *line;
    return "lost its host: the ssh connection to " + rk.host + " failed or dropped (ssh exit code 255" +
           (how.empty() ? "" : ": " + how) + ")";
  }
  if (rk.exit.exitedWith(WorkerExit::BadInput) && rk.remote)  // bad arguments, or the run folder not shared
    for (auto line = rk.tail.rbegin(); line != rk.tail.rend(); ++line)
      if (line->rfind("error:", 0) == 0) return "failed with " + rk.exit.describe() + ": " + line->substr(7);
  if (rk.exit.exitedWith(WorkerExit::CannotStoreMetrics))
    for (auto line = rk.tail.rbegin(); line != rk.tail.rend(); ++line)
      if (const auto at = line->find("run store "); line->rfind("error:", 0) == 0 && at != std::string::npos)
        return "could not write the run's metrics: " + line->substr(at);
  // srun that could not start the agent's step says why itself (Note [SLURM ranks]).
  if (rk.exit.signal == 0 && rk.remote)
    for (auto line = rk.tail.rbegin(); line != rk.tail.rend(); ++line)
      if (line->rfind("srun: error: ", 0) == 0 && line->find(": task ") == std::string::npos)
        return "failed with " + rk.exit.describe() + ": " + *line;
  // A command rank whose program left torch's error file named what it raised and where.
  const std::string raised = "error: [rank " + std::to_string(rk.rank) + "] " + std::string(kProgramRaised);
  for (auto line = rk.tail.rbegin(); line != rk.tail.rend(); ++line)
    if (line->rfind(raised, 0) == 0) return "failed with " + rk.exit.describe() + ": " + line->substr(raised.size());
  return "failed with " + rk.exit.describe();
}

RunReport Launcher::Impl::finishReport() {
  RunReport& report = m_report;
  for (auto& rk : m_ranks) report.exits.push_back(rk.exit);
  // A rank that could not write the run's metrics is the cause, even where a rank whose
  // collective it broke by leaving was reaped first.
  if (report.status == RunReport::Status::Failed && !report.stalled && report.failedRank >= 0)
    for (auto& rk : m_ranks)
      if (rk.exit.exitedWith(WorkerExit::CannotStoreMetrics) && rk.rank != report.failedRank) {
        report.failedRank = rk.rank;
        report.message = rk.who() + " " + failureOf(rk);
        break;
      }
  if (report.failedRank >= 0) {
    Rank& rk = m_ranks[static_cast<std::size_t>(report.failedRank)];
    report.failedExit = rk.exit;
    report.lastLines.assign(rk.tail.begin(), rk.tail.end());
    if (report.stalled) report.message += "; killed";
  } else if (report.status == RunReport::Status::Finished && report.reachedStopStep) {
    report.message = "all " + std::to_string(o.worldSize) + " ranks reached step " + std::to_string(o.stopAtStep) +
                     " (hyper.max_steps) and were stopped";
  } else if (report.status == RunReport::Status::Finished && o.workersNameRanks) {
    report.message =
        "all " + std::to_string(o.reportRanks) + " ranks finished, in " + std::to_string(o.worldSize) + " process(es)";
  } else if (report.status == RunReport::Status::Finished) {
    report.message = "all " + std::to_string(o.worldSize) + " ranks finished";
  } else if (m_stoppedFromOutside) {
    report.message = *m_stoppedFromOutside;
  } else {
    report.message = "stopped by request";
  }
  report.wallS = secondsSince(m_started);
  const auto [first, last] = std::minmax_element(m_ranks.begin(), m_ranks.end(),
                                                 [](const Rank& a, const Rank& b) { return a.startedS < b.startedS; });
  if (first != m_ranks.end() && first->startedS >= 0) {
    report.firstStartedS = first->startedS;
    report.lastStartedS = last->startedS;
  }
  return report;
}

RunReport Launcher::run(LaunchObserver& observer) {
  PTW_CHECK(m_options.worldSize >= 1, "world size must be >= 1, got ", m_options.worldSize);
  checkWorker(m_options.workerPath);
  PTW_CHECK(::access(m_options.profilePath.c_str(), R_OK) == 0, "profile ", m_options.profilePath, " is not readable");
  Impl impl(m_options, observer, m_wakePipe[0], m_stopRequested, m_stacksRequested);
  return impl.run();
}

}  // namespace ptw::core
