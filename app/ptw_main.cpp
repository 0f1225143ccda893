// SPDX-License-Identifier: GPL-3.0-or-later
// ptw: the workbench. Opens the window when a display is available, or runs a profile
// headless (for CI, or on a machine without a display).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "common/strategies.h"
#include "common/version.h"
#include "launch/control_channel.h"
#include "launch/follow_source.h"
#include "launch/follow_stream.h"
#include "launch/headless.h"
#include "launch/run_directory.h"
#include "launch/run_follower.h"
#include "launch/run_store.h"
#include "launch/slurm_job.h"
#include "launch/sweep.h"
#include "launch/tensorboard_export.h"

#ifdef PTW_WITH_GUI
#include "ui/gui_main.h"
#endif

namespace {

#ifdef PTW_WITH_GUI
// A screen a window would be seen on: X11, Wayland, or a Qt platform chosen by the user
// that shows one (vnc, eglfs, ...). offscreen and minimal draw nowhere: a window there is
// only for --start and --screenshot, which ask for it.
bool displayAvailable() {
  for (const char* v : {"DISPLAY", "WAYLAND_DISPLAY"})
    if (const char* s = std::getenv(v); s && *s) return true;
  const std::string qpa = std::getenv("QT_QPA_PLATFORM") ? std::getenv("QT_QPA_PLATFORM") : "";
  return !qpa.empty() && qpa.rfind("offscreen", 0) != 0 && qpa.rfind("minimal", 0) != 0;
}

bool qtPlatformChosen() {
  const char* qpa = std::getenv("QT_QPA_PLATFORM");
  return qpa && *qpa;
}
#endif

// Progress on stderr, run by run, as a large run's step records become chunks (Note [Step
// blocks]): packed from its step file, or converted from a store of an earlier build.
std::function<void(std::int64_t, std::int64_t, std::int64_t)> progressByRun() {
  auto reporters = std::make_shared<std::map<std::int64_t, std::function<void(std::int64_t, std::int64_t)>>>();
  return [reporters](std::int64_t run, std::int64_t done, std::int64_t total) {
    auto& report = (*reporters)[run];
    if (!report) report = ptw::core::packReporter(std::cerr, "step records of run " + std::to_string(run));
    report(done, total);
  };
}

// The store of an existing runs directory, as `ptw runs` and `ptw export` open it.
ptw::core::RunStoreOptions existingStoreOptions() {
  return ptw::core::RunStoreOptions().setConversionProgress(progressByRun());
}

// Interrupted runs' step records are packed into chunks, with progress on stderr for a long
// run's; where that fails (a full disk) they are still read, so this only says so.
void packEnded(ptw::core::RunStore& store) {
  try {
    store.packEndedRuns(progressByRun());
  } catch (const ptw::Error& e) {
    std::fprintf(stderr, "ptw: %s\n", e.what());
  }
}

// What the subcommands take.
struct ExportArgs {
  std::int64_t runId = 0;
  std::string format = "csv";
  std::string out, csv, runsDir;  ///< out: the positional FILE or DIR; csv: --csv FILE
};
struct FollowArgs {
  std::string run, runsDir, format = "frames", profile;
  std::int64_t fromStep = std::numeric_limits<std::int64_t>::min();
  int pollMs = 150;
};
struct StopArgs {
  std::string run, runsDir, profile;
};
struct SubmitArgs {
  std::string profile, runsDir;
  std::vector<std::string> sets;
};
struct SweepArgs {
  std::string profile, csv, json, runsDir;
  std::vector<std::string> strategies, sets;
  std::vector<int> workers{1, 2};
  std::int64_t steps = 200;
  double minEfficiency = 0;
};

// The options of a run, headless or in the window.
void addRunOptions(CLI::App& app, ptw::core::HeadlessOptions& opts, bool& headless) {
  app.add_flag("--headless", headless,
               "Run the profile without a window and exit with a status code (the default when no display "
               "is available)");
  // Also positional (`ptw FILE`): how a file manager opens a profile (the desktop entry's %f). A
  // missing file is said by loadProfile, as in the window.
  app.add_option("profile,-p,--profile", opts.profilePath,
                 "Profile to open or run (JSON), given with -p or as the only argument; default: the built-in "
                 "seed workload, DDP on 2 CPU ranks");
  app.add_option("--set", opts.overrides,
                 "Override a profile field by its path, e.g. --set hyper.lr=0.05 --set strategy.ranks=4 "
                 "(repeatable; validated like the file)");
  app.add_option("--runs-dir", opts.runsDir,
                 "Where run folders are written (default: $PTW_RUNS_DIR, else $XDG_DATA_HOME/ptw/runs, else "
                 "~/.local/share/ptw/runs)");
  app.add_option("--expect", opts.expectations,
                 "Assert a result, e.g. --expect 'final.loss < 0.05' --expect 'throughput.samples_per_s > 1000' "
                 "(repeatable; metrics: final.loss, final.val_loss, final.val_accuracy, final.step, "
                 "throughput.samples_per_s, throughput.steps_per_s, wall_s)");
  app.add_option("--summary", opts.summaryPath,
                 "Write a JSON summary (status, final metrics, per-rank throughput and step split, wall time, "
                 "expectations) to FILE");
  app.add_option("--junit", opts.junitPath, "Write JUnit XML (one test case for the run, one per --expect) to FILE");
  // Hidden (no group, so not in --help): extra worker arguments for tests and benchmarks,
  // e.g. --worker-arg=--fault=kill-at-step:1:12.
  app.add_option("--worker-arg", opts.workerArgs, "Append ARG to every worker's command line (repeatable)")->group("");
  // The folder `ptw submit` made, which its job's run runs in (Note [Submitted runs]).
  app.add_option("--run-folder", opts.runFolder, "")->group("");
  // The disk-full tests' cap on the run store, in KiB: not for users, so not in --help.
  app.add_option("--store-limit-kib", opts.storeLimitKib, "")->group("")->check(CLI::NonNegativeNumber);
}

CLI::App* addSweepCommand(CLI::App& app, SweepArgs& a) {
  auto* sweepCmd = app.add_subcommand(
      "sweep",
      "Run a profile under several strategies and worker counts for a fixed number of steps; print "
      "throughput, scaling efficiency (throughput / (workers x Single)) and the share of a step spent "
      "waiting for other ranks and reducing gradients, the fastest marked *. A command profile (your own "
      "program) runs with each worker count as its number of processes (strategy.ranks), the one-process "
      "run as the baseline, at the samples/s your program reports (its steps/s where it reports none)");
  // The table of strategies names the sweep's variants, its baseline and what runs by default;
  // the defaults are filled in once the profile is read (none for a command profile).
  std::string sweepNames, sweepDefaults;
  for (const auto& v : ptw::core::sweepVariants()) {
    sweepNames += (sweepNames.empty() ? "" : ", ") + v.name;
    if (v.baseline || !v.byDefault) continue;
    sweepDefaults += (sweepDefaults.empty() ? "" : ",") + v.name;
  }
  sweepCmd->add_option("-p,--profile", a.profile, "Profile (default: the built-in seed workload)");
  sweepCmd->add_option("--set", a.sets, "Override a profile field, as for a run (repeatable)");
  sweepCmd
      ->add_option("--strategies", a.strategies,
                   "Comma-separated: " + sweepNames + " (" + ptw::core::sweepBaseline().name +
                       " always runs as the baseline; ddp is DDP as a profile runs it, backend auto; default " +
                       sweepDefaults + "). Not for a command profile, whose sweep varies --workers only")
      ->delimiter(',');
  sweepCmd
      ->add_option("--workers", a.workers,
                   "Comma-separated worker counts (default 1,2); of a command profile, its numbers of processes")
      ->delimiter(',');
  sweepCmd->add_option("--steps", a.steps,
                       "Steps per configuration (default 200): hyper.max_steps, which a command profile's program "
                       "gets where a template names {hyper.max_steps}");
  sweepCmd->add_option("--csv", a.csv, "Write the table as CSV to FILE");
  sweepCmd->add_option("--json", a.json, "Write the table as JSON to FILE");
  sweepCmd->add_option("--min-efficiency", a.minEfficiency,
                       "Fail (exit 4) when any configuration's scaling efficiency is below this (e.g. 0.8)");
  sweepCmd->add_option("--runs-dir", a.runsDir,
                       "Runs directory (default as above); every configuration is a stored run");
  return sweepCmd;
}

constexpr const char* kFooter =
    "Exit codes (headless):\n"
    "  0  the run finished\n"
    "  2  invalid input: profile, --set override, --expect, runs directory, port, worker program,\n"
    "     a host or SLURM node that fails the check before the run, or an output file (--summary,\n"
    "     --junit; --csv, --json of sweep)\n"
    "  3  training failed: a rank exited non-zero, died by a signal or stalled (after any\n"
    "     run.max_restarts), a loss was NaN with run.on_nan \"stop\", or the metrics store could\n"
    "     not be written (disk full)\n"
    "  4  the run finished but an --expect did not hold\n"
    "  5  interrupted: SIGINT, SIGTERM, SIGHUP or `ptw stop` stopped the run (or the sweep) gracefully\n"
    "`ptw follow` exits with the followed run's code (0, 3 or 5; 3 also for a run whose supervisor died), or 2\n"
    "for a run it cannot follow; `ptw stop` exits 0 once asked, or 2 (no such run, not running, another\n"
    "user's run); `ptw stacks` exits 0 once it printed them, or 2 (as stop, or none came within 20 s).\n"
    "\nEnvironment: PTW_RUNS_DIR (runs directory), PTW_WORKER (worker program; default: ptw-worker beside ptw, else "
    "../lib/ptw/ptw-worker from ptw's folder, as installed), "
    "OPENBLAS_CORETYPE (the OpenBLAS kernels ranks use; "
    "unset, OpenBLAS picks, and where it falls back to SSE3 on a newer CPU a rank takes the kernels the CPU "
    "supports).";

// Options of the run before a subcommand would be silently dropped: says so, and returns
// false.
bool runOptionsLeftOut(const CLI::App& app) {
  if (app.get_subcommands().empty()) return true;
  for (const char* name : {
           "--headless",
           "--profile",
           "--set",
           "--runs-dir",
           "--expect",
           "--summary",
           "--junit",
           "--worker-arg",
#ifdef PTW_WITH_GUI
           "--start",
           "--screenshot",
           "--screenshot-after",
#endif
       }) {
    if (app.get_option(name)->count() == 0) continue;
    const std::string sub = app.get_subcommands().front()->get_name();
    std::fprintf(stderr, "ptw: %s is an option of a run, not of `ptw %s`; %s\n", name, sub.c_str(),
                 sub == "sweep" || std::string(name) == "--runs-dir"
                     ? ("give it after the subcommand: ptw " + sub + " " + name + " ...").c_str()
                     : "leave it out");
    return false;
  }
  return true;
}

// A read-only command on a folder that holds no runs: a mistyped --runs-dir is said, not
// made into an empty store.
std::string existingRuns(const std::string& given) {
  const std::string dir = given.empty() ? ptw::core::defaultRunsDirectory() : given;
  PTW_CHECK(::access((dir + "/runs.sqlite").c_str(), F_OK) == 0, "runs directory ", dir,
            " holds no runs (no runs.sqlite there)",
            given.empty() ? "; nothing has run yet, or runs went to another --runs-dir"
                          : "; give the folder that runs were written to");
  return dir;
}

// The ssh options for a HOST:DIR runs directory: hosts.ssh_* of the profile given, else ssh's.
ptw::core::HostsSpec sshOptions(const std::string& profile) {
  return profile.empty() ? ptw::core::HostsSpec{} : ptw::core::loadProfile(profile).hosts;
}

// `ptw runs` and `ptw stop` for HOST:DIR: the host's ptw does it, through ssh. Its output is
// passed on; a refusal there (exit 2) is one here.
int onHost(const std::string& host, const std::string& profile, const std::vector<std::string>& args) {
  std::string output;
  const int code = ptw::core::runRemotePtw(sshOptions(profile), host, args, output);
  std::fwrite(output.data(), 1, output.size(), code == 0 ? stdout : stderr);
  return code;
}

int listRuns(const std::string& runsDir) {
  std::string host, dir;
  if (ptw::core::splitRemoteRunsDir(runsDir, host, dir)) return onHost(host, "", {"runs", "--runs-dir", dir});
  ptw::core::RunStore store(existingRuns(runsDir), existingStoreOptions());
  packEnded(store);
  std::printf("%5s  %-11s  %-20s  %-13s  %5s  %12s  %12s  %-7s  %s\n", "id", "status", "started (UTC)", "strategy",
              "world", "final loss", "samples/s", "version", "name");
  // A run of a build that did not record its version shows "-"; a value nobody reported (or
  // a run too short to measure) shows "–" (Note [Not reported]).
  auto cell = [](double v, const char* format) {
    char text[32];
    if (std::isnan(v))
      std::snprintf(text, sizeof text, "%11s%s", "", ptw::core::kNotReported);
    else
      std::snprintf(text, sizeof text, format, v);
    return std::string(text);
  };
  for (const auto& r : store.runs())
    std::printf("%5lld  %-11s  %-20s  %-13s  %5d  %12s  %12s  %-7s  %s\n", static_cast<long long>(r.id),
                r.status.c_str(), r.startedAt.c_str(), r.strategy.c_str(), r.world, cell(r.finalLoss, "%12.6g").c_str(),
                cell(r.samplesPerS, "%12.1f").c_str(), r.ptwVersion.empty() ? "-" : r.ptwVersion.c_str(),
                r.name.c_str());
  return 0;
}

// Everything the command line names is checked before the store is opened, and the run
// before anything is unpacked or written: a mistake changes nothing.
int exportRun(const ExportArgs& a) {
  const bool csv = a.format == "csv";
  if (csv) {
    PTW_CHECK(a.csv.empty() || a.out.empty(), "export: the CSV file is given twice (", a.out, " and --csv ", a.csv,
              "); give it once");
    PTW_CHECK(!a.csv.empty() || !a.out.empty(), "export: give the file to write: ptw export RUN FILE");
    ptw::core::checkOutputFile(a.csv.empty() ? a.out : a.csv, a.csv.empty() ? "export file" : "--csv");
  } else {
    PTW_CHECK(a.csv.empty(), "--csv ", a.csv, ": is for --format csv; give the folder for --format ", a.format,
              " after the run: ptw export --format ", a.format, " RUN DIR");
    PTW_CHECK(!a.out.empty(), "export: give the folder to write to: ptw export --format ", a.format, " RUN DIR");
    ptw::core::checkExportFolder(a.out);
  }
  ptw::core::RunStore store(existingRuns(a.runsDir), existingStoreOptions());
  store.run(a.runId);
  packEnded(store);
  const auto id = static_cast<long long>(a.runId);
  if (csv) {
    const std::string file = a.csv.empty() ? a.out : a.csv;
    const std::int64_t rows = store.exportCsv(a.runId, file);
    std::printf("ptw: run %lld: %lld rows written to %s\n", id, static_cast<long long>(rows), file.c_str());
    return 0;
  }
  const auto written = ptw::core::exportTensorBoard(store, a.runId, a.out);
  std::printf("ptw: run %lld: %lld scalars of %zu rank(s) written to %s; view them with: tensorboard --logdir %s\n", id,
              static_cast<long long>(written.scalars), written.files.size(), a.out.c_str(), a.out.c_str());
  return 0;
}

// `ptw follow --runs-dir HOST:DIR`: the stream the host's ptw follow writes, read through a
// FollowSource, which attaches again when the connection breaks (Note [Reattaching]), written
// on as this ptw's own follow writes it.
class ForwardingListener : public ptw::core::FollowSource::Listener {
 public:
  ForwardingListener(ptw::core::FollowStream& out, const ptw::core::FollowSource& source)
      : m_out(out), m_source(source) {}
  void onState(ptw::core::FollowSource::State state, const std::string& message) override {
    using State = ptw::core::FollowSource::State;
    if (state == State::Attached && !m_begun) {
      m_run.id = m_source.runId();
      m_run.dir = m_source.host() + ":" + m_source.dir();
      m_run.status = "running";
      m_out.begin(m_run);
      m_begun = true;
    } else if (state == State::Detached) {
      std::fprintf(stderr, "ptw: %s\n", message.c_str());
    } else if (state == State::Ended) {
      const auto tab = message.find('\t');
      m_run.status = message.substr(0, tab);
      m_run.message = tab == std::string::npos ? "" : message.substr(tab + 1);
    }
    m_out.flush();
  }
  void onRecords(std::vector<ptw::core::Record>& batch) override {
    for (const auto& r : batch) m_out.record(r);
    m_out.flush();
  }
  void onLog(int rank, const std::string& line) override {
    m_out.log(rank, line);
    m_out.flush();
  }
  const ptw::core::RunRow& run() const { return m_run; }

