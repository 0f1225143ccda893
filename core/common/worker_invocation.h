// SPDX-License-Identifier: GPL-3.0-or-later
// The worker's interface as its callers see it: ptw-worker's command line (WorkerInvocation
// writes it and parses it back), its exit codes (WorkerExit), and what `--devices` prints
// (DeviceInfo). The launcher, the starters, the window's probes and the worker itself all go
// through this file, so a flag is spelled once (docs/protocol.md lists them for people).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptw::core {

/// How a worker process ends. Both ends of the protocol use these; the operating system
/// hands them over as plain ints (exitCode()).
enum class WorkerExit : int {
  Finished = 0,            ///< finished, or stopped on the launcher's request
  Failed = 1,              ///< training failed; the last `error:` line on stderr says why
  BadInput = 2,            ///< bad arguments or profile, or a command rank's program that could not start
  StoppedFromOutside = 5,  ///< stopped by a signal that did not come from its launcher (someone ran kill)
  CannotStoreMetrics = 6,  ///< the run's step records could not be written (a full disk); a restart would meet it too
};

/// The process exit status that stands for `e`.
constexpr int exitCode(WorkerExit e) { return static_cast<int>(e); }

/// A worker's exit status after a stop signal that did not come from its launcher: it stopped
/// gracefully, with the others, but the run did not end by ptw's own stop, and the launcher
/// says so. As an int, to compare with an exit status.
inline constexpr int kWorkerStoppedFromOutside = exitCode(WorkerExit::StoppedFromOutside);

/// A worker's exit status when it could not write the run's step records (a full disk; Note
/// [Ranks write their steps]): its last error line says why. As an int, like the above.
inline constexpr int kWorkerCannotStoreMetrics = exitCode(WorkerExit::CannotStoreMetrics);

/// The hidden --fault SPEC (Note [Injected faults] in engine/worker.cpp): rank `rank` fails
/// as `kind` says, at start or after step `step` of the first attempt, or (slow-at-step)
/// takes `factor` times its own time for each step from `step` on.
/// Example: InjectedFault{"kill-at-step", 1, 12}
struct InjectedFault {
  std::string kind = "";  ///< "" (none), throw-at-start, hang-at-start, kill-at-step, hang-at-step or slow-at-step
  int rank = -1;
  std::int64_t step = -1;  ///< the *-at-step kinds only
  double factor = 1;       ///< slow-at-step only: > 1
  bool operator==(const InjectedFault& o) const {
    return kind == o.kind && rank == o.rank && step == o.step && factor == o.factor;
  }
  /// Whether step `step` of rank `r` is slowed by factor (slow-at-step).
  bool slows(int r, std::int64_t s) const { return kind == "slow-at-step" && rank == r && s >= step; }
};

/// Steps a second of each synthetic rank when --synthetic-rate does not say.
inline constexpr double kDefaultSyntheticRate = 10;

/// One ptw-worker command line: every flag the worker takes, each at its default unless set.
/// toArgs() writes the flags that differ from their defaults; parse() reads them back.
/// Example: WorkerInvocation("bin/ptw-worker").setProfile("run/profile.json").setRank(0).setWorld(2).setRecords(3)
struct WorkerInvocation {
  WorkerInvocation() = default;
  explicit WorkerInvocation(std::string program) : program(std::move(program)) {}

  std::string program = "ptw-worker";  ///< argv[0]: the worker program, run without a shell

  // What the worker does other than train a rank (docs/protocol.md's probes).
  bool preflight = false;  ///< --preflight: load the workload, check it, print its shapes
  bool devices = false;    ///< --devices: print the devices LibTorch sees (DeviceInfo lines)
  bool blas = false;       ///< --blas: print the OpenBLAS kernels ranks train with
  int checkPort = -1;      ///< --check-port PORT: open PORT as rank 0's TCPStore would; -1: not asked
  bool help = false;       ///< --help or -h: print the usage
  bool version = false;    ///< --version: print "ptw-worker VERSION"

