#include "launch/headless.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/profile.h"
#include "launch/launcher.h"
#include "launch/run_directory.h"

namespace ptw::core {
namespace {

Launcher* g_active = nullptr;
extern "C" void onInterrupt(int) {
  if (g_active) g_active->requestStop();
}

// Per-rank progress: redrawn in place on a terminal, a line a second otherwise.
class ProgressPrinter : public LaunchObserver {
 public:
  ProgressPrinter(std::ostream& out, const Profile& p, bool tty)
      : m_out(out), m_profile(p), m_tty(tty), m_ranks(static_cast<std::size_t>(p.strategy.ranks)) {}

  void onStarted(int port, const std::vector<int>& pids) override {
    m_out << "started " << pids.size() << " rank(s), store on 127.0.0.1:" << port << "\n";
    m_start = std::chrono::steady_clock::now();
  }
  void onRecords(const std::vector<Record>& batch) override {
    for (const auto& r : batch) {
      if (r.kind != Record::Kind::Step || r.step.rank >= static_cast<int>(m_ranks.size())) continue;
      auto& slot = m_ranks[static_cast<std::size_t>(r.step.rank)];
      slot.last = r.step;
      slot.seen = true;
      ++m_records;
    }
    print(false);
  }
  void onRankExit(const RankExit& e) override {
    if (e.rank >= 0 && e.rank < static_cast<int>(m_ranks.size()))
      m_ranks[static_cast<std::size_t>(e.rank)].exit = e.describe();
  }
  void print(bool force) {
    auto now = std::chrono::steady_clock::now();
    auto interval = m_tty ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000);
    if (!force && now - m_lastPrint < interval) return;
    m_lastPrint = now;
    std::int64_t total = m_profile.hyper.maxSteps;
    if (m_tty && m_printedLines > 0) m_out << "\x1b[" << m_printedLines << "A";
    m_printedLines = 0;
    for (std::size_t r = 0; r < m_ranks.size(); ++r) {
      const auto& s = m_ranks[r];
      std::ostringstream line;
      line << "rank " << r << "  ";
      if (!s.seen) {
        line << "starting";
      } else {
        line << "step " << s.last.step;
        if (total > 0) line << "/" << total;
        line << "  epoch " << s.last.epoch << "  loss " << std::setprecision(5) << s.last.loss << "  "
             << std::fixed << std::setprecision(0) << s.last.samplesPerS << " samples/s";
        if (total > 0 && s.last.step > 0) {
          double elapsed = std::chrono::duration<double>(now - m_start).count();
          double eta = elapsed / static_cast<double>(s.last.step) * static_cast<double>(total - s.last.step);
          line << "  ETA " << std::setprecision(1) << std::max(0.0, eta) << " s";
        }
      }
      if (!s.exit.empty()) line << "  [" << s.exit << "]";
      if (m_tty) m_out << "\x1b[2K";
      m_out << line.str() << "\n";
      ++m_printedLines;
    }
    if (!m_tty) m_printedLines = 0;
    m_out.flush();
  }
  std::int64_t records() const { return m_records; }

 private:
  struct RankView {
    StepRecord last;
    bool seen = false;
    std::string exit;
  };
  std::ostream& m_out;
  const Profile& m_profile;
  bool m_tty;
  std::vector<RankView> m_ranks;
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point m_lastPrint{};
  int m_printedLines = 0;
  std::int64_t m_records = 0;
};

}  // namespace

int runHeadless(const HeadlessOptions& options, std::ostream& out, std::ostream& err) {
  Profile profile;
  std::string runDir;
  try {
    profile = options.profilePath.empty() ? defaultProfile() : loadProfile(options.profilePath);
    profile = applyOverrides(profile, options.overrides);
    runDir = createRunDirectory(options.runsDir.empty() ? defaultRunsDirectory() : options.runsDir, profile);
  } catch (const Error& e) {
    err << "ptw: " << e.what() << "\n";
    return kExitInvalidInput;
  }

  LaunchOptions lo(options.workerPath.empty() ? Launcher::defaultWorkerPath() : options.workerPath,
                   runDir + "/profile.json", profile.strategy.ranks);
  lo.setOutDir(runDir).setPort(profile.run.port).setStallTimeoutS(profile.run.timeoutS);
  Launcher launcher(lo);
  out << "ptw: running " << (options.profilePath.empty() ? "the default profile" : options.profilePath) << " ("
      << profile.name << ": " << profile.strategy.kind << ", " << profile.strategy.ranks << " "
      << profile.strategy.device << " rank(s))\nptw: run folder " << runDir << "\n";

  ProgressPrinter progress(out, profile, ::isatty(STDOUT_FILENO) != 0);
  struct sigaction sa {}, oldInt {}, oldTerm {};
  sa.sa_handler = onInterrupt;
  sigemptyset(&sa.sa_mask);
  g_active = &launcher;
  ::sigaction(SIGINT, &sa, &oldInt);
  ::sigaction(SIGTERM, &sa, &oldTerm);
  RunReport report;
  try {
    report = launcher.run(progress);
  } catch (const Error& e) {
    g_active = nullptr;
    ::sigaction(SIGINT, &oldInt, nullptr);
    ::sigaction(SIGTERM, &oldTerm, nullptr);
    err << "ptw: " << e.what() << "\n";
    return kExitInvalidInput;
  }
  g_active = nullptr;
  ::sigaction(SIGINT, &oldInt, nullptr);
  ::sigaction(SIGTERM, &oldTerm, nullptr);
  progress.print(true);

  out << "ptw: " << statusName(report.status) << " in " << std::fixed << std::setprecision(1) << report.wallS
      << " s: " << report.message << "\n";
  if (report.status == RunReport::Status::Failed) {
    err << "ptw: run failed: " << report.message << "\n";
    if (!report.lastLines.empty()) {
      err << "ptw: last " << report.lastLines.size() << " log line(s) of rank " << report.failedRank << ":\n";
      for (const auto& l : report.lastLines) err << "  | " << l << "\n";
    }
    err << "ptw: logs in " << runDir << "\n";
    return kExitTrainingFailed;
  }
  if (report.status == RunReport::Status::Stopped) return kExitInterrupted;
  return kExitOk;
}

}  // namespace ptw::core
