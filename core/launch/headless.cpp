// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/headless.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/launcher_kinds.h"
#include "common/profile.h"
#include "common/strategies.h"
#include "launch/expectation.h"
#include "launch/last_steps.h"
#include "launch/launcher.h"
#include "launch/preflight.h"
#include "launch/rate_window.h"
#include "launch/run_directory.h"
#include "launch/run_session.h"
#include "launch/throughput.h"

namespace ptw::core {
namespace {

// Per-rank progress: redrawn in place on a terminal, a line a second otherwise.
class ProgressPrinter : public LaunchObserver {
 public:
  ProgressPrinter(std::ostream& out, const Profile& p, bool tty)
      : m_out(out), m_profile(p), m_tty(tty), m_last(reportingRanks(p)), m_ranks(m_last.size()) {}

  void onStarted(int port, const std::vector<int>& pids) override {
    m_out << "started " << pids.size() << " process(es)";
    switch (launcherOf(m_profile).kind) {
      case LauncherKind::Ssh:  // Note [Remote ranks]
        m_out << " on " << m_profile.hosts.hosts.size()
              << " host(s), one ssh connection and agent each, rendezvous on port " << port;
        break;
      case LauncherKind::Slurm:  // Note [SLURM ranks]
        m_out << " as one SLURM job step through srun, one agent a node, rendezvous on port " << port;
        break;
      case LauncherKind::Local:
        if (m_profile.run.port != 0) m_out << ", store on 127.0.0.1:" << port;  // else a FileStore in the run folder
        break;
    }
    m_out << "\n";
    m_start = std::chrono::steady_clock::now();
  }
  void onRecords(std::vector<Record>& batch) override {
    for (const auto& r : batch) {
      if (!m_last.add(r)) continue;
      const StepGroup steps = asGroup(r);
      RankView& v = m_ranks[static_cast<std::size_t>(r.step.rank)];
      const double at = secondsSince(m_start);
      if (!std::isfinite(steps.stepMs)) continue;
      // Note [Not reported]: samples nobody reported are not 0 samples.
      const bool reported = std::isfinite(steps.samples);
      v.samplesReported = v.samplesReported || reported;
      v.rate.add(at, reported ? steps.samples : 0, steps.stepMs / 1000.0);
      v.stepRate.add(at, static_cast<double>(steps.count), steps.stepMs / 1000.0);
    }
    print(false);
  }
  void onLog(int rank, const std::string& line) override {
    if (rank < 0) m_out << line << "\n";  // the supervisor's own messages (restarts)
  }
  // A SLURM job's nodes, said as the window's host column shows them: "node1 (ranks 0-3), ...".
  void onHosts(const std::vector<std::string>& hosts) override {
    m_out << "ptw: the ranks' nodes:";
    for (std::size_t i = 0; i < hosts.size();) {
      std::size_t end = i;
      while (end < hosts.size() && hosts[end] == hosts[i]) ++end;
      m_out << (i == 0 ? " " : ", ") << hosts[i] << " (rank" << (end - i > 1 ? "s " : " ") << i;
      if (end - i > 1) m_out << "-" << end - 1;
      m_out << ")";
      i = end;
    }
    m_out << "\n";
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
    if (m_ranks.size() > kRankLines) {
      printAllRanks(now);
      return;
    }
    for (std::size_t r = 0; r < m_ranks.size(); ++r) {
      const auto& s = m_ranks[r];
      const RankFinal& f = m_last[r];
      std::ostringstream line;
      line << "rank " << r << "  ";
      if (!f.seen) {
        line << "starting";
      } else {
        line << "step " << f.last.step;
        if (total > 0) line << "/" << total;
        if (f.last.stepOffset != 0) line << " (its own " << f.last.ownStep() << ")";
        if (isReported(f.last.epoch)) line << "  epoch " << f.last.epoch;
        line << "  loss ";
        if (isReportedLoss(f.last.loss))
          line << std::setprecision(5) << f.last.loss;
        else
          line << kNotReported;
        line << "  " << std::fixed << std::setprecision(0);
        if (s.samplesReported)
          line << s.rate.rate();
        else
          line << kNotReported;
        line << " samples/s  " << std::setprecision(s.stepRate.rate() < 10 ? 2 : 0) << s.stepRate.rate() << " steps/s";
        if (total > 0 && f.last.step > 0 && f.last.step < total) {
          double elapsed = std::chrono::duration<double>(now - m_start).count();
          double eta = elapsed / static_cast<double>(f.last.step) * static_cast<double>(total - f.last.step);
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
  // Past this many ranks, a line for them all: a line a rank a second would be what a
  // thousand ranks cost the terminal, and no one reads it.
  static constexpr std::size_t kRankLines = 16;

  // One line for every rank: the steps of the furthest behind and ahead, the mean loss, and
  // the rates of all of them together.
  void printAllRanks(std::chrono::steady_clock::time_point now) {
    std::int64_t low = INT64_MAX, high = -1;
    double loss = 0, samples = 0, steps = 0;
    std::size_t seen = 0, losses = 0, ended = 0;
    bool samplesReported = false;
    for (std::size_t r = 0; r < m_ranks.size(); ++r) {
      const RankFinal& f = m_last[r];
      ended += m_ranks[r].exit.empty() ? 0 : 1;
      if (!f.seen) continue;
      ++seen;
      low = std::min(low, f.last.step), high = std::max(high, f.last.step);
      if (isReportedLoss(f.last.loss) && std::isfinite(f.last.loss)) loss += f.last.loss, ++losses;
      samplesReported = samplesReported || m_ranks[r].samplesReported;
      samples += m_ranks[r].rate.rate(), steps += m_ranks[r].stepRate.rate();
    }
    std::ostringstream line;
    line << m_ranks.size() << " ranks  ";
    if (seen == 0) {
      line << "starting";
    } else {
      const std::int64_t total = m_profile.hyper.maxSteps;
      line << "step " << low << (high > low ? "-" + std::to_string(high) : "");
      if (total > 0) line << "/" << total;
      line << "  mean loss ";
      if (losses > 0)
        line << std::setprecision(5) << loss / static_cast<double>(losses);
      else
        line << kNotReported;
      line << "  " << std::fixed << std::setprecision(0);
      if (samplesReported)
        line << samples;
      else
        line << kNotReported;
      line << " samples/s  " << steps << " steps/s in all  " << seen << " reporting";
      if (total > 0 && low > 0 && low < total) {
        const double elapsed = std::chrono::duration<double>(now - m_start).count();
        line << "  ETA " << std::setprecision(1)
             << std::max(0.0, elapsed / static_cast<double>(low) * static_cast<double>(total - low)) << " s";
      }
    }
    if (ended > 0) line << "  [" << ended << " process(es) ended]";
    if (m_tty) m_out << "\x1b[2K";
    m_out << line.str() << "\n";
    m_printedLines = m_tty ? 1 : 0;
    m_out.flush();
  }

  struct RankView {
    RateWindow rate;      ///< the last seconds' samples/s: a single group's jumps (Note [Step groups])
    RateWindow stepRate;  ///< and steps/s
    bool samplesReported = false;
    std::string exit;
  };

 private:
  static double secondsSince(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  std::ostream& m_out;
  const Profile& m_profile;
  bool m_tty;
  LastSteps m_last;
  std::vector<RankView> m_ranks;  ///< beside m_last, one a rank
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point m_lastPrint{};
  int m_printedLines = 0;
};

}  // namespace

namespace {

std::string xmlEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t')
          o += ' ';
        else
          o += c;
    }
  }
  return o;
}

struct Verdict {
  Expectation expectation;
  double value = 0;
  bool passed = false;
};

}  // namespace

std::function<void(std::int64_t, std::int64_t)> packReporter(std::ostream& out, std::string what) {
  return [&out, what = std::move(what), lastShown = std::chrono::steady_clock::time_point()](
             std::int64_t done, std::int64_t total) mutable {
    if (total < 500000) return;
    const auto now = std::chrono::steady_clock::now();
    if (done == 0)
      out << "ptw: storing " << total << " " << what << " in chunks..." << std::endl;
    else if (done == total || now - lastShown >= std::chrono::seconds(1))
      out << "ptw: stored " << done << " of " << total << " " << what << " in chunks" << std::endl;
    else
      return;
    lastShown = now;
  };
}

void checkOutputFile(const std::string& path, const std::string& option) {
  PTW_CHECK(!path.empty() && path.back() != '/', option, " ", path, ": give a file name, not a folder");
  struct stat st {};
  PTW_CHECK(::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), option, " ", path,
            ": is a folder; give a file name");
  const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  PTW_CHECK(::access(dir.c_str(), W_OK) == 0, option, " ", path, ": cannot write there (", std::strerror(errno),
            "); choose a writable folder");
}

void writeOutputFile(const std::string& path, const std::string& content, const std::string& option) {
  const std::string tmp = path + ".tmp";
  std::string error;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f)
      error = std::string("cannot write (") + std::strerror(errno) + ")";
    else if (!(f << content).flush())
      error = std::string("write failed (") + std::strerror(errno) + ")";
  }
  if (error.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    error = std::string("cannot replace (") + std::strerror(errno) + ")";
  if (error.empty()) return;
  std::remove(tmp.c_str());
  PTW_FAIL(option, " ", path, ": ", error);
}

namespace {

// What the command line asks, read and checked before anything is created.
struct Request {
  Profile profile;
  std::vector<Expectation> expectations;
};

Request readRequest(const HeadlessOptions& options) {
  Request q;
  for (const auto& e : options.expectations) q.expectations.push_back(Expectation::parse(e));
  if (!options.summaryPath.empty()) checkOutputFile(options.summaryPath, "--summary");
  if (!options.junitPath.empty()) checkOutputFile(options.junitPath, "--junit");
  q.profile = options.profilePath.empty() ? defaultProfile() : loadProfile(options.profilePath);
  q.profile = applyOverrides(q.profile, options.overrides);
  for (const auto& e : q.expectations)
    PTW_CHECK(e.metric.rfind("final.val_", 0) != 0 || q.profile.data.valFraction > 0, "--expect '", e.text,
              "': ", e.metric, " needs validation data, and the profile holds none (data.val_fraction is 0)");
  return q;
}

}  // namespace

std::string throughputLine(double samplesPerS, double stepsPerS, const ThroughputMeter& meter, const Profile& profile) {
  std::ostringstream line;
  if (std::isfinite(stepsPerS)) {
    line << "throughput " << std::fixed << std::setprecision(0);
    if (std::isfinite(samplesPerS))
      line << samplesPerS;
    else
      line << kNotReported;
    line << " samples/s, " << std::setprecision(stepsPerS < 10 ? 2 : 0) << stepsPerS << " steps/s";
    if (!std::isfinite(samplesPerS))
      line << " (samples not reported: "
           << (strategyOf(profile).runsCommand ? "report samples, or pass {hyper.batch_size} to the program"
                                               : "the ranks reported none")
           << ")";
  } else {
    line << "too short to measure throughput: " << meter.measuredSteps() << " steps after warm-up (at least "
         << ThroughputMeter::kMinMeasuredSteps << " needed; "
         << (strategyOf(profile).runsCommand && profile.hyper.maxSteps == 0 ? "the program reported no more"
                                                                            : "raise hyper.max_steps")
         << ")";
  }
  return line.str();
}

namespace {

// A run that did not finish fails as a run; its expectations are not judged (a loss that
// holds at the step where it failed says nothing), and count as not held.
std::vector<Verdict> judge(const std::vector<Expectation>& expectations, const RunResult& result, std::ostream& out) {
  std::vector<Verdict> verdicts;
  const auto status = result.report.status;
  const bool judged = status == RunReport::Status::Finished;
  for (const auto& e : expectations) {
    const double v = result.metrics.at(e.metric);
    const bool ok = judged && e.holds(v);
    verdicts.push_back({e, v, ok});
    const std::string verdict = !judged ? "not judged (the run " + std::string(statusName(status)) + ")"
                                : ok    ? "ok"
                                        : "FAILED";
    out << "ptw: expect " << e.text << ": " << verdict << " (" << e.metric << " = " << std::setprecision(6)
        << std::defaultfloat << v << ")\n";
  }
  return verdicts;
}

std::string summaryJson(const RunSession& session, const RunResult& result, const std::vector<Verdict>& verdicts,
                        int code) {
  const RunReport& report = result.report;
  const Profile& profile = session.profile();
  const bool judged = report.status == RunReport::Status::Finished;
  auto metric = [&](const char* name) { return result.metrics.at(name); };
  auto num = [](double v) { return std::isnan(v) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v); };
  nlohmann::ordered_json j;
  j["status"] = code == kExitExpectationFailed ? "expectation_failed" : statusName(report.status);
  j["exit_code"] = code;
  j["message"] = report.message;
  j["profile"] = profile.name;
  j["strategy"] = profile.strategy.kind;
  j["world_size"] = profile.strategy.ranks;
  j["run_dir"] = session.runDir();
  j["run_id"] = session.runId();
  j["attempts"] = result.attempts;
  j["wall_s"] = report.wallS;
  // The last attempt's: how long its ranks took to start (RunReport::lastStartedS).
  j["ranks_started_s"] = report.lastStartedS >= 0
                             ? nlohmann::ordered_json{{"first", report.firstStartedS}, {"last", report.lastStartedS}}
                             : nlohmann::ordered_json(nullptr);
  j["final"] = {{"loss", num(metric("final.loss"))},
                {"step", metric("final.step")},
                {"val_loss", num(metric("final.val_loss"))},
                {"val_accuracy", num(metric("final.val_accuracy"))}};
  j["throughput"] = {{"samples_per_s", num(metric("throughput.samples_per_s"))},
                     {"steps_per_s", num(metric("throughput.steps_per_s"))}};
  j["ranks"] = nlohmann::ordered_json::array();
  const ThroughputMeter& throughput = session.throughput();
  const bool measured = throughput.measured();  // else null, as the run's (Note [Warm-up steps])
  for (std::size_t r = 0; r < result.ranks.size(); ++r) {
    const auto& v = result.ranks[r];
    j["ranks"].push_back({{"rank", r},
                          {"steps", v.last.step},
                          {"final_loss", v.seen ? num(v.last.loss) : nullptr},
                          {"samples_per_s", measured ? num(throughput.samplesPerS(static_cast<int>(r))) : nullptr},
                          {"step_ms", stepSplitJson<nlohmann::ordered_json>(throughput.split(static_cast<int>(r)))},
                          {"exit", report.exits.size() > r ? report.exits[r].describe() : ""}});
  }
  if (report.failedRank >= 0) j["failed_rank"] = report.failedRank;
  if (!report.stacksFile.empty()) j["stacks"] = report.stacksFile;  // Note [Taking stacks]
  j["diverged_at_step"] =
      report.divergedRank >= 0 ? nlohmann::ordered_json(report.divergedAtStep) : nlohmann::ordered_json(nullptr);
  if (report.divergedRank >= 0)
    j["diverged"] = {
        {"rank", report.divergedRank}, {"step", report.divergedAtStep}, {"message", divergedMessage(report)}};
  j["stragglers"] = nlohmann::ordered_json::array();  // Note [Stragglers]
  for (const Straggler& s : result.stragglers)
    j["stragglers"].push_back(
        {{"rank", s.rank},
         {"host", s.host.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s.host)},
         {"factor", s.factor},
         {"phase", s.phase.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s.phase)},
         {"step", s.step},
         {"message", stragglerMessage(s)}});
  j["expectations"] = nlohmann::ordered_json::array();
  for (const auto& v : verdicts)
    j["expectations"].push_back(
        {{"expect", v.expectation.text}, {"value", num(v.value)}, {"passed", v.passed}, {"judged", judged}});
  return j.dump(2) + "\n";
}

