// SPDX-License-Identifier: GPL-3.0-or-later
// Profile: everything that defines an experiment (workload, strategy, hyperparameters,
// run options), its JSON form, and its validation. The same resolved profile is what the
// launcher hands each worker, so GUI, headless runner and workers read one format.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ptw::core {

/// Example: ModelSpec{}.kind = "mlp"; hidden = {64, 64};
struct ModelSpec {
  std::string kind = "linear";            ///< linear | mlp | cnn (LeNet-5 on 1×28×28) | torchscript
  std::int64_t inFeatures = 10;           ///< inputs per sample (cnn: 784)
  std::int64_t outFeatures = 1;           ///< outputs per sample (classification: number of classes)
  std::vector<std::int64_t> hidden = {};  ///< mlp only: hidden layer widths
  std::string activation = "relu";        ///< mlp only: relu | tanh | gelu
  std::string path = "";                  ///< torchscript only: a .pt from torch.jit.script/trace
};

/// Example: DataSpec{}.samples = 1000;
struct DataSpec {
  /// synthetic-regression | synthetic-classification | csv | mnist | cifar10 | image-folder | npy
  std::string kind = "synthetic-regression";
  std::int64_t samples = 100;  ///< synthetic: how many; files: the first N samples, 0 = all
  std::uint64_t seed = 0;
  double noise = 0.1;
  std::string path = "";                   ///< csv: the file; mnist: the folder with the IDX files
  std::vector<std::string> features = {};  ///< csv: feature columns; empty = every column but the target
  std::string target = "";                 ///< csv: the target column
  std::string task = "regression";         ///< csv: regression | classification (integer class labels)
  double valFraction = 0.0;                ///< held out from the end of the data for validation
  std::string labelsPath = "";             ///< npy: the labels' .npy (data.path holds the features')
  std::vector<double> mean = {};           ///< images: per-channel mean subtracted (after scaling to [0, 1])
  std::vector<double> std = {};            ///< images: per-channel divisor, one per channel like mean
  std::int64_t cropPadding = 0;            ///< images: random crop after zero padding by this many pixels
  bool flip = false;                       ///< images: random horizontal flip, half of the samples

  /// How many of `total` samples are held out for validation: valFraction of them, rounded down.
  std::int64_t heldOut(std::int64_t total) const {
    return static_cast<std::int64_t>(static_cast<double>(total) * valFraction);
  }
};

/// What a rank, and the check before a run, say for `strategy.device: cuda` where LibTorch
/// sees no CUDA device: the same line whichever finds it first.
inline constexpr const char* kNoCudaDeviceMessage =
    "strategy.device: \"cuda\" but LibTorch sees no CUDA device on this machine (this LibTorch has no CUDA, or no "
    "driver is loaded); use \"cpu\"";
/// The most run.loader_threads a profile may ask for: more only contend with the rank for cores.
inline constexpr int kMaxLoaderThreads = 16;
/// Whether data.kind reads files named by data.path (csv, mnist, cifar10, image-folder, npy).
bool readsDataFiles(const DataSpec& data);
/// Whether the data is a classification (cross-entropy; validation reports an accuracy).
bool isClassification(const DataSpec& data);

/// Example: StrategySpec{}.ranks = 4;
struct StrategySpec {
  std::string kind = "ddp";  ///< single | dataparallel | ddp | pool
  int ranks = 2;             ///< ddp: processes; dataparallel: replicas (lanes); pool: workers; single: 1
  /// ddp: auto | gloo | nccl | shm (same-machine CPU ranks, shared memory); auto is shm on
  /// cpu, nccl on cuda (gloo where LibTorch has no NCCL): see collectiveBackend().
  std::string backend = "auto";
  std::string device = "cpu";  ///< cpu | cuda (rank/lane i uses cuda:i, or cuda:gpus[i])
  /// cuda: the GPU of each rank/lane, one per rank, e.g. {2, 3}; empty = cuda:0 .. cuda:ranks-1.
  std::vector<std::int64_t> gpus = {};
  double bucketMb = 25.0;         ///< ddp: gradient bucket size
  std::string poolMode = "sync";  ///< pool: sync (gradients averaged every step) | hogwild (lock-free)
};

