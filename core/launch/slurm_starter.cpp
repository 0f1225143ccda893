// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/slurm_starter.h"

#include "common/error.h"

namespace ptw::core {

std::string slurmProgram(const char* name) {
  std::string path = findProgram(name);
  PTW_CHECK(!path.empty(), "hosts.launcher: \"slurm\" needs SLURM's ", name,
            " on PATH, and there is none; install slurm-client, or run ptw where SLURM's commands are");
  return path;
}

// Note [SLURM node check].
std::vector<std::string> slurmCheckCommand(const std::string& jobId, const std::vector<std::string>& nodes,
                                           const std::string& script) {
  PTW_CHECK(!jobId.empty() && jobId.size() <= 12 && jobId.find_first_not_of("0123456789") == std::string::npos,
            "SLURM job id: expected a number, got \"", jobId, "\"");
  PTW_CHECK(!nodes.empty(), "hosts.hosts: the slurm launcher has no node for the ranks");
  std::string list;
  for (const auto& n : nodes) {
    PTW_CHECK(plausibleHostName(n), "hosts.hosts: not a host name: \"", n, "\"");
    list += (list.empty() ? "" : ",") + n;
  }
  const std::string count = std::to_string(nodes.size());
  return {slurmProgram("srun"),
          "--jobid=" + jobId,
          "--job-name=ptw-check",
          "--nodes=" + count,
          "--ntasks=" + count,
          "--ntasks-per-node=1",
          "--nodelist=" + list,
          "--overlap",
          "--label",
          "--mpi=none",
          "--quiet",
          "--",
          "/bin/sh",
          "-c",
          script};
}

SlurmStarter::SlurmStarter(HostsSpec hosts, std::string jobId, std::vector<std::string> rankHosts,
                           std::string localWorker)
    : m_hosts(std::move(hosts)),
      m_jobId(std::move(jobId)),
      m_rankHosts(std::move(rankHosts)),
      m_worker(std::move(localWorker)) {
  PTW_CHECK(!m_jobId.empty() && m_jobId.size() <= 12 && m_jobId.find_first_not_of("0123456789") == std::string::npos,
            "SLURM job id: expected a number, got \"", m_jobId, "\"");
  PTW_CHECK(!m_rankHosts.empty(), "hosts.hosts: the slurm launcher has no node for the ranks");
  for (const auto& h : m_rankHosts) PTW_CHECK(plausibleHostName(h), "hosts.hosts: not a host name: \"", h, "\"");
  m_srun = slurmProgram("srun");
  if (!m_hosts.worker.empty()) m_worker = m_hosts.worker;
  m_address = m_hosts.address.empty() ? m_rankHosts.front() : m_hosts.address;
  m_port = m_hosts.port != 0 ? m_hosts.port : 20000 + static_cast<int>(std::stoll(m_jobId) % 20000);
}

// Note [SLURM ranks]: the rank's worker command line, which the agent of its node runs.
RankCommand SlurmStarter::command(int rank, const WorkerInvocation& worker) const {
  PTW_CHECK(rank >= 0 && static_cast<std::size_t>(rank) < m_rankHosts.size(), "rank ", rank, " has no node (",
            m_rankHosts.size(), " in the SLURM job)");
  RankCommand c;
  c.remote = true;
  c.viaAgent = true;
  c.host = m_rankHosts[static_cast<std::size_t>(rank)];
  WorkerInvocation w(worker);
  w.steps.clear();  // its records come back through srun, steps included
  w.stepsLimit = 0;
  c.argv = remoteWorkerArgs(w, m_worker, c.host, m_address, m_hosts.interface);
  return c;
}

RankCommand SlurmStarter::agentsCommand(const std::vector<std::string>& hosts) const {
  PTW_CHECK(!hosts.empty(), "hosts.hosts: the slurm launcher has no node for the ranks");
  std::string nodes;
  for (const auto& h : hosts) nodes += (nodes.empty() ? "" : ",") + h;
  const std::string n = std::to_string(hosts.size());
  RankCommand c;
  c.remote = true;
  c.host = nodes;
  c.endSignal = SIGTERM;  // srun cancels the step; killed, it would leave the agents running
  c.argv = {m_srun,
            "--jobid=" + m_jobId,
            "--job-name=ptw-agent",
            "--nodes=" + n,
            "--ntasks=" + n,
            "--ntasks-per-node=1",
            "--nodelist=" + nodes,
            "--overlap",
            "--label",
            "--input=all",
            "--kill-on-bad-exit=0",
            "--mpi=none",
            "--quiet",
            "--",
            m_worker,
            "--agent"};
  return c;
}

}  // namespace ptw::core