std::string junitXml(const Profile& profile, const RunReport& report, const std::vector<Verdict>& verdicts) {
  const bool judged = report.status == RunReport::Status::Finished;
  int failures = judged ? 0 : 1;
  for (const auto& v : verdicts) failures += judged && !v.passed ? 1 : 0;
  const std::string name = xmlEscape(profile.name);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites tests=\"" << 1 + verdicts.size() << "\" failures=\"" << failures << "\">\n"
    << "  <testsuite name=\"ptw." << name << "\" tests=\"" << 1 + verdicts.size() << "\" failures=\"" << failures
    << "\" time=\"" << report.wallS << "\">\n"
    << "    <testcase classname=\"ptw." << name << "\" name=\"run\" time=\"" << report.wallS << "\">\n";
  if (!judged) {
    std::string body;
    for (const auto& l : report.lastLines) body += l + "\n";
    x << "      <failure message=\"" << xmlEscape(report.message) << "\">" << xmlEscape(body) << "</failure>\n";
  }
  x << "    </testcase>\n";
  for (const auto& v : verdicts) {
    x << "    <testcase classname=\"ptw." << name << "\" name=\"expect " << xmlEscape(v.expectation.text) << "\">\n";
    if (!judged) {
      x << "      <skipped message=\"not judged: the run " << statusName(report.status) << "\"/>\n";
    } else if (!v.passed) {
      std::ostringstream m;
      m << v.expectation.metric << " = " << v.value;
      x << "      <failure message=\"" << xmlEscape(m.str()) << "\"/>\n";
    }
    x << "    </testcase>\n";
  }
  x << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

}  // namespace

