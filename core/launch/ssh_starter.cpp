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

RankCommand SshStarter::command(int rank, const WorkerInvocation& worker) const {
  PTW_CHECK(rank >= 0 && static_cast<std::size_t>(rank) < m_rankHosts.size(), "rank ", rank, " has no host (",
            m_rankHosts.size(), " slots in hosts.hosts)");
  const std::string& host = m_rankHosts[static_cast<std::size_t>(rank)];
  std::string line;
  for (const auto& a : remoteWorkerArgs(worker, m_worker, host, m_address, m_hosts.interface))
    line += (line.empty() ? "" : " ") + quoteForShell(a);
  line += "; exit $?";  // the shell waits: a signal comes back as 128+N (Note [Remote ranks])

  RankCommand c;
  c.remote = true;
  c.host = host;
  c.connectionLostCode = 255;  // ssh's own (Note [Remote ranks])
  const int alive = m_hosts.aliveIntervalS;
  c.argv = {m_ssh, "-T",
            "-o",  "BatchMode=yes",
            "-o",  "ServerAliveInterval=" + std::to_string(alive),
            "-o",  "ServerAliveCountMax=3",
            "-o",  "ConnectTimeout=" + std::to_string(std::max(5, 3 * alive)),
            "-o",  "LogLevel=ERROR"};
  if (!m_hosts.sshConfig.empty()) c.argv.insert(c.argv.end(), {"-F", m_hosts.sshConfig});
  if (!m_hosts.sshIdentity.empty()) c.argv.insert(c.argv.end(), {"-i", m_hosts.sshIdentity});
  if (m_hosts.sshPort != 0) c.argv.insert(c.argv.end(), {"-p", std::to_string(m_hosts.sshPort)});
  if (!m_hosts.sshUser.empty()) c.argv.insert(c.argv.end(), {"-l", m_hosts.sshUser});
  c.argv.insert(c.argv.end(), {"--", host, line});
  return c;
}

}  // namespace ptw::core