 private:
  ptw::core::FollowStream& m_out;
  const ptw::core::FollowSource& m_source;
  ptw::core::RunRow m_run;
  bool m_begun = false;
};

int followRemote(const FollowArgs& a, ptw::core::FollowStream& out) {
  ptw::core::FollowSource source(
      ptw::core::FollowSourceOptions(a.runsDir, a.run).setHosts(sshOptions(a.profile)).setFromStep(a.fromStep));
  ForwardingListener listener(out, source);
  const int code = source.follow(listener);
  out.end(listener.run(), code);
  out.flush();
  std::fprintf(stderr, "ptw: run %lld %s%s%s\n", static_cast<long long>(source.runId()), listener.run().status.c_str(),
               listener.run().message.empty() ? "" : ": ", listener.run().message.c_str());
  return code;
}

// Note [Following a run]: the run is checked (it exists, this version made it) before anything
// is written to stdout.
int followRun(const FollowArgs& a) {
  std::ios::sync_with_stdio(false);
  ptw::core::FollowStream out(std::cout, a.format == "jsonl" ? ptw::core::FollowStream::Format::Jsonl
                                                             : ptw::core::FollowStream::Format::Frames);
  std::string host, dir;
  if (ptw::core::splitRemoteRunsDir(a.runsDir, host, dir)) return followRemote(a, out);
  ptw::core::FollowOptions options(existingRuns(a.runsDir), a.run);
  options.setFromStep(a.fromStep).setPollInterval(std::chrono::milliseconds(a.pollMs));
  ptw::core::RunFollower follower(options);
  const int code = follower.follow(out);
  const auto& run = follower.run();
  std::fprintf(stderr, "ptw: run %lld %s%s%s\n", static_cast<long long>(run.id), run.status.c_str(),
               run.message.empty() ? "" : ": ", run.message.c_str());
  return code;
}

// Note [Control channel]. Only reads the store: the run's own supervisor records the stop.
constexpr const char* kStopHelp =
    "Ask a running run's supervisor to stop it gracefully, as Ctrl-C in its terminal would (the ranks are "
    "asked, then ended after the grace; every record is stored), through its run folder; only the user who "
    "started the run can (docs/follow.md)";
constexpr const char* kStacksHelp =
    "Print where every rank of a running run is: each rank's threads' frames (Python frames with file and line "
    "for a script's ranks; function names for ptw's own ranks, which write their own, gdb reading one that does "
    "not answer). Its supervisor takes them, in at most 10 s, and writes them to stacks-ATTEMPT.txt in the run "
    "folder; ptw's own ranks on other hosts started over ssh are asked on their connection, others are not "
    "taken (docs/stacks.md)";

// `ptw stop` and `ptw stacks`: a request to a running run's supervisor (Note [Control channel]).
CLI::App* addRunRequestCommand(CLI::App& app, StopArgs& args, const char* name, const char* description) {
  auto* cmd = app.add_subcommand(name, description);
  cmd->add_option("run", args.run, "Run id (see `ptw runs`), or latest: the newest run")->required();
  cmd->add_option("--runs-dir", args.runsDir,
                  "Runs directory (default as above); HOST:DIR for one on another host, asked through ssh");
  cmd->add_option("-p,--profile", args.profile,
                  "For a runs directory HOST:DIR: the profile whose hosts.ssh_* options reach HOST");
  return cmd;
}

// Note [Taking stacks]: the supervisor takes them and writes the file; this prints it.
int printStacks(const StopArgs& a) {
  std::string host, dir;
  if (ptw::core::splitRemoteRunsDir(a.runsDir, host, dir))
    return onHost(host, a.profile, {"stacks", a.run, "--runs-dir", dir});
  const std::string path = ptw::core::requestRunStacks(existingRuns(a.runsDir), a.run);
  std::ifstream in(path, std::ios::binary);
  std::cout << in.rdbuf() << std::flush;
  std::fprintf(stderr, "ptw: stacks written to %s\n", path.c_str());
  return 0;
}

int stopRun(const StopArgs& a) {
  std::string host, dir;
  if (ptw::core::splitRemoteRunsDir(a.runsDir, host, dir))
    return onHost(host, a.profile, {"stop", a.run, "--runs-dir", dir});
  const auto run = ptw::core::requestRunStop(existingRuns(a.runsDir), a.run);
  std::printf(
      "ptw: asked run %lld to stop; its ranks stop gracefully and every record is stored "
      "(`ptw runs` shows it stopped once it has)\n",
      static_cast<long long>(run.id));
  return 0;
}

void printSweepRow(const ptw::core::SweepPoint& p, int, int) {
  char efficiency[32] = "n/a";  // no baseline: Single did not finish
  if (!std::isnan(p.efficiency)) std::snprintf(efficiency, sizeof efficiency, "%.2f", p.efficiency);
  char rate[32] = "too short";  // to measure (Note [Warm-up steps]); the store holds NULL for it
  char steps[32] = "too short";
  if (p.measured) {
    std::snprintf(steps, sizeof steps, "%.1f", p.stepsPerS);
    // A program that reports no samples (Note [Sweeping a command]) has its steps/s alone.
    if (p.samplesReported)
      std::snprintf(rate, sizeof rate, "%.1f", p.samplesPerS);
    else
      std::snprintf(rate, sizeof rate, "not reported");
  }
  std::printf("%-14s %7d %14s %11s %9s %9.3f %7.1f  %s%s%s\n", p.strategy.c_str(), p.workers, rate, efficiency, steps,
              p.stepMs.stepMs, p.stepMs.commPercent(), p.status.c_str(), p.status == "finished" ? "" : ": ",
              p.status == "finished" ? "" : p.message.c_str());
  std::fflush(stdout);
}

// The sweep's exit code: a configuration that failed, or one below --min-efficiency.
int sweepVerdict(const std::vector<ptw::core::SweepPoint>& points, double minEfficiency) {
  const std::string baseline = ptw::core::sweepBaseline().name;
  bool failed = false, belowMin = false;
  for (const auto& p : points) {
    failed = failed || p.status != "finished";
    if (p.strategy != baseline && p.status == "finished" && !std::isnan(p.efficiency) && p.efficiency < minEfficiency) {
      belowMin = true;
      std::printf("ptw: %s with %d worker(s): efficiency %.2f is below --min-efficiency %.2f\n", p.strategy.c_str(),
                  p.workers, p.efficiency, minEfficiency);
    }
  }
  return failed ? ptw::core::kExitTrainingFailed : belowMin ? ptw::core::kExitExpectationFailed : 0;
}

int runSweep(const SweepArgs& a) {
  ptw::core::Profile base = a.profile.empty() ? ptw::core::defaultProfile() : ptw::core::loadProfile(a.profile);
  base = ptw::core::applyOverrides(base, a.sets);
  const auto strategies = a.strategies.empty() ? ptw::core::Sweep::defaultStrategies(base) : a.strategies;
  ptw::core::Sweep sweep(ptw::core::SweepOptions(base, strategies, a.workers).setSteps(a.steps).setRunsDir(a.runsDir));
  sweep.check();  // an invalid option is said before the table starts
  if (!a.csv.empty()) ptw::core::checkOutputFile(a.csv, "--csv");
  if (!a.json.empty()) ptw::core::checkOutputFile(a.json, "--json");
  std::printf("%-14s %7s %14s %11s %9s %9s %7s  %s\n", "strategy", "workers", "samples/s", "efficiency", "steps/s",
              "step ms", "comm %", "status");
  // Ctrl-C, SIGTERM or SIGHUP stops the configuration running now and skips the rest;
  // the configurations that ran are still printed and written.
  std::vector<ptw::core::SweepPoint> points;
  {
    ptw::core::StopOnSignals stop(sweep);
    points = sweep.run(printSweepRow);
  }
  const int best = ptw::core::Sweep::fastest(points);
  if (best >= 0)
    std::printf("* fastest: %s with %d worker(s), %.1f samples/s (run %lld)\n", points[best].strategy.c_str(),
                points[best].workers, points[best].samplesPerS, static_cast<long long>(points[best].runId));
  else if (std::any_of(points.begin(), points.end(), [](const auto& p) { return !p.samplesReported; }))
    std::printf(
        "ptw: your program reported no samples: the table gives its steps/s; report \"samples\" with each "
        "step (ptw_metrics.log(step, samples=...)) for samples/s and efficiency\n");
  if (!a.csv.empty()) ptw::core::writeOutputFile(a.csv, ptw::core::Sweep::toCsv(points), "--csv");
  if (!a.json.empty()) ptw::core::writeOutputFile(a.json, ptw::core::Sweep::toJson(points), "--json");
  if (sweep.stopRequested()) {
    std::printf("ptw: sweep interrupted after %zu configuration(s)\n", points.size());
    return ptw::core::kExitInterrupted;
  }
  return sweepVerdict(points, a.minEfficiency);
}

// Note [Submitted runs]: the runs directory is given to the job as an absolute path, as the
// job may start in another folder.
int submitJob(const SubmitArgs& a) {
  ptw::core::Profile p = a.profile.empty() ? ptw::core::defaultProfile() : ptw::core::loadProfile(a.profile);
  p = ptw::core::applyOverrides(p, a.sets);
  std::string runsDir = a.runsDir.empty() ? ptw::core::defaultRunsDirectory() : a.runsDir;
  runsDir = std::filesystem::absolute(runsDir).lexically_normal().string();
  while (runsDir.size() > 1 && runsDir.back() == '/') runsDir.pop_back();
  const auto job = ptw::core::submitRun(p, runsDir, ptw::core::thisPtwProgram());
  std::printf("job %s\nrun folder %s\n", job.id.c_str(), job.runDir.c_str());
  std::fprintf(stderr, "ptw: submitted; follow the run with: ptw follow %s --runs-dir %s\n", job.runDir.c_str(),
               runsDir.c_str());
  return 0;
}

CLI::App* addSubmitCommand(CLI::App& app, SubmitArgs& a) {
  auto* cmd = app.add_subcommand(
      "submit",
      "Submit a SLURM profile's run (hosts.launcher \"slurm\") as a batch job that runs ptw --headless inside its "
      "allocation, and print the job's id and the run's folder; the job needs nothing more from here (follow or "
      "stop it with ptw follow and ptw stop, docs/follow.md)");
  cmd->add_option("-p,--profile", a.profile, "Profile (default: the built-in seed workload)");
  cmd->add_option("--set", a.sets, "Override a profile field, as for a run (repeatable)");
  cmd->add_option("--runs-dir", a.runsDir, "Runs directory (default as above), one the job's nodes see");
  return cmd;
}

CLI::App* addFollowCommand(CLI::App& app, FollowArgs& a) {
  auto* followCmd = app.add_subcommand(
      "follow",
      "Write a run's records and its ranks' log lines to stdout: what is stored, then each new one as it is "
      "stored, until the run ends; exits with the run's code (0 finished, 3 failed or interrupted, 5 stopped). "
      "Reads only: following changes nothing for the run (docs/follow.md)");
  followCmd->add_option("run", a.run, "Run id (see `ptw runs`), or latest: the newest run")->required();
  followCmd->add_option("--runs-dir", a.runsDir,
                        "Runs directory (default as above); HOST:DIR for one on another host, followed through "
                        "ssh and attached again when the connection breaks");
  followCmd->add_option("-p,--profile", a.profile,
                        "For a runs directory HOST:DIR: the profile whose hosts.ssh_user, ssh_port, ssh_identity, "
                        "ssh_config and alive_interval_s reach HOST");
  followCmd->add_option("--from-step", a.fromStep, "Leave out step, validation and scalar records of steps below N");
  // Hidden: how often the store is looked at; the window's attach asks for less than a person's
  // terminal needs (Note [Reattaching]).
  followCmd->add_option("--poll-ms", a.pollMs, "")->group("")->check(CLI::Range(10, 10000));
  followCmd
      ->add_option("--format", a.format,
                   "frames (the default: a header line, then binary frames, docs/protocol.md) or jsonl (a JSON "
                   "object a line: run, step, validation, scalar, log, end)")
      ->check(CLI::IsMember({"frames", "jsonl"}));
  return followCmd;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ptw " PTW_VERSION
      ": Parallel Training Workbench. Configure, launch and watch parallel training "
      "(single process, DataParallel, DistributedDataParallel, a process pool) on local CPU ranks and GPUs. Opens the "
      "window where a display is available, else runs headless; --expect, --summary and --junit judge a run "
      "and always run headless. -p, --set and --runs-dir apply to the window too. Options of a subcommand go "
      "after its name (ptw sweep --set ...).",
      "ptw"};
  bool headless = false;
  ptw::core::HeadlessOptions opts;
  addRunOptions(app, opts, headless);
  app.set_version_flag("--version", "ptw " PTW_VERSION);
#ifdef PTW_WITH_GUI
  ptw::ui::GuiOptions gui;
  app.add_flag("--start", gui.start, "Window: start the run as soon as the window is up");
  app.add_option("--screenshot", gui.screenshotPath,
                 "Window: start the run, save a PNG of the window to FILE after --screenshot-after seconds, "
                 "stop the run and quit");
  app.add_option("--screenshot-after", gui.screenshotAfterS, "Seconds into the run for --screenshot (default 3)");
#endif

