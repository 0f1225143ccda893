// SPDX-License-Identifier: GPL-3.0-or-later
// RankStarter: how the launcher starts one rank's process. The launcher forks and execs the
// command it is given, reads what the process writes and supervises it; what the command is
// (the worker itself here, or ssh starting it on another host) is the starter's.
#pragma once

#include <signal.h>

#include <string>
#include <vector>

#include "common/worker_invocation.h"

namespace ptw::core {

/// The descriptor a local rank writes its records to: the launcher's record pipe.
inline constexpr int kRecordFd = 3;

/// The process that stands for one rank.
/// Example: RankCommand{WorkerInvocation("bin/ptw-worker").setProfile("p.json").setRecords(kRecordFd).toArgs()}
struct RankCommand {
  std::vector<std::string> argv;  ///< argv[0] is the program, run without a shell
  /// Note [Remote ranks] (ssh_starter.h): records come on the process's stdout (there is no
  /// descriptor 3 across a connection), its stdin is the rank's control line, and a stop is a
  /// line on it rather than a signal.
  bool remote = false;
  std::string host = "";  ///< where the rank runs, for messages; "" = this machine
  /// The exit code that is the connection's, not the rank's: the connection to the host failed
  /// or was lost (ssh's 255); 0: there is none.
  int connectionLostCode = 0;
  /// Started by the host agent of `host` (Note [Host agent] in host_agent.h): argv is the
  /// rank's worker command line there, run by the process RankStarter::agentCommand(host) gives.
  bool viaAgent = false;
  /// The signal that ends this process and what it stands for, sent before SIGKILL and when
  /// ptw dies: srun cancels its step on SIGTERM, where SIGKILL would leave the step's tasks
  /// running until the job ends.
  int endSignal = SIGKILL;
};

class RankStarter {
 public:
  virtual ~RankStarter() = default;
  /// The command that starts rank `rank`; `worker` is the worker's command line as the
  /// launcher makes it (its program this machine's ptw-worker, no record descriptor).
  virtual RankCommand command(int rank, const WorkerInvocation& worker) const = 0;
  /// The TCPStore port the ranks meet on, or 0 for the launcher's local rendezvous (Note
  /// [Local rendezvous] in launcher.cpp).
  virtual int rendezvousPort() const { return 0; }
  /// The process that stands for every rank command() starts viaAgent on `host`: the agent
  /// there, reached through this starter's connection (Note [Host agent]).
  virtual RankCommand agentCommand(const std::string& host) const;
  /// True where one process stands for the agents of every host: agentsCommand then starts
  /// them all, and agentCommand is not asked (Note [One step for all nodes] in agent_text_stream.h).
  virtual bool oneProcessForAllAgents() const { return false; }
  /// The process that starts the agents of all `hosts` at once.
  virtual RankCommand agentsCommand(const std::vector<std::string>& hosts) const;
};

/// The full path of `program` found on PATH, as a path the launcher can exec without a shell;
/// "" when there is none.
std::string findProgram(const std::string& program);

/// A remote rank's worker command line (Note [Remote ranks] in ssh_starter.h): `worker` with
/// `program` as its program, started on `host`, its TCPStore on `address`, its traffic on
/// `interface` ("": the system's choice).
std::vector<std::string> remoteWorkerArgs(WorkerInvocation worker, const std::string& program, const std::string& host,
                                          const std::string& address, const std::string& interface);

/// Starts each rank as a child process of this machine, its records on descriptor 3.
class LocalStarter final : public RankStarter {
 public:
  RankCommand command(int rank, const WorkerInvocation& worker) const override;
};

}  // namespace ptw::core
