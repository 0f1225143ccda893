// SPDX-License-Identifier: GPL-3.0-or-later
// What is checked before a run starts, and said the same way by the window and headless:
// each function returns one line that says what to do, or "" when there is nothing to say.
#pragma once

#include <string>
#include <vector>

namespace ptw::core {

struct Profile;

/// The warning, one line, for CPU ranks that outnumber `cores` (-1: the cores this process may
/// run on); "" when they fit. The run goes on: shared cores only slow each step.
std::string coresWarning(const Profile& profile, int cores = -1);

/// For `strategy.device: cuda`, asks `workerPath --devices` (a second or two: it loads
/// LibTorch) whether a CUDA device is there: kNoCudaDeviceMessage when none is listed. ""
/// for cpu, and when the worker cannot answer (its ranks then say what is wrong).
std::string deviceProblem(const Profile& profile, const std::string& workerPath);

/// A path the ranks on other hosts need, and the field (or "runs directory") that names it.
struct SharedPath {
  std::string field;
  std::string path;
};

/// The paths every host of an ssh run must see, as docs/multihost.md lists them: the runs
/// directory (the nearest folder of it that exists here, which the run folder is made in);
/// for a command, command.cwd and command.program when it is a path; else data.path,
/// data.labels_path and model.path when set; run.resume_from when set.
std::vector<SharedPath> sharedPaths(const Profile& profile, const std::string& runsDir);

/// For hosts.launcher slurm: srun (and outside an allocation squeue and scancel) on PATH, and
/// inside one that its nodes hold the run's ranks (Note [SLURM job] in slurm_job.h) and each
/// passes slurmNodesProblem.
/// For ranks on other hosts (hosts.launcher ssh): that each host answers ssh in batch mode and
/// runs the host agent of this build (`ptw-worker --agent --version` there, the hosts one at a
/// time, each bounded by ssh's connect timeout and 20 s) and sees every one of sharedPaths(profile,
/// runsDir) (`[ -e PATH ]`, in the same ssh command), then rendezvousPortProblem. "" when all pass,
/// `rendezvousPort` (when given) then set to the port checked; "" for the local launcher.
std::string hostsProblem(const Profile& profile, const std::string& workerPath, int* rendezvousPort = nullptr,
                         const std::string& runsDir = "");

/// The ssh launcher's check of each host, made of each node of the SLURM job `jobId` that
/// `rankHosts` (the node of each rank) names, in one srun step bounded by 20 s (Note [SLURM
/// node check] in slurm_starter.h): that it runs the host agent of this build (hosts.worker,
/// else `workerPath`) and sees every one of sharedPaths(profile, runsDir). "" when all do,
/// else the line naming the node (and the field and path), or what srun said when the step
/// could not reach a node.
std::string slurmNodesProblem(const Profile& profile, const std::string& workerPath, const std::string& jobId,
                              const std::vector<std::string>& rankHosts, const std::string& runsDir);

/// Whether rank 0's host (the first of hosts.hosts) can open the rendezvous port on every
/// interface, as its TCPStore will (`ptw-worker --check-port` there through the run's ssh;
/// Note [Rendezvous port check] in common/network.cpp): hosts.port, or with hosts.port 0 a port
/// free there, which becomes `port`. "" when it can, else the line naming host, port and why.
std::string rendezvousPortProblem(const Profile& profile, const std::string& workerPath, int& port);

/// For the command strategy on this host with a Python as command.program (isPythonProgram):
/// runs that Python, found as a rank finds it (PATH, command.cwd) and with a rank's
/// environment (command.env included), on `-c "import torch"`, at most `limitS` seconds.
/// "" when it imports torch (or the check does not apply), else the one line naming the
/// interpreter's path, what it said, and the fix.
std::string pythonProblem(const Profile& profile, double limitS = 60.0);

/// The profile's data files (dataFileProblem), its device (deviceProblem), its Python
/// (pythonProblem), then its hosts (hostsProblem, which sets `rendezvousPort`): the first
/// problem that stops a run, found before any folder is made or rank started.
std::string runProblem(const Profile& profile, const std::string& workerPath, int* rendezvousPort = nullptr,
                       const std::string& runsDir = "");

}  // namespace ptw::core
