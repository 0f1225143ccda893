// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/worker.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/command.h"
#include "common/error.h"
#include "common/launcher_env.h"
#include "common/network.h"
#include "common/profile.h"
#include "common/record.h"
#include "common/step_block.h"
#include "common/strategies.h"
#include "common/version.h"
#include "common/worker_invocation.h"
#include "engine/blas.h"
#include "engine/collective_position.h"
#include "engine/command_rank.h"
#include "engine/native_stacks.h"
#include "engine/peer_wait.h"
#include "engine/sample_grid.h"
#include "engine/synthetic_ranks.h"
#include "engine/trainer.h"
#include "engine/workload.h"
#ifdef PTW_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ptw::engine {
namespace {

std::atomic<bool> g_stop{false};

std::atomic<int> g_stoppedBy{0};  ///< the pid of a process other than the launcher that sent a stop, or -1 (the kernel)

extern "C" void onStopSignal(int, siginfo_t* info, void*) {
  // A command rank's program shares the run's process group, and may signal it itself.
  if (info && info->si_pid != ::getppid() && info->si_pid != ::getpid())
    g_stoppedBy.store(info->si_pid > 0 ? info->si_pid : -1);
  g_stop.store(true);
}

// Note [Ranks write their steps]
// In a stored run the launcher names the run's step file (--steps FILE), and a rank packs
// its step records into blocks (common/step_block.h) and appends them to that file itself,
// a block in one write, sending its launcher Group records in their place (Note [Step
// groups]). Sending every record through the record pipe instead, for the launcher to
// decode, pack again, checksum and write, and hand on to the window for the charts, costs
// the window's process a noticeable share of a core at the shared-memory rate, which ranks
// in lock-step that own every core pay about twice over in throughput. A rank pays for the
// file about what it would pay for the pipe. The ranks' blocks
// interleave in the file, each whole; one that a rank's death cuts short is passed over by
// the store's readers. The blocks of a flush are written before its groups leave, so a
// group's records are in the file before anyone hears of them. A write that fails (a full
// disk) ends the rank with WorkerExit::CannotStoreMetrics and the reason: the run stops rather
// than train on unrecorded.
class StepFile {
 public:
  StepFile(const std::string& path, int attempt, long long limitBytes, const core::RunOptions& keep)
      : m_path(path), m_attempt(attempt), m_limit(limitBytes), m_keep(keep) {
    m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (m_fd < 0) fail(errno);
  }
  ~StepFile() {
    if (m_fd >= 0) ::close(m_fd);
  }
  StepFile(const StepFile&) = delete;
  StepFile& operator=(const StepFile&) = delete;

  void add(const core::StepRecord& s) {
    if (!core::keepsStep(m_keep, s.step)) return;  // the profile asks for fewer (run.keep_every)
    Block& b = blockOf(s.rank);
    if (b.count == 0) {
      b.bytes.assign(core::kBlockHeaderBytes, '\0');
      b.first = b.last = s.step;
    }
    core::packStep(s, b.bytes);
    b.first = std::min(b.first, s.step);
    b.last = std::max(b.last, s.step);
    if (++b.count == core::kBlockRecords) write(b);
  }
  /// Appends every block held; false (error() says why) when the file cannot take them.
  bool flush() {
    for (auto& b : m_blocks)
      if (b.count > 0) write(b);
    return m_error.empty();
  }
  const std::string& error() const { return m_error; }

 private:
  struct Block {
    int rank = 0;
    std::int64_t count = 0, first = 0, last = 0;
    std::string bytes;
  };
  Block& blockOf(int rank) {
    for (auto& b : m_blocks)
      if (b.rank == rank) return b;
    Block& b = m_blocks.emplace_back();
    b.rank = rank;
    b.bytes.reserve(core::kBlockHeaderBytes + core::kBlockRecords * core::kBlockRecordBytes);
    return b;
  }
  void write(Block& b) {
    if (m_error.empty()) {
      core::finishBlock(b.bytes, b.count, b.rank, m_attempt, b.first, b.last);
      struct stat st {};
      if (m_limit > 0 && ::fstat(m_fd, &st) == 0 && st.st_size + static_cast<long long>(b.bytes.size()) > m_limit) {
        fail(ENOSPC);
      } else {
        const char* p = b.bytes.data();
        std::size_t left = b.bytes.size();
        while (left > 0) {
          const ssize_t n = ::write(m_fd, p, left);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            fail(n < 0 ? errno : ENOSPC);
            break;
          }
          p += n;
          left -= static_cast<std::size_t>(n);
        }
      }
    }
    b.count = 0;
    b.bytes.clear();
  }
  void fail(int err) {
    if (m_error.empty()) m_error = core::metricsWriteError(m_path, std::strerror(err), err);
  }

  const std::string m_path;
  const int m_attempt;
  const long long m_limit;
  const core::RunOptions m_keep;  ///< which steps' records the store keeps
  int m_fd = -1;
  std::vector<Block> m_blocks;  ///< one per rank this process reports for
  std::string m_error;
};

