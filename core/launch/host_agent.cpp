// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/host_agent.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/child_setup.h"
#include "common/command.h"
#include "common/error.h"
#include "common/processes.h"
#include "common/version.h"
#include "common/worker_invocation.h"
#include "launch/agent_text_stream.h"

namespace ptw::core {

namespace {

constexpr char kMagic[4] = {'P', 'T', 'W', 'A'};
constexpr std::size_t kHeader = 4 + 1 + 4 + 4;

void putU32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint32_t getU32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// One rank as the agent keeps it.
struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;  // its stdout (records) and stderr (log); -1 once at end of file
  int in = -1;             // its stdin, its control line (Note [Remote ranks]); open while it runs
  std::string partial;     // a log line not yet ended
  int status = 0;
  bool reaped = false, reported = false;
};

// The agent's side of one run: its ranks and its output.
class Agent {
 public:
  Agent(int inFd, int outFd, bool text) : m_in(inFd), m_outFd(outFd), m_text(text) {}

  ~Agent() {
    for (auto& c : m_children) {
      if (!c.reaped && c.pid > 0) {
        ::kill(-c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
      for (int fd : {c.out, c.err, c.in})
        if (fd >= 0) ::close(fd);
    }
  }

  void start(const AgentRank& r) {
    PTW_CHECK(!r.argv.empty(), "rank ", r.rank, ": no program to start");
    int out[2], err[2], in[2];
    PTW_CHECK(::pipe2(out, O_CLOEXEC) == 0, "rank ", r.rank, ": no pipe: ", std::strerror(errno));
    if (::pipe2(err, O_CLOEXEC) != 0) {
      ::close(out[0]), ::close(out[1]);
      PTW_FAIL("rank ", r.rank, ": no pipe: ", std::strerror(errno));
    }
    if (::pipe2(in, O_CLOEXEC) != 0) {
      ::close(out[0]), ::close(out[1]), ::close(err[0]), ::close(err[1]);
      PTW_FAIL("rank ", r.rank, ": no pipe: ", std::strerror(errno));
    }
    std::vector<char*> argv;
    for (const auto& a : r.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const auto setup = ChildSetup(::getpid()).setProcessGroup(0).setStdin(in[0]).setStdout(out[1]).setStderr(err[1]);
    // A signal sent to the rank's group before its program runs must not run this process's
    // handlers in the child: every signal is held across fork, and the child drops the
    // handlers before setUpChild lets signals in.
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    const pid_t pid = ::fork();
    if (pid == 0) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig = 1; sig < NSIG; ++sig)
        if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
      setUpChild(setup);
      ::execv(argv[0], argv.data());
      childExecFailed("error: the host agent cannot start a rank's program\n");
    }
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::close(out[1]), ::close(err[1]), ::close(in[0]);
    if (pid < 0) {
      ::close(out[0]), ::close(err[0]), ::close(in[1]);
      PTW_FAIL("rank ", r.rank, ": fork failed: ", std::strerror(errno));
    }
    ::setpgid(pid, pid);  // as the child does: a signal to the group reaches it whichever runs first
    Child c;
    c.rank = r.rank, c.pid = pid, c.out = out[0], c.err = err[0], c.in = in[1];
    m_children.push_back(c);
  }

  // The agent's node, before any rank's frame (Note [One step for all nodes]).
  void sayNode(const std::string& node) { send(AgentFrame::Node, 0, node); }

  // Until every rank is reported.
  int run() {
    while (!allReported()) {
      std::vector<pollfd> fds;
      if (m_in >= 0) fds.push_back({m_in, POLLIN, 0});
      for (const auto& c : m_children)
        for (int fd : {c.out, c.err})
          if (fd >= 0) fds.push_back({fd, POLLIN, 0});
      const int n = ::poll(fds.data(), fds.size(), 100);  // also wakes to reap ranks that closed early
      if (n < 0 && errno != EINTR) signalAll(SIGKILL);
      for (const auto& p : fds)
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) readable(p.fd);
      reap();
    }
    bool allZero = true;
    for (const auto& c : m_children) allZero = allZero && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
    return allZero ? 0 : 1;
  }

