// SPDX-License-Identifier: GPL-3.0-or-later
// SshStarter: starts each rank on its host through OpenSSH (profile section `hosts`,
// launcher "ssh"; docs/multihost.md).
//
// Note [Remote ranks]
// A rank on another host is `ssh -T -o BatchMode=yes ... -- HOST 'ptw-worker' ARGS...; exit $?`,
// a child of the launcher like a local rank, in the run's process group. Every argument of the
// remote command is single-quoted for the remote POSIX shell (quoteForShell), so no profile value
// is ever interpreted by it; the host itself is checked to be a plain host name or IPv4 address
// (plausibleHostName) and follows `--`, so ssh cannot take it for an option.
//
// - Records: there is no descriptor 3 across a connection. The worker is started with
//   `--remote`: it writes its binary record frames to its stdout, which becomes the ssh
//   process's stdout, the rank's record pipe here; anything else that would write to its stdout
//   (a library's print) goes to stderr, which carries the log lines, ssh's own included.
// - Steps: the ranks append their step blocks to the run's step file at the same path as here
//   (Note [Ranks write their steps]); the hosts need the run folder on a shared filesystem. A
//   rank that cannot see the run's profile says so, naming its host, and exits 2.
// - Stop: stdin is the control line. The launcher writes "stop\n" where a local rank gets SIGTERM
//   (the rank finishes its step with the others and checkpoints); SIGKILL ends the ssh process.
// - Lifetime: a remote worker exits at once when its stdin reaches end of file, that is when its
//   connection is gone: the launcher killed ssh, ptw died (ssh dies with it: Note [Worker
//   lifetime]), or the sshd on its host dropped the session (ClientAliveInterval on the hosts
//   bounds how long a silent connection lasts).
// - Exits: the remote shell waits for the worker (the `; exit $?`, so no exec), so a worker killed
//   by signal N comes back as status 128+N, and 255 is ssh's alone: the connection failed or was
//   lost (ServerAliveInterval × 3 without an answer). Each is named with the rank's host.
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