// Thrown where a rank cannot write its step records (Note [Ranks write their steps]).
struct MetricsNotStored : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Buffers records and writes them in batches: binary frames to the launcher's record
// pipe, or text lines to stdout for a worker run by hand (common/record.h). A batch
// leaves at most every 250 ms when steps are fast (each write wakes the launcher, which
// then takes a core from a rank: a few large batches cost less than many small ones;
// the store commits every 250 ms anyway), at once when the buffer is full. Note [Hand-over
// of slow steps]: a rank whose records come slowly hands them over sooner, once 20 ms have
// passed since the last batch while it holds at most kFewRecords of them: a follower then
// sees a step within milliseconds rather than up to 250 ms after it, and the batches stay
// at most 50 a second, each of a step that took more than a millisecond, so a rank that
// steps fast enough for batching to matter never hands over early. The launcher enlarges
// the record pipe to hold a full buffer. With a step file, step records go there and their
// groups to the pipe.
class RecordWriter {
 public:
  RecordWriter(int fd, std::unique_ptr<StepFile> steps, std::int64_t warmup)
      : m_fd(fd >= 0 ? fd : 1), m_binary(fd >= 0), m_steps(std::move(steps)), m_warmup(warmup) {
    m_buffer.reserve(kFlushBytes + 256);
  }
  void write(const core::Record& r) {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (r.kind == core::Record::Kind::Done) writeSteps();  // every step told of before the end
    if (m_steps && r.kind == core::Record::Kind::Step)
      group(r.step);
    else
      append(r);
    if (r.kind == core::Record::Kind::Step) {
      if (m_stepsPass) passed(r.step.step);
      ++m_held;
    }
    auto now = std::chrono::steady_clock::now();
    const auto since = now - m_lastFlush;
    if (m_buffer.size() >= kFlushBytes || since > std::chrono::milliseconds(250) ||
        (since > kSoon && m_held <= kFewRecords))  // Note [Hand-over of slow steps]
      flushLocked(now);
    if (m_failed) throw MetricsNotStored(m_steps->error());
  }
  void heartbeat(int rank, const char* state) {
    std::lock_guard<std::mutex> lock(m_mutex);
    core::Record h;
    h.kind = core::Record::Kind::Heartbeat;
    h.step.rank = rank;
    h.step.step = m_lastStep.load(std::memory_order_relaxed);
    h.setState(state);
    h.parameters = m_parameters.load(std::memory_order_relaxed);
    const auto& collectives = collectivePosition();  // Note [Collective positions]
    if (collectives.counting.load(std::memory_order_relaxed)) {
      const char* last = collectives.last.load(std::memory_order_relaxed);
      // relaxed loads of two counters may see a completion before its entry: never more completed
      const std::int64_t completed = collectives.completed.load(std::memory_order_relaxed);
      h.setCollectives(std::max(completed, collectives.entered.load(std::memory_order_relaxed)), completed,
                       last ? last : "");
    }
    append(h);
    flushLocked(std::chrono::steady_clock::now());
  }
  void flush() {
    std::lock_guard<std::mutex> lock(m_mutex);
    flushLocked(std::chrono::steady_clock::now());
  }
  /// The rank's latest step, sent or not (run.metrics off): heartbeats carry it, so the
  /// launcher sees the run progress and does not take it for stalled. No lock on the step.
  void passed(std::int64_t step) { m_lastStep.store(step, std::memory_order_relaxed); }
  /// A process standing for many ranks says itself which step its heartbeats carry (its
  /// slowest rank's, Note [Synthetic ranks]): its step records then leave it be.
  void passedOnlyByHand() { m_stepsPass = false; }
  /// The model's parameter count, which every heartbeat from now on carries.
  void setParameters(std::int64_t n) { m_parameters.store(n, std::memory_order_relaxed); }