/// Example: HyperSpec{}.lr = 0.05;
struct HyperSpec {
  double lr = 0.01;
  std::int64_t batchSize = 16;  ///< per rank
  std::int64_t maxSteps = 20;   ///< 0: run `epochs` epochs instead
  std::int64_t epochs = 0;
  std::string optimizer = "sgd";  ///< sgd | adam | adamw
  double momentum = 0.0;          ///< sgd only
  bool nesterov = false;          ///< sgd only; needs momentum > 0
  double weightDecay = 0.0;
  std::string schedule = "constant";  ///< constant | step | cosine (to max_steps)
  std::int64_t warmupSteps = 0;       ///< linear warm-up from 0 to lr over this many steps
  std::int64_t stepSize = 100;        ///< step schedule: multiply lr by gamma every this many steps
  double gamma = 0.1;                 ///< step schedule factor
  std::int64_t accumulate = 1;        ///< micro-batches per optimizer step; gradients communicated once
  double clipNorm = 0.0;              ///< clip the global gradient norm to this; 0 = off
  std::string precision = "fp32";     ///< fp32 | bf16 (autocast, cuda only)
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool dropLast = false;
};

/// Example: RunOptions{}.timeoutS = 30;
struct RunOptions {
  double timeoutS = 120.0;           ///< a rank silent this long is reported stalled
  int threadsPerRank = 1;            ///< intra-op threads per worker process
  int loaderThreads = 0;             ///< threads per rank preparing the next batches; 0 = inline
  int port = 0;                      ///< store port; 0 picks a free one
  std::int64_t evalEvery = 0;        ///< validation every N steps (and at the end); needs data.val_fraction
  std::int64_t checkpointEvery = 0;  ///< checkpoint every N steps (and at the end); 0 = only at the end
  std::string resumeFrom = "";       ///< a checkpoint file to continue from; "" starts fresh
  int maxRestarts = 0;               ///< after a failure, restart the run from its last checkpoint this many times
  bool metrics = true;               ///< stream per-step records; false sends only heartbeats (to measure their cost)
  std::int64_t keepEvery = 1;        ///< past keep_all_until, the store keeps the record of every Nth step (1: all)
  std::int64_t keepAllUntil = 0;     ///< the store keeps the records of every step up to this one
  std::string onNan = "warn";        ///< a loss that is NaN or infinite: warn (say so) | stop (fail the run)
};

/// Example: CommandSpec{}.program = "python3"; args = {"train.py", "--lr", "{hyper.lr}"};
/// The strategy `command` runs this program as each rank (docs/scripts.md).
struct CommandSpec {
  std::string program = "";            ///< the program; a bare name is looked up on PATH
  std::vector<std::string> args = {};  ///< its arguments, never through a shell; {section.field} is replaced
  std::string cwd = "";                ///< working directory, relative to the profile's folder; "" = that folder
  std::vector<std::string> env = {};   ///< extra environment, "KEY=VALUE" each ({section.field} replaced)
  std::string pattern = "";            ///< picks metrics out of output lines, e.g. "step {step} loss {loss}"
  int reportRanks = 0;                 ///< ranks the records name; 0 = strategy.ranks
  double stopGraceS = 5.0;             ///< a stop sends SIGINT, then SIGTERM, then SIGKILL, this far apart
};

/// Example: HostsSpec{}.launcher = "ssh"; hosts = {"node1:2", "node2:2"}; interface = "eth0";
/// Where the ranks run (docs/multihost.md): here, or on other hosts started through ssh.
struct HostsSpec {
  std::string launcher = "local";       ///< local (every rank here) | ssh (each rank through OpenSSH) | slurm (srun)
  std::vector<std::string> hosts = {};  ///< ssh, slurm: "host:slots" each, horovodrun's form; ranks fill them in order
  std::string interface = "";           ///< the ranks' network interface (Gloo's device, NCCL_SOCKET_IFNAME)
  std::string address = "";             ///< where the ranks meet (rank 0's TCPStore); "" = the first host
  int port = 0;                         ///< the rendezvous port; 0 = one the first host has free (preflight.h)
  std::string worker = "";              ///< ptw-worker on the hosts; "" = the same path as here
  std::string sshUser = "";             ///< ssh -l; "" = ssh's default
  int sshPort = 0;                      ///< ssh -p; 0 = ssh's default
  std::string sshIdentity = "";         ///< ssh -i; "" = ssh's default
  std::string sshConfig = "";           ///< ssh -F; "" = ssh's default
  int aliveIntervalS = 5;               ///< ssh ServerAliveInterval: a host silent 3 times this long is lost
};

/// Whether the run store keeps the step records of `step` (run.keep_every, run.keep_all_until).
inline bool keepsStep(const RunOptions& r, std::int64_t step) {
  return r.keepEvery <= 1 || step <= r.keepAllUntil || step % r.keepEvery == 0;
}

struct Profile {
  std::string name = "untitled";
  ModelSpec model;
  DataSpec data;
  StrategySpec strategy;
  HyperSpec hyper;
  RunOptions run;
  CommandSpec command;
  HostsSpec hosts;

