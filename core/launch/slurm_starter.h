// SPDX-License-Identifier: GPL-3.0-or-later
// SlurmStarter: starts the ranks of each node of a SLURM job through that node's host agent,
// the agents of all nodes as one job step started with srun (profile section `hosts`, launcher
// "slurm"; docs/multihost.md). SlurmJob (slurm_job.h) finds the job.
//
// Note [SLURM ranks]
// The ranks of a node are started by its agent (Note [Host agent] in host_agent.h); the agents
// of all the nodes are the tasks of one step, one task a node:
//   srun --jobid=JOB --job-name=ptw-agent --nodes=N --ntasks=N --ntasks-per-node=1
//        --nodelist=NODE1,NODE2 --overlap --label --input=all --kill-on-bad-exit=0
//        --mpi=none --quiet -- ptw-worker --agent
// a child of the launcher like ssh for the ssh launcher, without a shell; the ranks' worker
// command lines travel in the agents' request, as remote ranks (Note [Remote ranks] in
// ssh_starter.h), and the agents' frames come back as text (Note [One step for all nodes] in
// agent_text_stream.h). What srun adds:
// - --label: each piece of a task's output comes on a line that names its task.
// - --input=all: srun gives its stdin, the request and the control lines, to every task; its
//   end of file reaches every agent, which then kills its ranks.
// - --overlap: the step shares the job's resources, as ranks on one machine share them.
// - --kill-on-bad-exit=0: an agent that ends with a failed rank does not take the other nodes'
//   ranks down with it; ptw stops them in its own order (SIGINT, SIGTERM, SIGKILL), as it
//   would any run, whatever the cluster's KillOnBadExit says.
// - Exits: each rank's comes in its agent's Exit frame. An agent that died first is known by
//   srun's "srun: error: NODE: task N: Killed" line, and its ranks end so. srun that could not
//   make the step (a node not in the job, the job gone) exits 1 with an "srun: error:" line,
//   which names the failure for every rank.
// - Its end: srun told SIGTERM cancels the step, and the agents' ranks die with them; srun
//   killed by SIGKILL would leave the step's tasks running until the job ends. So SIGTERM is
//   what ptw sends it once the agents have not ended their ranks, and what it gets when ptw
//   dies (RankCommand::endSignal), SIGKILL only 3 s later: a rank outlives neither its srun
//   nor ptw (Note [Worker lifetime]).
//
// Note [SLURM node check]
// Before a rank starts, every node of the run is asked what the ssh launcher asks each host
// (hostsProblem in preflight.h): whether it runs this build's agent and sees the paths the
// ranks need. One step does it for all the nodes, one task on each:
//   srun --jobid=JOB --job-name=ptw-check --nodes=N --ntasks=N --ntasks-per-node=1
//        --nodelist=NODE1,NODE2 --overlap --label --mpi=none --quiet -- /bin/sh -c SCRIPT
// The check's output is a few lines of text, which --label tells apart by prefixing each with
// its task's id ("0: ").
// Task ids follow SLURM's order of the nodes, not the --nodelist's, so each node says its own
// name ($SLURMD_NODENAME) first, and its answer is found by that. --overlap as for the agents:
// the step must not wait for CPUs the job's batch step holds.
#pragma once

#include <string>
#include <vector>

#include "common/profile.h"
#include "launch/rank_starter.h"

namespace ptw::core {

/// SLURM's program `name` (srun, squeue, scancel) on PATH; throws a message that names it
/// when it is not there.
std::string slurmProgram(const char* name);

/// srun's command line that runs `script` with /bin/sh once on each of `nodes` (distinct) in the
/// job `jobId`, its output labelled by task (Note [SLURM node check]). Throws ptw::Error when
/// srun is not on PATH or a value cannot be one (a job id that is no number, a node name that
/// is no host name).
std::vector<std::string> slurmCheckCommand(const std::string& jobId, const std::vector<std::string>& nodes,
                                           const std::string& script);

/// Example: SlurmStarter(profile.hosts, "4242", {"node1", "node1", "node2"}, "/usr/lib/ptw/ptw-worker")
class SlurmStarter final : public RankStarter {
 public:
  /// `jobId`: the job the ranks run in; `rankHosts`: the node of each rank; `localWorker`: this
  /// machine's ptw-worker, the nodes' too unless hosts.worker names another. The rendezvous
  /// port is hosts.port, else 20000 + the job's id modulo 20000 (two jobs on a node differ).
  SlurmStarter(HostsSpec hosts, std::string jobId, std::vector<std::string> rankHosts, std::string localWorker);

  RankCommand command(int rank, const WorkerInvocation& worker) const override;
  bool oneProcessForAllAgents() const override { return true; }
  RankCommand agentsCommand(const std::vector<std::string>& hosts) const override;
  int rendezvousPort() const override { return m_port; }
  /// Where the ranks meet: hosts.address, else the first rank's node.
  const std::string& address() const { return m_address; }

 private:
  HostsSpec m_hosts;
  std::string m_jobId;
  std::vector<std::string> m_rankHosts;
  std::string m_worker;
  std::string m_srun;
  std::string m_address;
  int m_port = 0;
};

}  // namespace ptw::core