 private:
  struct Open {
    core::Record record;         ///< kind Group: the group so far and its last step
    std::int64_t windowEnd = 0;  ///< the first step past the group's window
    std::int64_t seen = 0;       ///< step records of this rank since the start
    bool diverged = false;       ///< a loss that is not finite came
  };
  // Note [Step groups]
  void group(const core::StepRecord& s) {
    m_steps->add(s);
    Open* open = nullptr;
    for (auto& o : m_open)
      if (o.record.step.rank == s.rank) open = &o;
    if (!open) {
      open = &m_open.emplace_back();
      open->record.kind = core::Record::Kind::Group;
    }
    core::StepGroup& g = open->record.group;
    // Note [Diverged runs]: the rank's first loss that is not finite starts a group, so that
    // the group's first step is the step it diverged at.
    const bool diverges = !open->diverged && core::isReportedLoss(s.loss) && !std::isfinite(s.loss);
    if (diverges) open->diverged = true;
    if (g.count > 0 && (s.step >= open->windowEnd || s.step < g.first || open->seen == m_warmup || diverges))
      close(*open);
    if (g.count == 0) {
      const std::int64_t span = core::stepGroupSpan(s.step);
      open->windowEnd = s.step - s.step % span + span;
    }
    g.add(s);
    open->record.step = s;
    ++open->seen;
  }
  void close(Open& o) {
    append(o.record);
    o.record.group = core::StepGroup{};
  }
  void append(const core::Record& r) {
    if (m_binary)
      core::encodeRecord(r, m_buffer);
    else
      core::formatRecord(r, m_buffer);
  }
  // The step records held go to the step file, then the groups that tell of them to the buffer.
  void writeSteps() {
    if (!m_steps || m_failed) return;
    m_failed = !m_steps->flush();
    for (auto& o : m_open)
      if (o.record.group.count > 0) close(o);
  }
  void flushLocked(std::chrono::steady_clock::time_point now) {
    writeSteps();
    const char* p = m_buffer.data();
    std::size_t left = m_buffer.size();
    while (left > 0) {
      ssize_t n = ::write(m_fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // launcher gone: the death signal ends us
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    m_buffer.clear();
    m_lastFlush = now;
    m_held = 0;
  }
  // 250 ms of a small model's rank stepping flat out; with one frame more, still within the
  // launcher's 1 MiB pipe.
  static constexpr std::size_t kFlushBytes = 896 * 1024;
  // Note [Hand-over of slow steps]: at most this many step records, this long after the last
  // batch, leave at once.
  static constexpr auto kSoon = std::chrono::milliseconds(20);
  static constexpr std::int64_t kFewRecords = 16;
  const int m_fd;
  const bool m_binary;
  const std::unique_ptr<StepFile> m_steps;  ///< null: step records go to the pipe
  const std::int64_t m_warmup;              ///< a group ends after this many step records of its rank
  bool m_failed = false;                    ///< the step file could not be written
  bool m_stepsPass = true;                  ///< each step record passes its step (passed())
  std::vector<Open> m_open;                 ///< one per rank this process reports for
  std::mutex m_mutex;
  std::string m_buffer;
  std::int64_t m_held = 0;  ///< step records since the last batch left
  std::atomic<std::int64_t> m_lastStep{0};
  std::atomic<std::int64_t> m_parameters{0};
  std::chrono::steady_clock::time_point m_lastFlush = std::chrono::steady_clock::now();
};

// Note [Metrics in phases]
// What monitoring costs, measured within one run (bench_monitoring phases): with the
// hidden worker flag --metrics-phases MS:FILE, a rank of a run whose metrics are on sends its step records
// in the even phases of MS milliseconds of the monotonic clock (the same phases for every
// rank of the machine) and passes them over in the odd ones, as run.metrics false does;
// the supervisor, the store and the window then have nothing to take either, but are
// there. The run's own changes of speed (larger from run to run than what monitoring costs,
// and which paired whole runs cannot cancel) are then the same on both sides of a phase
// boundary. Every 16th step
// in both kinds of phase reads the clock. A rank sends what it holds as a phase of sending
// ends, so that the others take it at once, not seconds into the next phase. At a phase's
// start, and 300 ms into it (past that hand-over), the rank notes its step and the time,
// and writes the notes to FILE.rankR when it ends: "start|settled PHASE STEP SECONDS"
// lines. Not for users: the records of the odd phases are never stored.
class MetricsPhases {
 public:
  /// Null when `spec` (the value of --metrics-phases) is empty; throws when it is malformed.
  static std::unique_ptr<MetricsPhases> fromFlag(const std::string& spec, int rank) {
    if (spec.empty()) return nullptr;
    const auto colon = spec.find(':');
    char* end = nullptr;
    const long ms = colon == std::string::npos ? 0 : std::strtol(spec.c_str(), &end, 10);
    PTW_CHECK(ms >= 1000 && end == spec.c_str() + colon && colon + 1 < spec.size(),
              "--metrics-phases: expected MS:FILE with MS >= 1000, got \"", spec, "\"");
    return std::make_unique<MetricsPhases>(ms, spec.substr(colon + 1) + ".rank" + std::to_string(rank));
  }
  MetricsPhases(long ms, std::string path) : m_phaseNs(ms * 1000000LL), m_path(std::move(path)) {}
  ~MetricsPhases() {
    if (std::FILE* f = std::fopen(m_path.c_str(), "w")) {
      for (const auto& n : m_notes)
        std::fprintf(f, "%s %lld %lld %.6f\n", n.settled ? "settled" : "start", n.phase, static_cast<long long>(n.step),
                     static_cast<double>(n.ns) / 1e9);
      std::fclose(f);
    }
  }
  /// Sends step record `r` to `writer` in a phase of sending, else passes it over.
  void offer(const core::Record& r, RecordWriter& writer) {
    const bool was = m_on;
    if ((++m_calls & 15) == 1) check(r.step.step);
    if (m_on) return writer.write(r);
    if (was) writer.flush();
    writer.passed(r.step.step);
  }

 private:
  struct Note {
    bool settled;
    long long phase;
    std::int64_t step;
    long long ns;
  };
  void check(std::int64_t step) {
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    const long long ns = static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
    const long long phase = ns / m_phaseNs;
    if (phase != m_phase) {
      const bool whole = m_phase >= 0;  // the first phase a rank sees began before it
      if (whole) m_notes.push_back({false, phase, step, ns});
      m_phase = phase, m_started = ns, m_settled = !whole, m_on = phase % 2 == 0;
    }
    if (!m_settled && ns - m_started >= 300000000LL) {
      m_notes.push_back({true, phase, step, ns});
      m_settled = true;
    }
  }
  const long long m_phaseNs;
  const std::string m_path;
  std::uint64_t m_calls = 0;
  long long m_phase = -1, m_started = 0;
  bool m_on = true, m_settled = true;
  std::vector<Note> m_notes;
};

// Note [Injected faults]
// For the supervisor's tests, the hidden flag --fault SPEC: throw-at-start:R fails rank R
// at start; kill-at-step:R:S kills rank R (SIGKILL) after step S of the first attempt, so
// a restart can be seen to recover; hang-at-step:R:S makes rank R stop after step S of the
// first attempt, alive and heartbeating, as a rank stuck in its own work (the others wait
// for it); slow-at-step:R:S:FACTOR makes rank R take FACTOR times its own time (data and
// compute, the excess in its data time) for each step from S on, every attempt, as a rank
// on a slower node would: the straggler its peers wait for. Every rank gets the same SPEC
// (core::InjectedFault); only rank R acts on it. Synthetic ranks act on them too (Note
// [Synthetic ranks] in engine/synthetic_ranks.h).

// The worker's flags, with the place that a standard launcher's variables give a rank it
// started (Note [Started by a standard launcher]).
struct Args : core::WorkerInvocation {
  std::string launchedBy = "";  ///< "" (flags: ptw's launcher, or by hand), "torchrun", "SLURM", "Open MPI"
  int localRank = -1;           ///< -1: the rank
  int localWorld = 0;           ///< 0: not known
};

// Note [Started by a standard launcher]
// With neither --rank nor --world, ptw-worker takes its place from the variables torchrun,
// SLURM or Open MPI set (common/launcher_env.h, Note [Launcher precedence]): the ranks meet
// at a TCPStore that rank 0 hosts on MASTER_ADDR:MASTER_PORT (LibTorch 1.13's listens on
// every interface), cuda:LOCAL_RANK is the rank's device, and with no launcher of ptw's to
// read them the records go to stdout as text lines (the mode of a worker run by hand).
void placeFromEnvironment(Args& a) {
  const auto place = core::rankFromEnvironment(core::processEnvironment());
  PTW_CHECK(place,
            "--rank and --world are required, unless torchrun, srun or mpirun started ptw-worker (none of RANK, "
            "SLURM_PROCID, OMPI_COMM_WORLD_RANK is set); see docs/multihost.md");
  a.launchedBy = core::launcherName(place->launcher);
  a.rank = place->rank;
  a.world = place->world;
  a.localRank = place->localRank;
  a.localWorld = place->localWorld;
  a.master = place->masterAddr;
  if (a.port == 0) a.port = place->masterPort;  // --port, given, wins
}

// Checks that a run a standard launcher started can run `p`, as ptw's own launcher would
// have started it; DDP's automatic backend on CPU (shared memory) becomes Gloo where the
// ranks are not all on one host.
void fitToLauncher(const Args& a, core::Profile& p) {
  if (a.launchedBy.empty()) return;
  const int expected = core::processCount(p);
  PTW_CHECK(a.world == expected, a.launchedBy, " started ", a.world, " rank(s), but the profile's strategy ",
            p.strategy.kind, " runs ", expected, " process(es) (strategy.ranks ", p.strategy.ranks, "); start ",
            expected, ", or set strategy.ranks to fit");
  if (a.world == 1 || a.localWorld == a.world) return;  // one host: all that ptw's launcher runs works
  const core::StrategyInfo* strategy = core::findStrategy(p.strategy.kind);
  PTW_CHECK(strategy && strategy->acrossHosts, "strategy.kind: ", p.strategy.kind,
            " runs on one host only, and these ranks are not all on one (", a.launchedBy, "); use ",
            core::acrossHostsStrategies(), ", or start every rank on one host");
  PTW_CHECK(!strategy->runsCommand, "strategy.kind: command ranks started by ", a.launchedBy,
            " must all be on one host, and these are not; across hosts use hosts.launcher \"ssh\"");
  PTW_CHECK(p.strategy.backend != "shm", "strategy.backend: \"shm\" needs every rank on one host, and these are not (",
            a.launchedBy, "); use \"gloo\" (CPU) or \"nccl\" (CUDA)");
  if (p.strategy.backend == "auto" && p.strategy.device == "cpu") {
    p.strategy.backend = "gloo";
    if (a.rank == 0)
      std::fprintf(stderr, "[rank 0] strategy.backend auto: gloo, as the ranks span hosts (shared memory needs one)\n");
  }
}

// Completes the parsed flags from the process they came to: the record descriptor must be
// open, a rank that no flag places takes its place from a standard launcher's variables (Note
// [Started by a standard launcher]), and --interface reaches Gloo (Note [Gloo interface]) and
// NCCL through their variables, as torchrun's users set them. The one place the worker's
// environment meets its flags; then what the command's form needs is checked.
Args applyEnvironment(const core::WorkerInvocation& flags) {
  Args a;
  static_cast<core::WorkerInvocation&>(a) = flags;
  if (!a.interface.empty()) {
    ::setenv("GLOO_SOCKET_IFNAME", a.interface.c_str(), 1);
    ::setenv("NCCL_SOCKET_IFNAME", a.interface.c_str(), 1);
  }
  PTW_CHECK(a.records < 0 || ::fcntl(a.records, F_GETFD) != -1, "--records: descriptor ", a.records, " is not open");
  if (a.trainsRank() && !a.profile.empty() && a.rank < 0 && a.world < 0) placeFromEnvironment(a);
  a.checkComplete();
  return a;
}

// One JSON line per device (core::deviceLine): the CPU (with the OpenBLAS kernels ranks train
// with, "" when the BLAS is not OpenBLAS), then each CUDA device LibTorch sees.
core::WorkerExit printDevices() {
  core::DeviceInfo cpu;
  cpu.kind = "cpu";
  cpu.name = "CPU";
  cpu.cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  cpu.memoryBytes = static_cast<long long>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  cpu.openblasCore = openblasCore();
  std::fputs(core::deviceLine(cpu).c_str(), stdout);
#ifdef PTW_WITH_CUDA
  const int n = static_cast<int>(torch::cuda::device_count());
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    std::size_t freeBytes = 0, totalBytes = 0;
    cudaError_t status = cudaGetDeviceProperties(&prop, i);
    if (status == cudaSuccess) status = cudaSetDevice(i);
    if (status == cudaSuccess) status = cudaMemGetInfo(&freeBytes, &totalBytes);
    if (status != cudaSuccess) {  // not a device a rank could use: say why, list the others
      std::fprintf(stderr, "ptw-worker: cuda:%d: %s\n", i, cudaGetErrorString(status));
      continue;
    }
    core::DeviceInfo gpu;
    gpu.kind = "cuda";
    gpu.index = i;
    gpu.name = prop.name;
    gpu.memoryBytes = static_cast<long long>(totalBytes);
    gpu.usedBytes = static_cast<long long>(totalBytes - freeBytes);
    std::fputs(core::deviceLine(gpu).c_str(), stdout);
  }
#endif
  return core::WorkerExit::Finished;
}

// Loads the data and the model, checks that they fit, and prints their shapes; for image
// data and a `samples` file, writes sample images there (sample_grid.h).
core::WorkerExit preflight(const core::Profile& profile, const std::string& samples) {
  Dataset data = makeDataset(profile.data, profile.model);
  auto model = makeModel(profile.model, profile.hyper.seed);
  model->setInputShape(data.sampleShape);
  checkWorkload(*model, data, profile);
  torch::NoGradGuard noGrad;
  // In eval mode, as checkWorkload: BatchNorm in training mode refuses a batch of one sample
  // where it reduces to one value per channel (ResNet-18's last block on 32×32 images).
  model->setTraining(false);
  auto out = model->forward(data.x.narrow(0, 0, 1));
  std::int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  auto dims = [](c10::IntArrayRef s) {
    std::string o = "[";
    for (std::size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + "]";
  };
  std::string grid = "null";
  if (!samples.empty() && data.sampleShape.size() == 3) {
    const auto image = sampleGrid(data, profile.data, SampleGridOptions(profile.hyper.seed).count(16).columns(4));
    writePng(image, samples);
    grid = std::to_string(std::min<std::int64_t>(16, data.size()));
  }
  std::printf(
      "{\"train_samples\": %lld, \"val_samples\": %lld, \"input\": %s, \"output\": %s, "
      "\"classification\": %s, \"parameters\": %lld, \"sample_images\": %s}\n",
      static_cast<long long>(data.size()), static_cast<long long>(data.valSize()),
      dims(data.sampleShape.empty() ? data.x.sizes().slice(1) : c10::IntArrayRef(data.sampleShape)).c_str(),
      dims(out.sizes().slice(1)).c_str(), data.classification ? "true" : "false", static_cast<long long>(params),
      grid.c_str());
  return core::WorkerExit::Finished;
}

// Note [Remote ranks] in launch/ssh_starter.h: the records go to stdout, which is the
// connection back to the launcher; whatever else writes to stdout (a library) goes to stderr
// with the log. stdin is the control line: "stop" stops the rank as SIGTERM does, and its end
// of file (the connection gone) ends the rank at once, for no one reads its records any more.
void becomeRemote(Args& a) {
  const int records = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
  PTW_CHECK(records >= 0 && ::dup2(2, 1) == 1, "--remote: cannot set up the record stream: ", std::strerror(errno));
  a.records = records;
  PTW_CHECK(::access(a.profile.c_str(), R_OK) == 0, "the run's profile ", a.profile, " is not readable on host ",
            a.remote,
            ": ptw's slurm launcher needs the run folder on a filesystem the hosts share, at the same path "
            "(docs/multihost.md)");
  std::thread([host = a.remote] {
    std::string line;
    char c;
    for (;;) {
      const ssize_t n = ::read(0, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (c != '\n') {
        if (line.size() < 64) line += c;
        continue;
      }
      if (line == "stop") g_stop.store(true);
      if (line == "stacks") NativeStacks::request();  // Note [Native stacks]
      line.clear();
    }
    std::fprintf(stderr, "error: ptw-worker on %s: the connection to the launcher is gone; exiting\n", host.c_str());
    std::fflush(stderr);
    ::_exit(core::exitCode(core::WorkerExit::Failed));
  }).detach();
}

// SIGTERM and SIGINT ask for a graceful stop; returns them as a set.
sigset_t installStopHandlers() {
  struct sigaction sa {};
  sa.sa_sigaction = onStopSignal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  // A stop that came while this program executed itself again (Note [BLAS kernels]) was held
  // back for the new image: it arrives here.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGTERM);
  sigaddset(&stopSignals, SIGINT);
  ::pthread_sigmask(SIG_UNBLOCK, &stopSignals, nullptr);
  return stopSignals;
}

// --check-port: what the check before a run across hosts asks of rank 0's host (preflight.h).
core::WorkerExit checkPort(int port) {
  const int asked = port;
  const std::string problem = core::listenProblem(port);
  if (!problem.empty()) {
    std::fprintf(stderr, "cannot open port %d: %s\n", asked, problem.c_str());
    return core::WorkerExit::Failed;
  }
  std::printf("%d\n", port);
  return core::WorkerExit::Finished;
}

// Parses the arguments, takes the best BLAS kernels, and answers the commands that do not
// train (--help, --version, --devices, --blas, --check-port, --preflight). Returns their exit
// code, or nothing to train.
std::optional<core::WorkerExit> prepare(int argc, char** argv, const sigset_t& stopSignals, Args& args,
                                        core::Profile& profile) {
  try {
    const auto flags = core::WorkerInvocation::parse(argc, argv);
    if (flags.help) {
      std::fputs(core::WorkerInvocation::usage().c_str(), stdout);
      return core::WorkerExit::Finished;
    }
    if (flags.version) {  // what ptw's hosts check compares (docs/multihost.md)
      std::printf("ptw-worker %s\n", kVersion);
      return core::WorkerExit::Finished;
    }
    args = applyEnvironment(flags);
    if (args.checkPort >= 0) return checkPort(args.checkPort);
    if (!args.preflight) {  // Note [BLAS kernels]; a stop now waits for the new image, which unblocks it
      ::pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
      const std::string who = args.rank >= 0 ? "[rank " + std::to_string(args.rank) + "]" : "ptw-worker:";
      if (!g_stop) rerunWithBetterBlasKernels(argv, who);
      ::pthread_sigmask(SIG_UNBLOCK, &stopSignals, nullptr);
    }
    if (!args.remote.empty()) becomeRemote(args);  // after the BLAS re-exec: once, in the image that trains
    if (args.devices) return printDevices();
    if (args.blas) {
      std::printf("{\"openblas_core\": \"%s\"}\n", openblasCore().c_str());
      return core::WorkerExit::Finished;
    }
    profile = core::loadProfile(args.profile);
    // Note [Agent profile] in launch/host_agent.h: the profile the host agent handed down
    // is this rank's to read, not its program's to inherit.
    if (int fd = -1; std::sscanf(args.profile.c_str(), "/proc/self/fd/%d", &fd) == 1 && fd > 2)
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (args.preflight) return preflight(profile, args.samples);
    fitToLauncher(args, profile);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
    return core::WorkerExit::BadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return core::WorkerExit::BadInput;
  }
  return std::nullopt;
}

// Tells the launcher every second that this rank lives, and what it does: `state()`.
class Heartbeat {
 public:
  Heartbeat(RecordWriter& writer, int rank, std::function<const char*()> state)
      : m_thread([this, &writer, rank, state = std::move(state)] {
          std::unique_lock<std::mutex> lock(m_mutex);
          while (!m_wake.wait_for(lock, std::chrono::seconds(1), [&] { return m_finished; }))
            writer.heartbeat(rank, state());
        }) {}
  ~Heartbeat() { stop(); }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  void stop() {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_finished = true;
    }
    m_wake.notify_all();
    if (m_thread.joinable()) m_thread.join();
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_finished = false;
  std::thread m_thread;  ///< last: starts once the members it uses are made
};

// Where the trainer's records go: to `writer` as run.metrics and --metrics-phases say; and
// the injected kill or hang (Note [Injected faults]) after its step.
Trainer::RecordSink recordSink(const core::Profile& profile, RecordWriter& writer, MetricsPhases* phases,
                               std::int64_t killAtStep, std::int64_t hangAtStep) {
  return [&profile, &writer, phases, killAtStep, hangAtStep](const core::Record& r) {
    const bool step = r.kind == core::Record::Kind::Step;
    if (profile.run.metrics && step && phases)
      phases->offer(r, writer);
    else if (profile.run.metrics || r.kind == core::Record::Kind::Done)
      writer.write(r);
    else if (step)
      writer.passed(r.step.step);
    if (step && r.step.step == killAtStep) {
      writer.flush();
      ::raise(SIGKILL);
    }
    if (step && r.step.step == hangAtStep) {
      writer.flush();
      hangInOwnWork();
    }
  };
}

// Trains, saves the results, and reports the end; returns the exit code.
core::WorkerExit trainRank(const Args& args, const core::Profile& profile, RecordWriter& writer,
                           MetricsPhases* phases) {
  const int rank = args.rank;
  const bool faulty = args.fault.rank == rank && args.attempt == 0;
  const std::int64_t killAtStep = faulty && args.fault.kind == "kill-at-step" ? args.fault.step : -1;
  const std::int64_t hangAtStep = faulty && args.fault.kind == "hang-at-step" ? args.fault.step : -1;
  try {
    std::fprintf(stderr, "[rank %d] %s: %s, world %d, port %d\n", rank, profile.name.c_str(),
                 profile.strategy.kind.c_str(), args.world, args.port);
    if (!args.launchedBy.empty())
      std::fprintf(stderr, "[rank %d] placed by %s: local rank %d, master %s:%d\n", rank, args.launchedBy.c_str(),
                   args.localRank, args.master.c_str(), args.port);
    if (args.fault.kind == "hang-at-start" && args.fault.rank == rank && args.attempt == 0)
      for (;;) ::pause();  // before the rendezvous, heartbeats going on: a rank that never joins
    SyncContext ctx{profile, rank, args.world, args.port, args.store, args.master, args.localRank};
    auto strategy = makeStrategy(ctx);
    strategy->setGradientsByHand(!args.autogradOnly);
    TrainerOptions options(profile, rank, args.world);
    options.setOutDir(args.out);
    if (args.fault.kind == "slow-at-step" && args.fault.rank == rank)
      options.setSlowdown(args.fault.factor, args.fault.step);
    Trainer trainer(std::move(options), std::move(strategy),
                    recordSink(profile, writer, phases, killAtStep, hangAtStep));
    std::int64_t parameters = 0;
    for (const auto& p : trainer.parameters()) parameters += p.numel();
    writer.setParameters(parameters);
    writer.heartbeat(rank, "train");  // the window shows the model's size before the first step
    const auto trainStart = std::chrono::steady_clock::now();
    std::int64_t steps = trainer.run(g_stop);
    const double trainS = std::chrono::duration<double>(std::chrono::steady_clock::now() - trainStart).count();
    if (!args.out.empty()) {
      torch::save(trainer.parameters(), args.out + "/rank" + std::to_string(rank) + ".final.pt");
      if (rank == 0) trainer.model().save(args.out + "/model.final.pt");
    }
    core::Record done;
    done.kind = core::Record::Kind::Done;
    done.step.rank = rank;
    done.step.step = steps;
    writer.write(done);
    const char* gradients = trainer.gradients();
    std::fprintf(stderr, "[rank %d] %s after %lld steps in %.3f s (%.1f steps/s)%s%s\n", rank,
                 g_stop ? "stopped" : "finished", static_cast<long long>(steps), trainS,
                 trainS > 0 ? static_cast<double>(steps) / trainS : 0.0, gradients ? "; gradients " : "",
                 gradients ? gradients : "");
    if (const int by = g_stoppedBy.load()) {
      const std::string who = by > 0 ? "process " + std::to_string(by) : std::string("the kernel");
      std::fprintf(stderr, "[rank %d] the stop signal came from %s, not from ptw\n", rank, who.c_str());
      return core::WorkerExit::StoppedFromOutside;
    }
    return core::WorkerExit::Finished;
  } catch (const MetricsNotStored& e) {
    std::fprintf(stderr, "error: [rank %d] %s\n", rank, e.what());
    return core::WorkerExit::CannotStoreMetrics;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: [rank %d] %s\n", rank, e.what_without_backtrace());
    return core::WorkerExit::Failed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: [rank %d] %s\n", rank, e.what());
    return core::WorkerExit::Failed;
  }
}

// A rank of the command strategy: the profile's program, reporting through `writer` (Note
// [Script ranks] in common/command.h).
core::WorkerExit commandRank(const Args& args, const core::Profile& profile, RecordWriter& writer,
                             std::atomic<bool>& reported) {
  ScriptRank script{profile,
                    args.rank,
                    args.world,
                    args.port,
                    args.out,
                    g_stop,
                    g_stoppedBy,
                    [&](const core::Record& r) { writer.write(r); },
                    [&](std::int64_t step) { writer.passed(step); },
                    reported,
                    args.attempt};
  try {
    // Across hosts, torchrun's multi-node numbering; the ranks meet on the address the
    // launcher gave (--master).
    if (const auto hosts = core::rankHosts(profile); !hosts.empty()) {
      script.place = core::placeRank(hosts, args.rank);
      script.masterAddr = args.master;
    }
    return runScriptRank(script);
  } catch (const MetricsNotStored& e) {
    std::fprintf(stderr, "error: [rank %d] %s\n", args.rank, e.what());
    return core::WorkerExit::CannotStoreMetrics;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: [rank %d] %s\n", args.rank, e.what());
    return core::WorkerExit::Failed;
  }
}

// The synthetic ranks this process stands for (Note [Synthetic ranks]): process p of the
// run's has ranks [p·K, (p+1)·K), K the strategy's ranks a process.
core::WorkerExit syntheticRanks(const Args& args, const core::Profile& profile, RecordWriter& writer) {
  const int perProcess = core::strategyOf(profile).ranksPerProcess;
  const int first = args.rank * perProcess;
  const int end = std::min(profile.strategy.ranks, first + perProcess);
  SyntheticOptions options(first, end, profile.hyper.maxSteps);
  options.setRate(args.syntheticRate > 0 ? args.syntheticRate : core::kDefaultSyntheticRate).setFault(args.fault);
  options.batchSize = profile.hyper.batchSize;
  options.lr = profile.hyper.lr;
  options.seed = profile.hyper.seed;
  options.attempt = args.attempt;
  SyntheticRanks ranks(options);
  writer.passedOnlyByHand();
  std::fprintf(stderr, "[rank %d] %s: synthetic ranks %d-%d of %d at %g steps/s each\n", args.rank,
               profile.name.c_str(), first, end - 1, profile.strategy.ranks, options.rate);
  writer.heartbeat(first, "train");
  Heartbeat heartbeat(writer, first, [] { return "train"; });
  try {
    ranks.run(
        g_stop, [&writer](const core::Record& r) { writer.write(r); }, [&writer](std::int64_t s) { writer.passed(s); });
  } catch (const MetricsNotStored& e) {
    std::fprintf(stderr, "error: [rank %d] %s\n", args.rank, e.what());
    return core::WorkerExit::CannotStoreMetrics;
  }
  heartbeat.stop();
  writer.flush();
  // The benchmark's count of what was sent (tests/bench/bench_scale.sh).
  std::fprintf(stderr, "[rank %d] synthetic ranks %d-%d sent %lld step records\n", args.rank, first, end - 1,
               static_cast<long long>(ranks.sent()));
  return core::WorkerExit::Finished;
}

// One rank of a run: its step file, record writer and heartbeat around trainRank.
core::WorkerExit runRank(const Args& args, const core::Profile& profile) {
  const int rank = args.rank;
  if (args.fault.kind == "throw-at-start" && args.fault.rank == rank) {
    std::fprintf(stderr, "error: injected fault at start (--fault)\n");
    return core::WorkerExit::Failed;
  }
  torch::set_num_threads(profile.run.threadsPerRank);
  setBlasThreads(profile.run.threadsPerRank);  // Note [BLAS threads]
  std::unique_ptr<StepFile> stepFile;
  if (!args.steps.empty() && profile.run.metrics)
    stepFile = std::make_unique<StepFile>(args.steps, args.attempt, args.stepsLimit, profile.run);
  if (stepFile && !stepFile->error().empty()) {
    std::fprintf(stderr, "error: [rank %d] %s\n", rank, stepFile->error().c_str());
    return core::WorkerExit::CannotStoreMetrics;
  }
  RecordWriter writer(args.records, std::move(stepFile), core::warmupSteps(profile));
  std::unique_ptr<MetricsPhases> phases;  // Note [Metrics in phases]
  try {
    phases = MetricsPhases::fromFlag(args.metricsPhases, rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: [rank %d] %s\n", rank, e.what());
    return core::WorkerExit::BadInput;
  }
  // A program's Python answers for itself (Note [Python stacks]). PTW_STACKS_HANDLER=off is for
  // measures only: what a healthy run pays for the handler (tests/bench/monitoring_pairs.sh).
  const char* handler = std::getenv("PTW_STACKS_HANDLER");
  if (!core::strategyOf(profile).runsCommand && !(handler && std::strcmp(handler, "off") == 0))
    NativeStacks::install(core::nativeStacksFile(args.out, rank, static_cast<long>(::getpid())));
  if (core::strategyOf(profile).synthetic) return syntheticRanks(args, profile, writer);
  if (core::strategyOf(profile).runsCommand) {
    std::atomic<bool> reported{false};  // until then the stall timeout leaves the rank be
    writer.heartbeat(rank, "quiet");    // at once: a program's start-up is not a stall
    Heartbeat heartbeat(writer, rank, [&reported] { return reported.load() ? "train" : "quiet"; });
    const core::WorkerExit code = commandRank(args, profile, writer, reported);
    heartbeat.stop();
    writer.flush();
    return code;
  }
  Heartbeat heartbeat(writer, rank,
                      [] { return waitingForPeers().load(std::memory_order_relaxed) ? "comm" : "train"; });
  const core::WorkerExit code = trainRank(args, profile, writer, phases.get());
  heartbeat.stop();
  writer.flush();
  return code;
}

}  // namespace

void hangInOwnWork() {
  for (;;) ::pause();  // busy on its own, heartbeats going on: a hang the peers wait for
}

int workerMain(int argc, char** argv) {
  // Where Yama allows ptrace only to ancestors, the launcher's gdb is no ancestor of a rank:
  // the launcher and what it starts may attach to take this rank's stack (StackCollector).
  ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(::getppid()), 0, 0, 0);
  const sigset_t stopSignals = installStopHandlers();
  Args args;
  core::Profile profile;
  if (const auto code = prepare(argc, argv, stopSignals, args, profile)) return core::exitCode(*code);
  return core::exitCode(runRank(args, profile));
}

}  // namespace ptw::engine
