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
  /// too unless hosts.worker names another. Picks the rendezvous port when hosts.port is 0.
  SshStarter(HostsSpec hosts, std::vector<std::string> rankHosts, std::string localWorker);

  RankCommand command(int rank, const std::vector<std::string>& workerArgs) const override;
  int rendezvousPort() const override { return m_port; }
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
