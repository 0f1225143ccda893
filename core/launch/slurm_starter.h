// SPDX-License-Identifier: GPL-3.0-or-later
// SlurmStarter: starts the ranks of each node of a SLURM job through that node's host agent,
// one job step a node started with srun (profile section `hosts`, launcher "slurm";
// docs/multihost.md). SlurmJob (slurm_job.h) finds the job.
//
// Note [SLURM ranks]
// The ranks of a node are started by its agent (Note [Host agent] in host_agent.h), one step
// a node, one task on it:
//   srun --jobid=JOB --job-name=ptw-agent --nodes=1 --ntasks=1 --ntasks-per-node=1
//        --nodelist=NODE --overlap --unbuffered --input=all --mpi=none --quiet
//        -- ptw-worker --agent
// a child of the launcher like ssh for the ssh launcher, without a shell; the ranks' worker
// command lines travel in the agent's request, as remote ranks (Note [Remote ranks] in
// ssh_starter.h). One step for every node would be one srun in all, but srun passes several
// tasks' output on in pieces of its own size, mixed, where a node's agent frames must come
// whole and in order; and its input goes to one task unless broadcast. A step a node keeps
// each node's stream its own, and is still one connection a node. What srun adds:
// - --unbuffered: without it slurmstepd passes a task's output on in whole lines, and binary
//   agent frames would wait for a newline byte to come by. With it every byte goes on as written.
// - --input=all: srun forwards its stdin, the agent's request and control lines, to the task;
//   its end of file reaches the agent, which then kills its ranks.
// - --overlap: the steps share the job's resources, as ranks on one machine share it; without
//   it a step takes every CPU of its node and a later step would wait for it.
// - Exits: each rank's comes in the agent's Exit frame. srun that could not make the step (a
//   node not in the job, the job gone) exits 1 with an "srun: error:" line, which names the
//   failure for the node's ranks. srun killed here ends its step: slurmstepd kills the agent
//   when srun's connection goes, and the agent its ranks, so a rank outlives neither its srun
//   nor ptw (Note [Worker lifetime]).
//
// Note [SLURM node check]
// Before a rank starts, every node of the run is asked what the ssh launcher asks each host
// (hostsProblem in preflight.h): whether it runs this build's agent and sees the paths the
// ranks need. One step does it for all the nodes, one task on each:
//   srun --jobid=JOB --job-name=ptw-check --nodes=N --ntasks=N --ntasks-per-node=1
//        --nodelist=NODE1,NODE2 --overlap --label --mpi=none --quiet -- /bin/sh -c SCRIPT
// The frames that keep the agents to a step each are not there: the check's output is a few
// lines of text, which --label tells apart by prefixing each with its task's id ("0: ").
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
  RankCommand agentCommand(const std::string& host) const override;
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