 private:
  bool allReported() const {
    for (const auto& c : m_children)
      if (!c.reported) return false;
    return true;
  }

  void signalAll(int sig) {
    for (const auto& c : m_children)
      if (!c.reaped) ::kill(-c.pid, sig);
  }

  void send(AgentFrame::Kind kind, int rank, std::string payload) {
    if (m_outBroken) return;
    std::string bytes = encodeAgentFrame(AgentFrame{kind, rank, std::move(payload)});
    if (m_text) bytes = encodeAgentTextUnit(bytes);
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w = ::write(m_outFd, bytes.data() + done, bytes.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {  // no one reads the ranks any more: they must not go on unrecorded
        m_outBroken = true;
        signalAll(SIGKILL);
        return;
      }
      done += static_cast<std::size_t>(w);
    }
  }

  void control() {
    char buf[256];
    const ssize_t n = ::read(m_in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {  // the connection or ptw is gone (Note [Host agent])
      m_in = -1;
      signalAll(SIGKILL);
      return;
    }
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        if (m_line.size() < 64) m_line += buf[i];
        continue;
      }
      int sig = 0, rank = -1;
      if (std::sscanf(m_line.c_str(), "signal %d", &sig) == 1 && sig > 0 && sig < NSIG) signalAll(sig);
      if (std::sscanf(m_line.c_str(), "stacks %d", &rank) == 1) tell(rank, "stacks\n");
      m_line.clear();
    }
  }

  // A line on rank `rank`'s own control line; a rank gone (its pipe closed) is not asked.
  void tell(int rank, const char* line) {
    for (auto& c : m_children)
      if (c.rank == rank && c.in >= 0 && ::write(c.in, line, std::strlen(line)) < 0) {
        ::close(c.in);
        c.in = -1;
      }
  }

  void readable(int fd) {
    if (fd == m_in) return control();
    for (auto& c : m_children) {
      if (fd != c.out && fd != c.err) continue;
      char buf[65536];
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) return;
      if (n <= 0) {
        ::close(fd);
        if (fd == c.err && !c.partial.empty()) send(AgentFrame::Log, c.rank, std::exchange(c.partial, ""));
        (fd == c.out ? c.out : c.err) = -1;
        return;
      }
      if (fd == c.out) return send(AgentFrame::Records, c.rank, std::string(buf, static_cast<std::size_t>(n)));
      c.partial.append(buf, static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = c.partial.find('\n')) != std::string::npos;) {
        send(AgentFrame::Log, c.rank, c.partial.substr(0, nl));
        c.partial.erase(0, nl + 1);
      }
      return;
    }
  }

  // A rank is reported once it has exited and its output is read to the end.
  void reap() {
    for (auto& c : m_children) {
      if (!c.reaped && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.reaped = true;
        if (c.in >= 0) ::close(c.in), c.in = -1;
        ::kill(-c.pid, SIGKILL);  // what it left in its group (holding its pipes open) goes with it
      }
      if (!c.reaped || c.reported || c.out >= 0 || c.err >= 0) continue;
      send(AgentFrame::Exit, c.rank,
           WIFSIGNALED(c.status) ? "signal " + std::to_string(WTERMSIG(c.status))
                                 : "code " + std::to_string(WEXITSTATUS(c.status)));
      c.reported = true;
    }
  }

  int m_in, m_outFd;
  bool m_text;
  bool m_outBroken = false;
  std::string m_line;
  std::vector<Child> m_children;
};

}  // namespace

std::string encodeAgentFrame(const AgentFrame& f) {
  std::string out(kMagic, 4);
  out += static_cast<char>(f.kind);
  putU32(out, static_cast<std::uint32_t>(f.rank));
  putU32(out, static_cast<std::uint32_t>(f.payload.size()));
  return out + f.payload;
}

