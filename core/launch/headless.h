// SPDX-License-Identifier: GPL-3.0-or-later
// The headless runner behind `ptw --headless`: runs one profile to the end with progress
// on the terminal and an exit code CI can act on.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace ptw::core {

struct Profile;

/// Process exit codes of `ptw --headless`; documented in --help and the README.
enum ExitCode : int {
  kExitOk = 0,
  kExitInvalidInput = 2,       ///< bad profile, override, runs directory, port, worker or output file
  kExitTrainingFailed = 3,     ///< a rank failed or stalled
  kExitExpectationFailed = 4,  ///< the run finished but an --expect did not hold
  kExitInterrupted = 5,        ///< SIGINT/SIGTERM: the run was stopped gracefully
};

/// Example: HeadlessOptions{}.profilePath = "resources/profiles/seed-ddp.json";
struct HeadlessOptions {
  std::string profilePath = "";                ///< "" runs the built-in default profile
  std::vector<std::string> overrides = {};     ///< key=value, applied after loading
  std::string runsDir = "";                    ///< "" uses defaultRunsDirectory()
  std::string workerPath = "";                 ///< "" uses Launcher::defaultWorkerPath()
  std::string runFolder = "";                  ///< a submitted run's folder to run in (hidden --run-folder)
  std::vector<std::string> expectations = {};  ///< e.g. "final.loss < 0.05"
  std::string summaryPath = "";                ///< JSON summary written here when set
  std::string junitPath = "";                  ///< JUnit XML written here when set
  /// Appended to every worker's command line (hidden `--worker-arg`; tests' --fault=SPEC).
  std::vector<std::string> workerArgs = {};
  long long storeLimitKib = 0;  ///< the run store's size limit (the disk-full tests); 0: none
};

/// What a terminal shows while step records become rows (Note [Step blocks]; long for a large run):
/// nothing under half a million, else a line at the start and one a second, to `out`;
/// `what` names them ("step records", "step records of run 7").
std::function<void(std::int64_t done, std::int64_t total)> packReporter(std::ostream& out, std::string what);

class ThroughputMeter;

/// The final line's throughput: `samplesPerS` and `stepsPerS` as the run stores them
/// (RunResult::metrics; samples/s "–" when nobody reported samples, Note [Not reported]),
/// or, when steps/s is not a number, that the run was too short to measure (Note [Warm-up steps]).
std::string throughputLine(double samplesPerS, double stepsPerS, const ThroughputMeter& meter, const Profile& profile);

/// What the console and the runs list show for a value nobody reported (Note [Not reported]).
inline constexpr const char* kNotReported = "\u2013";

/// While it lives, SIGINT, SIGTERM and SIGHUP (the terminal closed) ask `target` to stop
/// gracefully (target.requestStop(), which must be async-signal-safe) instead of ending the
/// process; the earlier handlers come back after. One at a time.
/// Example: { StopOnSignals stop(supervisor); supervisor.run(observer); }
class StopOnSignals {
 public:
  template <class T>
  explicit StopOnSignals(T& target) {
    s_stop = [](void* t) { static_cast<T*>(t)->requestStop(); };
    s_target.store(&target);
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &m_old[i]);
  }
  ~StopOnSignals() {
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &m_old[i], nullptr);
    s_target.store(nullptr);
  }
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  static void onSignal(int) {
    if (void* t = s_target.load()) s_stop(t);
  }
  static inline std::atomic<void*> s_target{nullptr};
  static inline void (*s_stop)(void*) = nullptr;
  struct sigaction m_old[3];
};

/// Throws ptw::Error naming `option` (--summary, --csv) unless `path` can be written as a
/// file: a name in an existing, writable folder, and not a folder itself.
void checkOutputFile(const std::string& path, const std::string& option);

/// Writes `content` to `path` through a temporary file beside it, renamed over it: a reader
/// sees the old file or the new one whole. Throws ptw::Error naming `option` and leaves no
/// temporary file behind.
void writeOutputFile(const std::string& path, const std::string& content, const std::string& option);

/// Runs and returns an ExitCode. Progress goes to `out`, errors to `err`. SIGINT and
/// SIGTERM stop the run gracefully while it is in here.
int runHeadless(const HeadlessOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ptw::core