  bool operator==(const Profile& other) const;
  bool operator!=(const Profile& other) const { return !(*this == other); }
};

/// One entry of hosts.hosts, parsed: "node1:2" -> {"node1", 2}.
struct HostSlots {
  std::string host;
  int slotCount = 1;
};
/// hosts.hosts parsed; throws ptw::Error naming the entry that is not `host:slots`.
std::vector<HostSlots> parseHosts(const std::vector<std::string>& entries);
/// Whether `name` is a plausible host name (RFC 1123 labels) or IPv4 address, and so safe to
/// hand to ssh as its destination: no option, user, port or shell syntax in it.
bool plausibleHostName(const std::string& name);
/// The host of each process of a run, hosts.hosts filled in order; empty for the local launcher.
std::vector<std::string> rankHosts(const Profile& profile);

/// One problem with one field, e.g. {"hyper.lr", "must be > 0, got -1"}.
struct FieldError {
  std::string path;
  std::string message;
  std::string text() const { return path + ": " + message; }
};

/// Worker processes a run of this profile starts: ddp ranks, pool workers + coordinator, else 1.
int processCount(const Profile& profile);

/// The collective backend a ddp run of this profile uses: strategy.backend, with "auto"
/// resolved to "shm" on cpu (ranks are local processes), else "nccl" when `haveNccl`, else
/// "gloo".
std::string collectiveBackend(const Profile& profile, bool haveNccl);

/// Series a run reports (record rank 0..n-1): one per ddp rank, DataParallel replica, or pool
/// process (rank 0 is the pool's coordinator).
int reportingRanks(const Profile& profile);

/// The step records of each rank, after each start, that throughput leaves out: a tenth of
/// hyper.max_steps, at most 10 (Note [Warm-up steps] in launch/throughput.h).
std::int64_t warmupSteps(const Profile& profile);

/// The CUDA device index of rank/lane `index`: strategy.gpus[index], or `index` when the
/// list is empty. Example: with gpus {2, 3}, cudaIndexFor(p, 1) == 3.
std::int64_t cudaIndexFor(const Profile& profile, int index);

/// Every field error of a structurally valid profile; empty when it can run.
std::vector<FieldError> validate(const Profile& profile);

/// Parses JSON text. Throws ptw::Error naming the line and column of a syntax error, or
/// the field (`strategy.ranks: expected an integer, got "two"`) of a type error, an
/// unknown field, or the first validation error. `origin` (a file name) prefixes messages.
Profile parseProfile(const std::string& jsonText, const std::string& origin = "profile");

/// Reads what it can of a JSON profile for an editor: every field that has the right type
/// is taken, and every problem (syntax, type, unknown field, validation) is appended to
/// `errors` with its field path ("" for the document). Never throws.
Profile parseProfileFields(const std::string& jsonText, std::vector<FieldError>& errors);

/// Every field of a profile in declaration order, as (path, value as JSON text), e.g.
/// {"hyper.lr", "0.01"}, {"model.hidden", "[64,64]"}, {"name", "\"seed-ddp\""}.
std::vector<std::pair<std::string, std::string>> profileFields(const Profile& profile);

/// The choices of an enumerated field ("strategy.kind" -> single, dataparallel, ...);
/// empty for free fields.
std::vector<std::string> fieldChoices(const std::string& path);

/// One line on what each field means, by path ("hyper.lr" -> "learning rate (the peak, with
/// a schedule)"), Markdown with `code` in backticks: the "meaning" column of docs/profiles.md.
const std::map<std::string, std::string>& fieldHelp();

/// Reads and parses a file; errors name the file (one that does not exist: what to pass instead). Relative model.path,
/// data.path and run.resume_from are resolved against the profile's folder.
Profile loadProfile(const std::string& path);

/// Makes the relative paths of a profile absolute against `folder`, as loadProfile does
/// against the profile's own: model.path, data.path, run.resume_from, and a command run's
/// command.cwd ("" is `folder` itself). Example: cwd "../examples" from "/p/profiles" is
/// "/p/examples".
void resolvePaths(Profile& profile, const std::string& folder);

/// Pretty JSON with every field written.
std::string toJson(const Profile& profile);

/// Writes atomically (temporary file then rename), so a failed save loses nothing.
void saveProfile(const Profile& profile, const std::string& path);

/// Applies `key=value` overrides (`hyper.lr=0.01`, `strategy.ranks=4`) to a profile and
/// revalidates it. The value is read as JSON when it parses as JSON, else as a string.
Profile applyOverrides(const Profile& profile, const std::vector<std::string>& assignments);

/// The built-in default profile: the seed workload, DDP, 2 CPU ranks.
Profile defaultProfile();

}  // namespace ptw::core
