#include "launch/ssh_starter.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

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

namespace {

// The ssh program on PATH, as a path the launcher can exec without a shell.
std::string findSsh() {
  const char* path = std::getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const auto colon = dirs.find(':', start);
    const std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/ssh";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  PTW_FAIL("hosts.launcher \"ssh\" needs OpenSSH's ssh on PATH, and there is none; install openssh-client");
}

}  // namespace

SshStarter::SshStarter(HostsSpec hosts, std::vector<std::string> rankHosts, std::string localWorker)
    : m_hosts(std::move(hosts)), m_rankHosts(std::move(rankHosts)), m_worker(std::move(localWorker)) {
  PTW_CHECK(!m_rankHosts.empty(), "hosts.hosts: the ssh launcher needs at least one host");
  for (const auto& h : m_rankHosts) PTW_CHECK(plausibleHostName(h), "hosts.hosts: not a host name: \"", h, "\"");
  m_ssh = findSsh();
  if (!m_hosts.worker.empty()) m_worker = m_hosts.worker;
  m_address = m_hosts.address.empty() ? m_rankHosts.front() : m_hosts.address;
  // Only where no check asked rank 0's host for one (Note [Rendezvous port]).
  m_port = m_hosts.port != 0 ? m_hosts.port : Launcher::pickFreePort();
}

RankCommand SshStarter::command(int rank, const std::vector<std::string>& workerArgs) const {
  PTW_CHECK(rank >= 0 && static_cast<std::size_t>(rank) < m_rankHosts.size(), "rank ", rank, " has no host (",
            m_rankHosts.size(), " slots in hosts.hosts)");
  const std::string& host = m_rankHosts[static_cast<std::size_t>(rank)];
  std::vector<std::string> remote = workerArgs;
  remote.front() = m_worker;
  remote.insert(remote.end(), {"--remote", host, "--master", m_address});
  if (!m_hosts.interface.empty()) remote.insert(remote.end(), {"--interface", m_hosts.interface});
  std::string line;
  for (const auto& a : remote) line += (line.empty() ? "" : " ") + quoteForShell(a);
  line += "; exit $?";  // the shell waits: a signal comes back as 128+N (Note [Remote ranks])

  RankCommand c;
  c.remote = true;
  c.host = host;
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