void AgentStreamDecoder::feed(const char* data, std::size_t n, const std::function<void(const AgentFrame&)>& frame) {
  if (!m_error.empty()) return;
  m_buffer.append(data, n);
  std::size_t at = 0;
  while (m_buffer.size() - at >= kHeader) {
    const char* h = m_buffer.data() + at;
    const char kind = h[4];
    const std::uint32_t length = getU32(h + 9);
    if (std::memcmp(h, kMagic, 4) != 0 || (kind != AgentFrame::Records && kind != AgentFrame::Log &&
                                           kind != AgentFrame::Exit && kind != AgentFrame::Node)) {
      m_error = "the host agent's stream is broken: no agent frame at byte " + std::to_string(at);
      break;
    }
    if (length > kMaxPayload) {
      m_error = "the host agent's stream is broken: a frame of " + std::to_string(length) + " bytes";
      break;
    }
    if (m_buffer.size() - at < kHeader + length) break;
    frame(AgentFrame{static_cast<AgentFrame::Kind>(kind), static_cast<int>(getU32(h + 5)),
                     m_buffer.substr(at + kHeader, length)});
    at += kHeader + length;
  }
  m_buffer.erase(0, at);
}

int runHostAgent(const std::vector<AgentRank>& ranks, int inFd, int outFd, bool text, const std::string& node) {
  Agent agent(inFd, outFd, text);
  if (text) agent.sayNode(node);
  for (const auto& r : ranks) agent.start(r);
  return agent.run();
}

namespace {
constexpr char kRequestLine[] = "ptw-agent-request ";
constexpr std::size_t kMaxRequest = 64u << 20;

// Reads exactly `n` bytes; false at an early end of file or an error.
bool readExactly(int fd, char* to, std::size_t n) {
  while (n > 0) {
    const ssize_t got = ::read(fd, to, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    to += got, n -= static_cast<std::size_t>(got);
  }
  return true;
}

std::string hostName() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// False when not all of `text` could be written.
bool writeAll(int fd, const std::string& text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<std::size_t>(w);
  }
  return true;
}

// Note [Agent profile]: the run's profile in memory, sealed, in a descriptor the ranks inherit.
int profileDescriptor(const std::string& profile) {
  const int fd = ::memfd_create("ptw-profile", MFD_ALLOW_SEALING);  // not MFD_CLOEXEC: each rank reads it
  PTW_CHECK(fd >= 0, "cannot keep the run's profile in memory (memfd_create): ", std::strerror(errno));
  if (!writeAll(fd, profile) ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    PTW_FAIL("cannot keep the run's profile in memory: ", std::strerror(err));
  }
  return fd;
}

// The tokens of the processes the host's `command` ranks start (Note [Script ranks] in
// common/command.h): each rank's parent is this agent, and the port is the rank's --port.
std::vector<std::string> runTokens(const std::vector<AgentRank>& ranks) {
  std::vector<std::string> tokens;
  for (const auto& rank : ranks) {
    const int port = WorkerInvocation::parse(rank.argv).port;
    const std::string token = "PTW_RUN_TOKEN=" + runToken(static_cast<long>(::getpid()), port);
    if (port > 0 && std::find(tokens.begin(), tokens.end(), token) == tokens.end()) tokens.push_back(token);
  }
  return tokens;
}
}  // namespace

std::string encodeAgentRequest(const AgentRequest& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rank : r.ranks) ranks.push_back({{"rank", rank.rank}, {"argv", rank.argv}, {"host", rank.host}});
  const std::string body =
      nlohmann::json{{"version", r.version}, {"profile", r.profile}, {"ranks", ranks}, {"all_nodes", r.allNodes}}
          .dump();
  return kRequestLine + std::to_string(body.size()) + "\n" + body;
}

