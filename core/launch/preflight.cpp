// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/preflight.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include "common/command.h"
#include "common/data_files.h"
#include "common/error.h"
#include "common/launcher_env.h"
#include "common/launcher_kinds.h"
#include "common/profile.h"
#include "common/strategies.h"
#include "common/version.h"
#include "common/worker_invocation.h"
#include "launch/run_program.h"
#include "launch/slurm_job.h"
#include "launch/slurm_starter.h"
#include "launch/ssh_starter.h"

extern char** environ;

namespace ptw::core {
namespace {

// The slurm launcher (Note [SLURM job]): SLURM's programs, and inside an allocation, that it
// holds the run's ranks and that each of their nodes passes Note [SLURM node check]. Outside
// one the nodes are known once the job runs: the supervisor checks them then.
std::string slurmProblem(const Profile& profile, const std::string& workerPath, const std::string& runsDir) {
  const auto env = processEnvironment();
  const auto job = env.find("SLURM_JOB_ID");
  const bool inside = job != env.end() && !job->second.empty();
  std::vector<std::string> rankHosts;
  try {
    slurmProgram("srun");
    if (!inside) {
      slurmProgram("squeue");
      slurmProgram("scancel");
      return "";
    }
    rankHosts = SlurmJob::allocationRankHosts(profile, env);
  } catch (const Error& e) {
    return e.what();
  }
  return slurmNodesProblem(profile, workerPath, job->second, rankHosts, runsDir);
}

// What a host answers to `check` (a command line for its shell, run through the run's own ssh
// command, bounded by ssh's connect timeout and 20 s): the exit code (255 or -1: ssh did not
// get through) and the last line said.
struct HostAnswer {
  int code = -1;
  std::string said;
};
HostAnswer askHost(const SshStarter& starter, int slot, const WorkerInvocation& check) {
  std::string line;  // the check alone, not a rank
  for (const auto& a : check.toArgs()) line += (line.empty() ? "" : " ") + quoteForShell(a);
  std::string out;
  HostAnswer a;
  a.code = runProgram(starter.sshArgv(starter.hostOf(slot), line), 20.0, out);
  a.said = lastLine(out);
  return a;
}

std::string unreachable(const std::string& host, const std::string& said) {
  return "hosts.hosts: cannot reach host " + host + " with ssh in batch mode" +
         (said.empty() ? std::string(" (no answer within 20 s)") : ": " + said) +
         "; check the host, its key and hosts.ssh_* (docs/multihost.md)";
}

// An ssh command to each host of `profile`, one slot a host; its rendezvous port is not used.
SshStarter checkStarter(const Profile& profile, const std::vector<std::string>& hosts, const std::string& workerPath) {
  HostsSpec spec = profile.hosts;
  spec.port = 1;  // no port is picked here for the check's commands
  return SshStarter(spec, hosts, workerPath);
}

std::vector<std::string> hostNames(const Profile& profile) {
  std::vector<std::string> hosts;
  for (const auto& entry : parseHosts(profile.hosts.hosts)) hosts.push_back(entry.host);
  return hosts;
}

std::string remoteWorker(const Profile& profile, const std::string& workerPath) {
  return profile.hosts.worker.empty() ? workerPath : profile.hosts.worker;
}

// The nearest folder of `path` (itself included) that exists here: a runs directory a first
// run will make is checked through the folder it will be made in.
std::string existingFolder(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  while (!p.empty() && !std::filesystem::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p.string();
}

}  // namespace

std::vector<SharedPath> sharedPaths(const Profile& profile, const std::string& runsDir) {
  // The ranks on other hosts read and write these at the paths this machine gives them, and
  // nothing copies them there (docs/multihost.md, "Paths every host must see").
  std::vector<SharedPath> paths;
  if (!runsDir.empty()) paths.push_back({"runs directory", existingFolder(runsDir)});
  const auto add = [&paths](const char* field, const std::string& path) {
    if (!path.empty()) paths.push_back({field, path});
  };
  if (strategyOf(profile).runsCommand) {
    add("command.cwd", profile.command.cwd);
    // A bare name is looked up on each host's PATH; a path is the file itself.
    const std::string& program = profile.command.program;
    if (program.find('/') != std::string::npos)
      add("command.program", program.front() == '/' || profile.command.cwd.empty()
                                 ? program
                                 : (std::filesystem::path(profile.command.cwd) / program).lexically_normal().string());
  } else {
    add("data.path", profile.data.path);
    add("data.labels_path", profile.data.labelsPath);
    add("model.path", profile.model.path);
  }
  add("run.resume_from", profile.run.resumeFrom);
  return paths;
}

std::string rendezvousPortProblem(const Profile& profile, const std::string& workerPath, int& port) {
  const std::vector<std::string> hosts = hostNames(profile);
  PTW_CHECK(!hosts.empty(), "hosts.hosts: the ssh launcher needs at least one host");
  const std::string& host = hosts.front();  // rank 0's: the slots fill in order
  const int asked = profile.hosts.port;
  const HostAnswer a = askHost(checkStarter(profile, {host}, workerPath), 0,
                               WorkerInvocation(remoteWorker(profile, workerPath)).setCheckPort(asked));
  if (a.code == 255 || a.code < 0) return unreachable(host, a.said);
  const std::string what = asked != 0 ? "port " + std::to_string(asked) : std::string("a free port");
  const std::string fix = asked != 0 ? "pick another hosts.port or free it" : "set hosts.port to a port it can open";
  if (a.code != 0) {
    // The worker says "cannot open port P: REASON"; anything else (a shell's complaint) as said.
    const auto colon = a.said.rfind("cannot open port ", 0) == 0 ? a.said.find(": ") : std::string::npos;
    const std::string why = colon == std::string::npos ? a.said : a.said.substr(colon + 2);
    return "hosts.port: host " + host + " cannot open " + what + " for the rendezvous" +
           (why.empty() ? "" : ": " + why) + "; " + fix;
  }
  char* end = nullptr;
  const long opened = std::strtol(a.said.c_str(), &end, 10);
  if (a.said.empty() || *end != '\0' || opened < 1 || opened > 65535 || (asked != 0 && opened != asked))
    return "hosts.port: host " + host + " answered the check of " + what + " with \"" + a.said +
           "\", not the port; every host needs this ptw build";
  port = static_cast<int>(opened);
  return "";
}

namespace {

// Note [Host check]
// Each host (ssh) or node (slurm) runs one shell line, checkScript, that prints the agent's
// version (`WORKER --agent --version`, its errors included), then, when that failed, its exit
// code, else each path of sharedPaths it cannot see, the first of them only: one connection or
// one step does it all, which costs far more than either check. The marked lines (kMark) are
// told from the worker's by their start; parseCheck reads them back, and hostCheckProblem
// turns the answer into the one message both launchers give.
constexpr const char* kMark = "ptw-check: ";
constexpr const char* kNode = "ptw-check: node ";
constexpr const char* kExit = "ptw-check: exit ";
constexpr const char* kUnseen = "ptw-check: cannot see ";

// Note [Host check]; `nameNode`: first print the SLURM node's name (Note [SLURM node check]).
std::string checkScript(const std::string& worker, const std::vector<SharedPath>& paths, bool nameNode) {
  std::string line = nameNode ? std::string("printf '") + kNode + "%s\\n' \"$SLURMD_NODENAME\"; " : std::string();
  // The agent answers: the ranks are started through it.
  line += quoteForShell(worker) + " --agent --version 2>&1; c=$?; [ $c -eq 0 ] || { printf '" + kExit +
          "%s\\n' $c; exit 0; }";
  if (!paths.empty()) {
    line += "; for p in";
    for (const auto& p : paths) line += " " + quoteForShell(p.path);
    line += std::string("; do [ -e \"$p\" ] || { printf '") + kUnseen + "%s\\n' \"$p\"; exit 0; }; done";
  }
  return line;
}

// What a host answered to checkScript: the worker's exit code, its last line, the first path
// the host cannot see ("" when it sees them all) and, for a SLURM node, its name.
struct HostCheck {
  int code = 0;
  std::string said;
  std::string unseen;
  std::string node;
};
bool startsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
HostCheck parseCheck(const std::vector<std::string>& lines) {
  HostCheck h;
  for (const auto& l : lines) {
    if (startsWith(l, kNode)) {
      h.node = l.substr(std::string(kNode).size());
    } else if (startsWith(l, kExit)) {
      h.code = std::atoi(l.c_str() + std::string(kExit).size());
    } else if (startsWith(l, kUnseen)) {
      h.unseen = l.substr(std::string(kUnseen).size());
    } else if (!startsWith(l, kMark) && l.find_first_not_of(" \t\r") != std::string::npos) {
      h.said = l;
    }
  }
  return h;
}
std::vector<std::string> linesOf(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The problem `host`'s answer shows, said the same for an ssh host and a SLURM node; "" when
// it runs this build's agent and sees every one of `paths`.
std::string hostCheckProblem(const std::string& host, const std::string& worker, const HostCheck& a,
                             const std::vector<SharedPath>& paths) {
  const std::string expected = std::string("ptw-worker ") + kVersion;
  // A build before the host agent refuses the flag (Note [Host agent]).
  if (a.code != 0 && a.said.find("--agent") != std::string::npos)
    return "hosts.hosts: host " + host + " runs a ptw-worker without the host agent (" + worker +
           " --agent: " + a.said + "), this machine " + expected + "; every host needs the same ptw build";
  if (a.code != 0)
    return "hosts.hosts: host " + host + " cannot run " + worker + (a.said.empty() ? "" : ": " + a.said) +
           "; install ptw there at that path, or set hosts.worker";
  if (a.said != expected)
    return "hosts.hosts: host " + host + " runs " + (a.said.empty() ? std::string("an unknown ptw-worker") : a.said) +
           ", this machine " + expected + "; every host needs the same ptw build";
  for (const auto& p : paths)
    if (!a.unseen.empty() && p.path == a.unseen)
      return p.field + ": host " + host + " cannot see " + p.path +
             "; every host needs it at the same path, on a filesystem they share (docs/multihost.md)";
  return "";
}

// Note [Host check] over the run's ssh command, bounded by ssh's connect timeout and 20 s.
std::string sshHostProblem(const SshStarter& starter, int slot, const std::string& worker,
                           const std::vector<SharedPath>& paths) {
  const std::string host = starter.hostOf(slot);
  std::string out;
  const int code = runProgram(starter.sshArgv(host, checkScript(worker, paths, false)), 20.0, out);
  if (code == 255 || code < 0) return unreachable(host, lastLine(out));
  HostCheck h = parseCheck(linesOf(out));
  if (code != 0) {  // the line itself failed there: the host's shell says why
    h.code = code;
    h.said = lastLine(out);
  }
  return hostCheckProblem(host, worker, h, paths);
}

// The distinct nodes of `rankHosts`, in the ranks' order.
std::vector<std::string> distinctNodes(const std::vector<std::string>& rankHosts) {
  std::vector<std::string> nodes;
  for (const auto& h : rankHosts)
    if (std::find(nodes.begin(), nodes.end(), h) == nodes.end()) nodes.push_back(h);
  return nodes;
}

// srun's output split by task (the "TASK: " of --label), and what srun said itself.
struct LabelledOutput {
  std::map<int, std::vector<std::string>> tasks;
  std::string srunSaid;  ///< its last "srun: error:" line, else its last line of its own
};
LabelledOutput splitLabelled(const std::string& out) {
  LabelledOutput o;
  for (const auto& l : linesOf(out)) {
    const std::size_t digits = l.find_first_not_of(' ');
    const std::size_t colon = digits == std::string::npos ? digits : l.find_first_not_of("0123456789", digits);
    if (colon != std::string::npos && colon > digits && l.compare(colon, 2, ": ") == 0) {
      o.tasks[std::atoi(l.c_str() + digits)].push_back(l.substr(colon + 2));
    } else if (l.find_first_not_of(" \t\r") != std::string::npos &&
               (o.srunSaid.find("srun: error:") == std::string::npos || l.find("srun: error:") != std::string::npos)) {
      o.srunSaid = l;
    }
  }
  return o;
}

}  // namespace

std::string slurmNodesProblem(const Profile& profile, const std::string& workerPath, const std::string& jobId,
                              const std::vector<std::string>& rankHosts, const std::string& runsDir) {
  const std::vector<std::string> nodes = distinctNodes(rankHosts);
  const std::string worker = remoteWorker(profile, workerPath);
  const std::vector<SharedPath> paths = sharedPaths(profile, runsDir);
  std::string out;
  std::vector<std::string> argv;
  try {
    argv = slurmCheckCommand(jobId, nodes, checkScript(worker, paths, true));
  } catch (const Error& e) {
    return e.what();
  }
  const int code = runProgram(argv, 20.0, out);
  const LabelledOutput o = splitLabelled(out);
  std::map<std::string, HostCheck> byNode;
  for (const auto& [task, lines] : o.tasks) {
    HostCheck h = parseCheck(lines);
    if (!h.node.empty()) byNode[h.node] = std::move(h);
  }
  const std::string why = code < 0              ? std::string(" within 20 s")
                          : !o.srunSaid.empty() ? ": " + o.srunSaid
                                                : " (srun's exit code " + std::to_string(code) + ")";
  if (byNode.empty()) {  // no step: srun says why (a node not in the job, the job gone)
    std::string list;
    for (const auto& n : nodes) list += (list.empty() ? "" : ",") + n;
    return "hosts.hosts: srun could not check node(s) " + list + " in SLURM job " + jobId + why +
           "; check that the job holds them (squeue, sinfo)";
  }
  for (const auto& node : nodes) {
    const auto it = byNode.find(node);
    if (it == byNode.end())
      return "hosts.hosts: node " + node + " of SLURM job " + jobId + " did not answer the check through srun" + why +
             "; check the node and the job (sinfo, squeue)";
    if (std::string problem = hostCheckProblem(node, worker, it->second, paths); !problem.empty()) return problem;
  }
  return "";
}

std::string hostsProblem(const Profile& profile, const std::string& workerPath, int* rendezvousPort,
                         const std::string& runsDir) {
  const LauncherInfo* launcher = findLauncher(profile.hosts.launcher);
  if (!launcher || launcher->kind == LauncherKind::Local) return "";
  if (launcher->kind == LauncherKind::Slurm) return slurmProblem(profile, workerPath, runsDir);
  const std::vector<std::string> hosts = hostNames(profile);
  if (hosts.empty()) return "";
  const SshStarter starter = checkStarter(profile, hosts, workerPath);
  const std::string worker = remoteWorker(profile, workerPath);
  const std::vector<SharedPath> paths = sharedPaths(profile, runsDir);
  for (std::size_t i = 0; i < hosts.size(); ++i)
    if (std::string problem = sshHostProblem(starter, static_cast<int>(i), worker, paths); !problem.empty())
      return problem;
  int port = 0;
  if (std::string problem = rendezvousPortProblem(profile, workerPath, port); !problem.empty()) return problem;
  if (rendezvousPort) *rendezvousPort = port;
  return "";
}

std::string coresWarning(const Profile& profile, int cores) {
  // Ranks on other hosts use their cores, not this machine's.
  if (profile.strategy.device != "cpu" || ranksMayBeRemote(profile)) return "";
  if (cores < 0) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  }
  const int ranks = profile.strategy.ranks;
  if (ranks <= cores) return "";
  std::ostringstream line;
  line << "strategy.ranks: " << ranks << " ranks on " << cores << " core(s); they will take turns and each step"
       << " waits for the slowest; set strategy.ranks to " << cores << " or fewer for a fair speed";
  return line.str();
}

std::string deviceProblem(const Profile& profile, const std::string& workerPath) {
  if (profile.strategy.device != "cuda") return "";
  WorkerInvocation probe(workerPath);
  probe.devices = true;
  std::string devices;  // a second or two: the worker loads LibTorch
  if (runProgram(probe.toArgs(), 60.0, devices) != 0) return "";
  return anyCudaDevice(parseDevices(devices)) ? "" : kNoCudaDeviceMessage;
}

std::string pythonProblem(const Profile& profile, double limitS) {
  const CommandSpec& cmd = profile.command;
  // Ranks on other hosts run their own Python, which this host cannot check.
  if (!strategyOf(profile).runsCommand || ranksMayBeRemote(profile) || !isPythonProgram(cmd.program)) return "";
  std::string python;
  try {
    PTW_CHECK(cmd.cwd.empty() || std::filesystem::is_directory(cmd.cwd), "command.cwd: ", cmd.cwd, " is not a folder");
    const char* path = std::getenv("PATH");
    python = resolveProgram(cmd.program, cmd.cwd, path ? path : "/usr/local/bin:/usr/bin:/bin");
  } catch (const Error& e) {
    return e.what();
  }
  std::vector<std::string> base;
  for (char** e = environ; *e; ++e) base.emplace_back(*e);
  const std::vector<std::string> env = scriptEnvironment(profile, ScriptContext{}, base);
  auto importsTorch = [&](const std::string& interpreter, std::string& said) {
    std::string out;
    const int code = runProgram({interpreter, "-c", "import torch"}, limitS, out, cmd.cwd, env);
    said = code < 0                ? "no answer within " + std::to_string(static_cast<int>(limitS)) + " s, or killed"
           : lastLine(out).empty() ? "exit code " + std::to_string(code)
                                   : lastLine(out);
    return code == 0;
  };
  std::string said;
  if (importsTorch(python, said)) return "";
  // Debian's python3-torch is the one ptw's own tests use; suggested only where it works.
  const std::string debian = "/usr/bin/python3";
  std::string ignored;
  const bool debianWorks = python != debian && ::access(debian.c_str(), X_OK) == 0 && importsTorch(debian, ignored);
  return "command.program: " + python + " cannot import torch (" + said + "); " +
         (debianWorks ? "set command.program to a Python that has torch, e.g. " + debian
                      : std::string("install torch for it (pip install torch; python3-torch on Debian), or set "
                                    "command.program to a Python that has torch"));
}

std::string runProblem(const Profile& profile, const std::string& workerPath, int* rendezvousPort,
                       const std::string& runsDir) {
  if (std::string problem = dataFileProblem(profile.data); !problem.empty()) return problem;
  if (std::string problem = deviceProblem(profile, workerPath); !problem.empty()) return problem;
  if (std::string problem = pythonProblem(profile); !problem.empty()) return problem;
  return hostsProblem(profile, workerPath, rendezvousPort, runsDir);
}

}  // namespace ptw::core