  // A rank, as the launcher starts it (Note [Started by a standard launcher] for the others).
  std::string profile = "";          ///< --profile FILE: the resolved profile
  std::string samples = "";          ///< --samples PNG: with --preflight, a grid of sample images to write
  int rank = -1;                     ///< --rank R; -1: from a standard launcher's variables
  int world = -1;                    ///< --world W; -1: likewise
  int port = 0;                      ///< --port P; 0: MASTER_PORT, or 29500
  std::string out = "";              ///< --out DIR: the run folder
  std::string store = "";            ///< --store FILE: the FileStore of a local rendezvous
  std::string steps = "";            ///< --steps FILE: the run's step file (Note [Ranks write their steps])
  long long stepsLimit = 0;          ///< --steps-limit BYTES: the step file is full past this; 0: no limit
  int attempt = 0;                   ///< --attempt N: the restart count (Note [Restarts])
  int records = -1;                  ///< --records FD: binary records to FD; -1: text lines on stdout
  std::string remote = "";           ///< --remote HOST: started over ssh on HOST (Note [Remote ranks])
  std::string master = "127.0.0.1";  ///< --master ADDR: the TCPStore's host; written for a remote rank even so
  std::string interface = "";        ///< --interface IF: the network interface Gloo and NCCL use

  // Hidden: for tests and measures, not for users.
  InjectedFault fault = {};        ///< --fault SPEC (Note [Injected faults])
  std::string metricsPhases = "";  ///< --metrics-phases MS:FILE (Note [Metrics in phases]), checked where used
  bool autogradOnly = false;       ///< --gradients autograd: no gradients by hand, to compare
  /// --synthetic-rate R: steps a second of each synthetic rank (Note [Synthetic ranks] in
  /// engine/synthetic_ranks.h); 0: kDefaultSyntheticRate.
  double syntheticRate = 0;
  /// Flags passed on unread (ptw --worker-arg), written after the launcher's own and before
  /// the starter's (--records, --remote ...), which so win over them.
  std::vector<std::string> passOn = {};

  WorkerInvocation& setProfile(std::string v) {
    profile = std::move(v);
    return *this;
  }
  WorkerInvocation& setRank(int v) {
    rank = v;
    return *this;
  }
  WorkerInvocation& setWorld(int v) {
    world = v;
    return *this;
  }
  WorkerInvocation& setPort(int v) {
    port = v;
    return *this;
  }
  WorkerInvocation& setRecords(int fd) {
    records = fd;
    return *this;
  }
  WorkerInvocation& setCheckPort(int v) {
    checkPort = v;
    return *this;
  }

  /// argv: the program, then the flags().
  std::vector<std::string> toArgs() const;
  /// The flags alone, for a caller that names the program apart (QProcess).
  std::vector<std::string> flags() const;

  /// Reads `argv` (argv[0] the program). A flag takes its value as the next argument or after
  /// '=' (--flag value, --flag=value); the last of a flag given twice wins. --help and
  /// --version end the reading. Reads nothing else (the environment, descriptors): what a
  /// rank needs beyond its flags is the worker's to check. Throws ptw::Error naming the flag
  /// and what it expected: an unknown flag, a missing value, a value that is no number.
  static WorkerInvocation parse(const std::vector<std::string>& argv);
  static WorkerInvocation parse(int argc, char** argv);

  /// True when the command line asks for a rank to train, not for a probe or the usage.
  bool trainsRank() const;
  /// Throws ptw::Error naming the flag when the command line lacks what its form needs: a
  /// profile (all but --devices, --blas and --check-port), and for a rank, a rank in
  /// 0..world-1. A rank that a standard launcher placed is checked once placed.
  void checkComplete() const;
  /// What `ptw-worker --help` prints.
  static std::string usage();

  bool operator==(const WorkerInvocation& o) const;
};

/// One device as `ptw-worker --devices` lists it: a JSON object a line (docs/protocol.md).
/// Example: DeviceInfo{"cuda", 0, "NVIDIA H100", 0, 80LL << 30, 1LL << 30, ""}
struct DeviceInfo {
  std::string kind = "";  ///< cpu | cuda
  int index = 0;
  std::string name = "";
  int cores = 0;                  ///< cpu only
  long long memoryBytes = 0;      ///< cpu: the machine's memory; cuda: the device's
  long long usedBytes = 0;        ///< cuda only: memory in use
  std::string openblasCore = "";  ///< cpu only: the OpenBLAS kernels ranks train with ("" when not OpenBLAS)
};

/// The line, with '\n', that `ptw-worker --devices` prints for `d`: a cpu's keys or a cuda device's.
std::string deviceLine(const DeviceInfo& d);

/// What `ptw-worker --devices` printed, one device a line; lines that are no JSON object are
/// passed over, and a missing field keeps its default. Never throws.
std::vector<DeviceInfo> parseDevices(const std::string& jsonLines);

/// True when `devices` lists a CUDA device.
bool anyCudaDevice(const std::vector<DeviceInfo>& devices);

}  // namespace ptw::core
