// SPDX-License-Identifier: GPL-3.0-or-later
// Where a rank stands in a run that a standard launcher started (torchrun, SLURM's srun,
// Open MPI's mpirun): read from the environment each of them sets, so that ptw-worker can
// be started by any of them (docs/multihost.md). Plain C++: no LibTorch, no Qt.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ptw::core {

/// The port rank 0's TCPStore listens on when the launcher names none (SLURM, Open MPI
/// without MASTER_PORT): torchrun's and torch.distributed's usual default.
constexpr int kDefaultMasterPort = 29500;

/// The launcher whose variables placed the rank.
enum class LaunchedBy { Torchrun, Slurm, OpenMpi };

/// "torchrun", "SLURM" or "Open MPI".
const char* launcherName(LaunchedBy by);

/// A rank's place in a run started by a standard launcher.
/// Example: RankPlace{}.rank = 1;
struct RankPlace {
  int rank = 0;                          ///< RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK
  int world = 1;                         ///< WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE
  int localRank = 0;                     ///< among the ranks of this host; selects cuda:localRank
  int localWorld = 0;                    ///< ranks on this host; 0 where the launcher does not say
  std::string masterAddr = "127.0.0.1";  ///< the host of rank 0, whose TCPStore the others join
  int masterPort = kDefaultMasterPort;   ///< that store's port
  LaunchedBy launcher = LaunchedBy::Torchrun;
};

/// The rank's place from `env` (the process's environment as name -> value), or nullopt when
/// no launcher's rank variable is there (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK). Throws
/// ptw::Error naming the variable when a value is malformed, missing or inconsistent.
/// Note [Launcher precedence] in launcher_env.cpp says which launcher wins when several
/// left their variables.
std::optional<RankPlace> rankFromEnvironment(const std::map<std::string, std::string>& env);

/// Every host of a SLURM hostlist ("node[01-03,07],gpu3" -> node01 node02 node03 node07
/// gpu3), zero padding kept; several bracket groups in one name give their product
/// ("r[1-2]-n[3-4]" -> r1-n3 r1-n4 r2-n3 r2-n4), as `scontrol show hostnames` does. Throws
/// ptw::Error, naming `what`, on a malformed list or one of more than 65536 hosts.
std::vector<std::string> expandHostlist(const std::string& list, const char* what = "SLURM_JOB_NODELIST");

/// One task count per node from SLURM's compressed form, as in SLURM_TASKS_PER_NODE: "2(x3),1"
/// -> 2 2 2 1. Throws ptw::Error, naming `what`, on a malformed value.
std::vector<int> expandTasksPerNode(const std::string& value, const char* what = "SLURM_TASKS_PER_NODE");

/// The first host of a SLURM hostlist, the usual master of a SLURM job.
std::string firstHost(const std::string& list, const char* what = "SLURM_JOB_NODELIST");

/// This process's environment, for rankFromEnvironment.
std::map<std::string, std::string> processEnvironment();

}  // namespace ptw::core