  auto* runsCmd = app.add_subcommand("runs", "List the runs in the runs directory (id, status, strategy, result)");
  std::string listDir;
  runsCmd->add_option("--runs-dir", listDir, "Runs directory (default as above); HOST:DIR for one on another host");
  auto* exportCmd = app.add_subcommand(
      "export",
      "Export a run's metrics: every step record of every rank as CSV (ptw export RUN FILE), or as TensorBoard "
      "event files, a folder per rank with a scalar for each step field and the validation loss and accuracy "
      "(ptw export --format tensorboard RUN DIR; open DIR in TensorBoard, docs/export.md)");
  ExportArgs exportArgs;
  exportCmd->add_option("run", exportArgs.runId, "Run id (see `ptw runs`)")->required();
  exportCmd->add_option("out", exportArgs.out,
                        "csv: the file to write (or give --csv FILE); tensorboard: the folder to write rank0/, "
                        "rank1/, ... into, created if need be");
  exportCmd->add_option("--format", exportArgs.format, "csv (the default) or tensorboard")
      ->check(CLI::IsMember({"csv", "tensorboard"}));
  exportCmd->add_option("--csv", exportArgs.csv, "csv: the file to write");
  exportCmd->add_option("--runs-dir", exportArgs.runsDir, "Runs directory (default as above)");
  SweepArgs sweepArgs;
  auto* sweepCmd = addSweepCommand(app, sweepArgs);
  FollowArgs followArgs;
  auto* followCmd = addFollowCommand(app, followArgs);
  SubmitArgs submitArgs;
  auto* submitCmd = addSubmitCommand(app, submitArgs);
  StopArgs stopArgs, stacksArgs;
  auto* stopCmd = addRunRequestCommand(app, stopArgs, "stop", kStopHelp);
  auto* stacksCmd = addRunRequestCommand(app, stacksArgs, "stacks", kStacksHelp);
  app.footer(kFooter);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : ptw::core::kExitInvalidInput;
  }
  if (!runOptionsLeftOut(app)) return ptw::core::kExitInvalidInput;
  try {
    if (runsCmd->parsed()) return listRuns(listDir);
    if (sweepCmd->parsed()) return runSweep(sweepArgs);
    if (exportCmd->parsed()) return exportRun(exportArgs);
    if (followCmd->parsed()) return followRun(followArgs);
    if (submitCmd->parsed()) return submitJob(submitArgs);
    if (stopCmd->parsed()) return stopRun(stopArgs);
    if (stacksCmd->parsed()) return printStacks(stacksArgs);
  } catch (const ptw::Error& e) {
    std::fprintf(stderr, "ptw: %s\n", e.what());
    return ptw::core::kExitInvalidInput;
  }

  const bool judging = !opts.expectations.empty() || !opts.summaryPath.empty() || !opts.junitPath.empty();
#ifdef PTW_WITH_GUI
  const bool windowAsked = gui.start || !gui.screenshotPath.empty();
  if (judging && windowAsked) {
    std::fprintf(stderr, "ptw: --expect, --summary and --junit judge a headless run; they cannot be given with %s\n",
                 gui.start ? "--start" : "--screenshot");
    return ptw::core::kExitInvalidInput;
  }
  if (!headless && !judging && (displayAvailable() || (windowAsked && qtPlatformChosen()))) {
    gui.profilePath = opts.profilePath;
    gui.overrides = opts.overrides;
    gui.runsDir = opts.runsDir;
    gui.workerArgs = opts.workerArgs;
    return ptw::ui::guiMain(argc, argv, gui);
  }
  if (!headless && !judging) std::cout << "ptw: no display found; running headless (pass --headless to say so)\n";
#else
  if (!headless && !judging) std::cout << "ptw: built without the GUI (PTW_BUILD_GUI=OFF); running headless\n";
#endif
  return ptw::core::runHeadless(opts, std::cout, std::cerr);
}
