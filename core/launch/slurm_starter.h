// SPDX-License-Identifier: GPL-3.0-or-later
// SlurmStarter: starts each rank as a job step of a SLURM job through srun (profile section
// `hosts`, launcher "slurm"; docs/multihost.md). SlurmJob (slurm_job.h) finds the job.
//
// Note [SLURM ranks]
// Each rank is one step of its own, one task on its node:
//   srun --jobid=JOB --job-name=ptw-rankN --nodes=1 --ntasks=1 --ntasks-per-node=1
//        --nodelist=HOST --overlap --unbuffered --input=all --mpi=none --quiet
//        -- ptw-worker ARGS... --remote HOST --master ADDR [--interface IF]
// a child of the launcher like a local rank, without a shell. The worker is a remote rank as
// over ssh (Note [Remote ranks] in ssh_starter.h): records on its stdout, log on stderr, "stop"
// on stdin, its end of file ends it. What srun adds:
// - --unbuffered: without it slurmstepd passes a task's output on in whole lines, and binary
//   record frames would wait for a newline byte to come by. With it the task's stdout is a
//   pseudo-terminal with output processing off (-opost), which passes every byte as written.
// - --input=all: srun forwards its stdin, the rank's control line, to the task.
// - --overlap: the steps share the job's resources, as ranks on one machine share it; without
//   it a step takes every CPU of its node and the next rank's step would wait for it.
// - Exits: srun gives a task's exit code, or 128+N for a task killed by signal N, as the ssh
//   launcher's remote shell does. srun that could not make the step (a node not in the job,
//   the job gone) exits 1 with an "srun: error:" line, which names the failure. srun killed
//   here ends its step: slurmstepd kills the task when srun's connection goes, so a rank
//   outlives neither its srun nor ptw (Note [Worker lifetime]).
#pragma once

#include <string>
#include <vector>

#include "common/profile.h"
#include "launch/rank_starter.h"

namespace ptw::core {

/// SLURM's program `name` (srun, squeue, scancel) on PATH; throws a message that names it
/// when it is not there.
std::string slurmProgram(const char* name);

/// Example: SlurmStarter(profile.hosts, "4242", {"node1", "node1", "node2"}, "/usr/lib/ptw/ptw-worker")
class SlurmStarter final : public RankStarter {
 public:
  /// `jobId`: the job the ranks run in; `rankHosts`: the node of each rank; `localWorker`: this
  /// machine's ptw-worker, the nodes' too unless hosts.worker names another. The rendezvous
  /// port is hosts.port, else 20000 + the job's id modulo 20000 (two jobs on a node differ).
  SlurmStarter(HostsSpec hosts, std::string jobId, std::vector<std::string> rankHosts, std::string localWorker);

  RankCommand command(int rank, const WorkerInvocation& worker) const override;
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