int runHeadless(const HeadlessOptions& options, std::ostream& out, std::ostream& err) {
  Request request;
  try {
    request = readRequest(options);
  } catch (const Error& e) {
    err << "ptw: " << e.what() << "\n";
    return kExitInvalidInput;
  }
  const Profile& profile = request.profile;
  const std::string runsDir = options.runsDir.empty() ? defaultRunsDirectory() : options.runsDir;
  if (const std::string warning = storeSpaceWarning(profile, runsDir); !warning.empty())
    err << "ptw: warning: " << warning << "\n";
  if (const std::string warning = coresWarning(profile); !warning.empty()) err << "ptw: warning: " << warning << "\n";
  RunSession session(RunSessionOptions(profile)
                         .setRunsDir(runsDir)
                         .setWorkerPath(options.workerPath)
                         .setRunFolder(options.runFolder)
                         .setWorkerArgs(options.workerArgs)
                         .setStoreOptions(RunStoreOptions().setSizeLimitKib(options.storeLimitKib))
                         .setPackProgress(packReporter(out, "step records")));
  try {
    session.begin();  // the worker, the port, the run folder and the store
  } catch (const Error& e) {
    err << "ptw: " << e.what() << "\n";
    return kExitInvalidInput;
  }
  out << "ptw: running " << (options.profilePath.empty() ? "the default profile" : options.profilePath) << " ("
      << profile.name << ": " << profile.strategy.kind << ", " << profile.strategy.ranks << " "
      << profile.strategy.device << " rank(s))\nptw: run folder " << session.runDir() << "\n";

  ProgressPrinter progress(out, profile, ::isatty(STDOUT_FILENO) != 0);
  RunResult result;
  {
    StopOnSignals stop(session);
    result = session.run(progress);
  }
  const RunReport& report = result.report;
  if (!result.started) {
    err << "ptw: " << report.message << "\n";
    return kExitInvalidInput;
  }
  progress.print(true);
  out << "ptw: " << statusName(report.status) << " in " << std::fixed << std::setprecision(1) << report.wallS
      << " s: " << report.message << "\n";
  out << "ptw: "
      << throughputLine(result.metrics.at("throughput.samples_per_s"), result.metrics.at("throughput.steps_per_s"),
                        session.throughput(), profile)
      << "\n";
  if (report.lastStartedS >= 0)
    out << "ptw: ranks started in " << std::setprecision(2) << report.lastStartedS << " s (the first in "
        << report.firstStartedS << " s)\n";
  if (report.divergedRank >= 0 && report.status != RunReport::Status::Failed)
    out << "ptw: warning: " << divergedMessage(report) << "\n";
  out << "ptw: run " << session.runId() << " stored in " << session.storePath() << "\n";
  // Expectations, summary and JUnit: judged and written whatever the outcome.
  const std::vector<Verdict> verdicts = judge(request.expectations, result, out);
  const bool allHeld = std::all_of(verdicts.begin(), verdicts.end(), [](const Verdict& v) { return v.passed; });
  int code = report.status == RunReport::Status::Failed    ? kExitTrainingFailed
             : report.status == RunReport::Status::Stopped ? kExitInterrupted
             : !allHeld                                    ? kExitExpectationFailed
                                                           : kExitOk;
  try {
    if (!options.summaryPath.empty())
      writeOutputFile(options.summaryPath, summaryJson(session, result, verdicts, code), "--summary");
    if (!options.junitPath.empty()) writeOutputFile(options.junitPath, junitXml(profile, report, verdicts), "--junit");
  } catch (const Error& e) {
    err << "ptw: " << e.what() << "\n";
    if (code == kExitOk) code = kExitInvalidInput;  // CI asked for the file: a run without it is not a pass
  }

  if (report.status == RunReport::Status::Failed) {
    err << "ptw: run failed: " << report.message << "\n";
    if (!report.lastLines.empty()) {
      err << "ptw: last " << report.lastLines.size() << " log line(s) of rank " << report.failedRank << ":\n";
      for (const auto& l : report.lastLines) err << "  | " << l << "\n";
    }
    err << "ptw: logs in " << session.runDir() << "\n";
    if (!report.stacksFile.empty()) err << "ptw: every rank's stacks in " << report.stacksFile << "\n";
    return kExitTrainingFailed;
  }
  if (code == kExitExpectationFailed) err << "ptw: an expectation did not hold\n";
  return code;
}

}  // namespace ptw::core
