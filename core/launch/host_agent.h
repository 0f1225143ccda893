// SPDX-License-Identifier: GPL-3.0-or-later
// The host agent: one process on a host that starts that host's ranks and speaks for all of
// them over one stream, so that a run across hosts needs one connection per host.
//
// Note [Host agent]
// The agent starts each rank as a child in a process group of its own, which dies with the
// agent (PR_SET_PDEATHSIG, setUpChild). A rank writes its record frames to its stdout and its
// log to its stderr, as a remote rank does (Note [Remote ranks] in ssh_starter.h). The agent
// writes to its one output, in agent frames tagged by rank: the rank's record bytes as they
// came (the record frame format is the reader's to parse, per rank), each log line, and at
// the end the rank's exit code or signal. Its input is the control line: "signal N" sends
// signal N to every rank still running (the launcher decides the order: SIGINT, SIGTERM,
// SIGKILL), and "stacks R" passes "stacks" on to rank R's own control line (its stdin, a pipe
// the agent holds: Note [Native stacks]); its end of file, the connection or ptw gone, kills
// every rank, which are then reported as any exit. The agent returns once every rank is
// reported, so nothing it started is left behind.
//
// Started by ptw (`ptw-worker --agent`, hostAgentMain), the agent first reads one request on
// its input: the build of the ptw that sent it, the run's profile and the host's ranks. A
// request from another build is refused, named, with exit code 2, before any rank starts.
// Each rank reads the profile from the agent (Note [Agent profile]): the hosts need not share
// the run's profile, nor its step file (the records come back over the connection). Once
// every rank is reported, the agent kills what the ranks' programs left outside their
// process groups on its host, by the run's token, as the launcher does on its own (Note
// [Script ranks] in common/command.h): each rank's token names this agent as its parent.
//
// Note [Agent profile]
// The profile lives in a sealed memfd that the agent creates without close-on-exec, so each
// rank inherits it and reads it as /proc/self/fd/N (the BLAS re-exec keeps it; the rank
// then marks it close-on-exec, so its program does not inherit it). Nothing is written to
// the host's disk: an agent killed by SIGKILL, or a host that loses power, leaves no file,
// and no later agent has to find and remove one, which a folder guarded by a lock would
// need (and would leave behind on a host no agent visits again). The kernel frees the
// memory when the last descriptor closes, the agent's and its ranks'. A rank on another
// host cannot resolve a relative path against where it reads the profile from, so the paths
// in it are the absolute ones ptw's own loadProfile made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ptw::core {

/// One rank the agent starts. Example: AgentRank{2, {"/usr/lib/ptw/ptw-worker", "--rank", "2"}}
struct AgentRank {
  int rank = 0;
  std::vector<std::string> argv = {};  ///< argv[0] is the program, run without a shell
  std::string host = "";               ///< its node, where one request serves every node's agent
};

/// One agent frame: "PTWA", its kind, the rank (uint32, little-endian), the payload's length
/// (uint32, little-endian), the payload.
/// Example: AgentFrame{AgentFrame::Log, 3, "[rank 3] step 10"}
struct AgentFrame {
  enum Kind : char {
    Records = 'R',  ///< bytes of the rank's record stream, in order
    Log = 'L',      ///< one line of the rank's stderr, without its newline
    Exit = 'X',     ///< how the rank ended: "code N" or "signal N"; its last frame
    Node = 'N',     ///< the agent's node, its first frame where it serves every node (rank 0)
  };
  Kind kind = Log;
  int rank = 0;
  std::string payload = "";
  bool operator==(const AgentFrame& o) const { return kind == o.kind && rank == o.rank && payload == o.payload; }
};

/// The bytes of `f` on the agent's stream.
std::string encodeAgentFrame(const AgentFrame& f);

/// Reads agent frames from a stream given in pieces of any size.
class AgentStreamDecoder {
 public:
  /// Calls `frame` for each whole frame in what has come so far. Once the stream is found
  /// broken (no "PTWA", an unknown kind, a payload over kMaxPayload) it reads no more.
  void feed(const char* data, std::size_t n, const std::function<void(const AgentFrame&)>& frame);
  /// "" while the stream is sound, else what is wrong with it.
  const std::string& error() const { return m_error; }

  static constexpr std::uint32_t kMaxPayload = 16u << 20;

 private:
  std::string m_buffer;
  std::string m_error;
};

/// Runs `ranks` on this host until every one has ended and been reported (Note [Host
/// agent]), reading control lines from `inFd` and writing agent frames to `outFd`. Returns
/// 0 when every rank exited 0, 1 otherwise. Throws ptw::Error when a rank cannot be started
/// (no pipe or fork); what was started is killed and reaped first. The caller ignores
/// SIGPIPE, so that a reader gone is a write error, which kills the ranks.
/// With `text`, the frames go out as text units (Note [One step for all nodes] in
/// agent_text_stream.h), the first of them a Node frame naming `node`.
int runHostAgent(const std::vector<AgentRank>& ranks, int inFd, int outFd, bool text = false,
                 const std::string& node = "");

/// What ptw sends an agent before its control lines (Note [Host agent]).
/// Example: AgentRequest{"1.4.0", profileJson, {AgentRank{2, workerArgv}}}
struct AgentRequest {
  std::string version = "";           ///< the build of the ptw that sent it (kVersion)
  std::string profile = "";           ///< the run's resolved profile, as JSON text
  std::vector<AgentRank> ranks = {};  ///< each a ptw-worker command line; its --profile is replaced
  /// One request for the agents of every node, each of which runs the ranks whose host is its
  /// node and writes text (Note [One step for all nodes] in agent_text_stream.h).
  bool allNodes = false;
};

/// The bytes of `r` on the agent's input: a line "ptw-agent-request LENGTH", then LENGTH bytes of JSON.
std::string encodeAgentRequest(const AgentRequest& r);

/// Reads one request from `fd`, not a byte past it. Throws ptw::Error saying what was wrong.
AgentRequest readAgentRequest(int fd);

/// The node an agent serving every node runs on: SLURMD_NODENAME, else the host's name.
std::string agentNodeName();

/// `ptw-worker --agent`: reads the request from `inFd`, refuses one of another build, hands
/// the profile to the ranks (Note [Agent profile]), runs them (runHostAgent) and kills what
/// their programs left behind. Returns runHostAgent's code, or 2 (said on `errFd`) for a
/// request it cannot serve.
int hostAgentMain(int inFd, int outFd, int errFd);

}  // namespace ptw::core
