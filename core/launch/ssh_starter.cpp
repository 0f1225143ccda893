// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/ssh_starter.h"

#include <algorithm>

#include "common/error.h"
#include "launch/launcher.h"

namespace ptw::core {

std::string quoteForShell(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";  // close the quote, an escaped quote, open again
    else
      out += c;
  }
  return out + "'";
}

SshStarter::SshStarter(HostsSpec hosts, std::vector<std::string> rankHosts, std::string localWorker)
    : m_hosts(std::move(hosts)), m_rankHosts(std::move(rankHosts)), m_worker(std::move(localWorker)) {
  PTW_CHECK(!m_rankHosts.empty(), "hosts.hosts: the ssh launcher needs at least one host");
  for (const auto& h : m_rankHosts) PTW_CHECK(plausibleHostName(h), "hosts.hosts: not a host name: \"", h, "\"");
  m_ssh = findProgram("ssh");
  PTW_CHECK(!m_ssh.empty(),
            "hosts.launcher \"ssh\" needs OpenSSH's ssh on PATH, and there is none; install openssh-client");
  if (!m_hosts.worker.empty()) m_worker = m_hosts.worker;
  m_address = m_hosts.address.empty() ? m_rankHosts.front() : m_hosts.address;
  // Only where no check asked rank 0's host for one (Note [Rendezvous port]).
  m_port = m_hosts.port != 0 ? m_hosts.port : Launcher::pickFreePort();
}

const std::string& SshStarter::hostOf(int rank) const {
  PTW_CHECK(rank >= 0 && static_cast<std::size_t>(rank) < m_rankHosts.size(), "rank ", rank, " has no host (",
            m_rankHosts.size(), " slots in hosts.hosts)");
  return m_rankHosts[static_cast<std::size_t>(rank)];
}

// Note [Remote ranks]: the rank's worker command line, which the agent of its host runs.
RankCommand SshStarter::command(int rank, const WorkerInvocation& worker) const {
  RankCommand c;
  c.host = hostOf(rank);
  c.remote = true;
  c.viaAgent = true;
  c.connectionLostCode = 255;  // ssh's own (Note [Remote ranks])
  WorkerInvocation w(worker);
  w.steps.clear();  // its records come back over the connection, steps included
  w.stepsLimit = 0;
  c.argv = remoteWorkerArgs(w, m_worker, c.host, m_address, m_hosts.interface);
  return c;
}

RankCommand SshStarter::agentCommand(const std::string& host) const {
  RankCommand c;
  c.host = host;
  c.remote = true;
  c.connectionLostCode = 255;
  // exec: the agent reports each rank's end itself; its own is the session's.
  c.argv = sshArgv(host, "exec " + quoteForShell(m_worker) + " --agent");
  return c;
}

std::vector<std::string> SshStarter::sshArgv(const std::string& host, const std::string& remoteLine) const {
  const int alive = m_hosts.aliveIntervalS;
  std::vector<std::string> argv = {m_ssh, "-T",
                                   "-o",  "BatchMode=yes",
                                   "-o",  "ServerAliveInterval=" + std::to_string(alive),
                                   "-o",  "ServerAliveCountMax=3",
                                   "-o",  "ConnectTimeout=" + std::to_string(std::max(5, 3 * alive)),
                                   "-o",  "LogLevel=ERROR"};
  if (!m_hosts.sshConfig.empty()) argv.insert(argv.end(), {"-F", m_hosts.sshConfig});
  if (!m_hosts.sshIdentity.empty()) argv.insert(argv.end(), {"-i", m_hosts.sshIdentity});
  if (m_hosts.sshPort != 0) argv.insert(argv.end(), {"-p", std::to_string(m_hosts.sshPort)});
  if (!m_hosts.sshUser.empty()) argv.insert(argv.end(), {"-l", m_hosts.sshUser});
  argv.insert(argv.end(), {"--", host, remoteLine});
  return argv;
}

}  // namespace ptw::core
