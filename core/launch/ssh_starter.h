// SPDX-License-Identifier: GPL-3.0-or-later
// SshStarter: starts each rank on its host through OpenSSH (profile section `hosts`,
// launcher "ssh"; docs/multihost.md).
//
// Note [Remote ranks]
// The ranks on another host are started by that host's agent (Note [Host agent] in
// host_agent.h), one a host: `ssh -T -o BatchMode=yes ... -- HOST exec 'ptw-worker' --agent`, a
// child of the launcher like a local rank, in the run's process group. The agent's path is
// single-quoted for the remote POSIX shell (quoteForShell); the ranks' command lines travel in
// the agent's request, as data, so no profile value is ever interpreted by a shell. The host
// itself is checked to be a plain host name or IPv4 address (plausibleHostName) and follows
// `--`, so ssh cannot take it for an option.
//
// - Records: there is no descriptor 3 across a connection. Each worker is started with
//   `--remote`: it writes its binary record frames to its stdout, which the agent reads and
//   sends on tagged with the rank; anything else that would write to its stdout (a library's
//   print) goes to its stderr, the rank's log, which the agent sends on line by line.
// - Files: the profile travels in the agent's request and the records, steps included, come
//   back over the connection; the hosts share only what the ranks read and write themselves
//   (data, model files, checkpoints, stacks answers: docs/multihost.md).
// - Stop: the agent is told the signal a local rank would get ("signal N"), and sends it to
//   each rank's process group; SIGKILL is told too, and ssh itself is killed if the agent has
//   not ended 3 s later.
// - Lifetime: the agent kills its ranks when its stdin reaches end of file, that is when its
//   connection is gone: the launcher killed ssh, ptw died (ssh dies with it: Note [Worker
//   lifetime]), or the sshd on its host dropped the session (ClientAliveInterval on the hosts
//   bounds how long a silent connection lasts). A worker also exits when its own control line,
//   a pipe from the agent, ends.
// - Exits: each rank's exit code or signal comes in the agent's Exit frame. A rank the agent did
//   not report (the agent or its connection gone) ends as ssh did: 255 is ssh's alone, the
//   connection failed or was lost (ServerAliveInterval × 3 without an answer). Each is named with
//   the rank's host.
//
// Note [Rendezvous port]
// Rank 0's TCPStore listens on the rendezvous port on every interface of rank 0's host. Before
// a run, the hosts check has that host open the port as the store will (`ptw-worker
// --check-port`, hostsProblem in preflight.h): a port in use there stops the run, named. With
// hosts.port 0 that host picks a port it has free and the run uses it; each restart asks
// again, so that an attempt never waits for a port its predecessor's rank 0 may still hold.
// The port is closed again between the check and rank 0's start; a program that takes it
// meanwhile makes rank 0 fail, named as any rank's failure. Where nothing was checked (a
// Supervisor given no port), port 0 is a port free on this machine.
#pragma once

#include <string>
#include <vector>

#include "common/profile.h"
#include "launch/rank_starter.h"

namespace ptw::core {

/// `s` single-quoted for a POSIX shell, every byte literal: `it's` -> `'it'\''s'`.
std::string quoteForShell(const std::string& s);

/// Example: SshStarter(profile.hosts, rankHosts(profile), "/usr/lib/ptw/ptw-worker")
class SshStarter final : public RankStarter {
 public:
  /// `rankHosts`: the host of each rank; `localWorker`: this machine's ptw-worker, the hosts'
  /// too unless hosts.worker names another. hosts.port 0: a port free on this machine (Note
  /// [Rendezvous port]).
  SshStarter(HostsSpec hosts, std::vector<std::string> rankHosts, std::string localWorker);

  RankCommand command(int rank, const WorkerInvocation& worker) const override;
  RankCommand agentCommand(const std::string& host) const override;
  int rendezvousPort() const override { return m_port; }
  /// The host of rank (or slot) `rank`.
  const std::string& hostOf(int rank) const;
  /// The ssh command line that runs `remoteLine` (for the remote shell) on `host`.
  std::vector<std::string> sshArgv(const std::string& host, const std::string& remoteLine) const;
  /// Where the ranks meet: hosts.address, else the first host.
  const std::string& address() const { return m_address; }

 private:
  HostsSpec m_hosts;
  std::vector<std::string> m_rankHosts;
  std::string m_worker;
  std::string m_ssh;
  std::string m_address;
  int m_port = 0;
};

}  // namespace ptw::core