AgentRequest readAgentRequest(int fd) {
  // Byte by byte up to the newline: what follows the request is the control lines'.
  std::string line;
  for (char c; line.size() < 64;) {
    PTW_CHECK(readExactly(fd, &c, 1), "no request from ptw on the agent's input (it ended after \"", line, "\")");
    if (c == '\n') break;
    line += c;
  }
  char* end = nullptr;
  const unsigned long long length =
      line.rfind(kRequestLine, 0) == 0 ? std::strtoull(line.c_str() + sizeof kRequestLine - 1, &end, 10) : 0;
  PTW_CHECK(end && *end == '\0' && length > 0 && length <= kMaxRequest, "expected \"", kRequestLine,
            "LENGTH\" on the agent's input, got \"", line.substr(0, 40), "\"");
  std::string body(length, '\0');
  PTW_CHECK(readExactly(fd, body.data(), body.size()), "the request on the agent's input ended before its ", length,
            " bytes");
  AgentRequest r;
  try {
    const auto j = nlohmann::json::parse(body);
    r.version = j.at("version").get<std::string>();
    r.profile = j.at("profile").get<std::string>();
    for (const auto& rank : j.at("ranks"))
      r.ranks.push_back(AgentRank{rank.at("rank").get<int>(), rank.at("argv").get<std::vector<std::string>>(),
                                  rank.value("host", std::string())});
    r.allNodes = j.value("all_nodes", false);
  } catch (const nlohmann::json::exception& e) {
    PTW_FAIL("the request on the agent's input is not what ptw sends: ", e.what());
  }
  return r;
}

std::string agentNodeName() {
  const char* node = std::getenv("SLURMD_NODENAME");
  return node && *node ? node : hostName();
}

int hostAgentMain(int inFd, int outFd, int errFd) {
  ::signal(SIGPIPE, SIG_IGN);  // a reader gone is a write error (runHostAgent)
  ::signal(SIGHUP, SIG_IGN);   // a session that ends is the end of the input, which ends the ranks
  const std::string who = "error: ptw-worker --agent on " + agentNodeName() + ": ";
  AgentRequest request;
  int profileFd = -1;
  try {
    request = readAgentRequest(inFd);
    PTW_CHECK(request.version == kVersion, "this host runs ptw-worker ", kVersion, ", and ptw ", request.version,
              " sent the run; every host needs the same ptw build");
    if (request.allNodes) {  // Note [One step for all nodes]: this node's ranks only
      const std::string node = agentNodeName();
      std::vector<AgentRank> mine;
      for (auto& r : request.ranks)
        if (r.host == node) mine.push_back(std::move(r));
      PTW_CHECK(!mine.empty(), "no rank of the run is on node ", node, " (SLURMD_NODENAME), which runs this agent");
      request.ranks = std::move(mine);
    }
    profileFd = profileDescriptor(request.profile);
    for (auto& rank : request.ranks) {  // the profile is read here, not where ptw keeps it
      WorkerInvocation w = WorkerInvocation::parse(rank.argv);
      w.profile = "/proc/self/fd/" + std::to_string(profileFd);
      rank.argv = w.toArgs();
    }
  } catch (const Error& e) {
    writeAll(errFd, who + e.what() + "\n");
    if (profileFd >= 0) ::close(profileFd);
    return exitCode(WorkerExit::BadInput);
  }
  int code = exitCode(WorkerExit::BadInput);
  try {
    code = runHostAgent(request.ranks, inFd, outFd, request.allNodes, agentNodeName());
  } catch (const Error& e) {
    writeAll(errFd, who + e.what() + "\n");
  }
  ::close(profileFd);
  // Note [Script ranks]: what the ranks' programs left outside the ranks' process groups.
  std::size_t killed = 0;
  for (const auto& token : runTokens(request.ranks)) killed += sweepProcessesWithVariable(token);
  if (killed > 0)
    writeAll(errFd, "ptw-worker --agent on " + agentNodeName() + ": killed " + std::to_string(killed) +
                        " process(es) the run's programs left behind outside their ranks' process groups\n");
  return code;
}

}  // namespace ptw::core
