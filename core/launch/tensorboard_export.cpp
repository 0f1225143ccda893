// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/tensorboard_export.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <iterator>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>

#include "common/error.h"
#include "common/record.h"
#include "launch/event_file_writer.h"
#include "launch/run_store.h"

namespace ptw::core {
namespace {

// Note [Export wall time]
// The store keeps no clock time per record, so an event's wall time is made up, monotone in
// the step: the run's start plus the rank's step_ms summed up to that step, i.e. the time the
// rank spent inside steps (less than the real time by what it spent between them: start-up,
// validation, checkpoints). TensorBoard's "relative" axis then reads as training time. A
// series of other records (validation) takes the time of its rank's last step record at or
// before its step. To answer that after the steps are streamed, a RankTimeline keeps one
// mark per kMarkEvery steps, so a run of millions of steps costs kilobytes here; a time
// looked up between marks is that of the mark before it.
class RankTimeline {
 public:
  explicit RankTimeline(double start) : m_start(start), m_now(start) {}

  /// The wall time of the rank's next step record, `step` (steps come in increasing order).
  double advance(std::int64_t step, double stepMs) {
    if (std::isfinite(stepMs) && stepMs > 0) m_now += stepMs / 1000.0;
    if (m_marks.empty() || step - m_marks.back().first >= kMarkEvery) m_marks.emplace_back(step, m_now);
    m_last = {step, m_now};
    return m_now;
  }

  /// The wall time for another series' record at `step` (Note [Export wall time]).
  double at(std::int64_t step) const {
    if (!m_marks.empty() && step >= m_last.first) return m_last.second;
    const auto after =
        std::upper_bound(m_marks.begin(), m_marks.end(), step,
                         [](std::int64_t s, const std::pair<std::int64_t, double>& m) { return s < m.first; });
    return after == m_marks.begin() ? m_start : std::prev(after)->second;
  }

 private:
  static constexpr std::int64_t kMarkEvery = 64;
  double m_start, m_now;
  std::vector<std::pair<std::int64_t, double>> m_marks;  ///< (step, wall time), kMarkEvery steps apart or more
  std::pair<std::int64_t, double> m_last{0, 0};
};

// One rank's folder: its event file and its clock.
struct RankEvents {
  std::unique_ptr<EventFileWriter> writer;
  RankTimeline time;
};

// Seconds since the epoch of an ISO 8601 UTC time as the store writes it, or -1.
double parseUtc(const std::string& iso) {
  std::tm tm{};
  if (!::strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return -1;
  return static_cast<double>(::timegm(&tm));
}

std::string hostName() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  std::string h = buf[0] ? buf : "localhost";
  std::replace(h.begin(), h.end(), '/', '_');
  return h;
}

void makeFolder(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  PTW_CHECK(::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST, dir, ": cannot create the folder (",
            std::strerror(errno), "); choose a writable folder");
}

}  // namespace

void checkExportFolder(const std::string& dir) {
  PTW_CHECK(!dir.empty(), "export folder: give a folder to write the event files to");
  std::string at = dir;
  while (at.size() > 1 && at.back() == '/') at.pop_back();
  // The folder itself, else the nearest one above it that exists, which the export would
  // create it in.
  for (;;) {
    struct stat st {};
    if (::stat(at.c_str(), &st) == 0) {
      PTW_CHECK(S_ISDIR(st.st_mode), dir, ": ", at == dir ? "is a file" : at + " is a file",
                "; give a folder for the event files");
      PTW_CHECK(::access(at.c_str(), W_OK | X_OK) == 0, dir, ": cannot write in ", at, " (", std::strerror(errno),
                "); choose a writable folder");
      return;
    }
    PTW_CHECK(errno == ENOENT || errno == ENOTDIR, dir, ": cannot use ", at, " (", std::strerror(errno),
              "); choose a writable folder");
    const auto slash = at.rfind('/');
    if (slash == std::string::npos) {
      at = ".";
    } else {
      at = slash == 0 ? "/" : at.substr(0, slash);
    }
  }
}

TensorBoardExport exportTensorBoard(RunStore& store, std::int64_t runId, const std::string& dir) {
  const RunRow run = store.run(runId);  // names a missing run
  checkExportFolder(dir);
  double start = parseUtc(run.startedAt);
  if (start < 0) start = static_cast<double>(std::time(nullptr));
  const std::string fileName =
      "events.out.tfevents." + std::to_string(static_cast<long long>(start)) + "." + hostName() + ".ptw";

  // Folders are made as ranks are met; the files get their names only when all is written.
  std::map<int, RankEvents> ranks;
  auto rank = [&](int r) -> RankEvents& {
    auto found = ranks.find(r);
    if (found != ranks.end()) return found->second;
    if (ranks.empty()) {
      for (std::size_t slash = dir.find('/', 1); slash != std::string::npos; slash = dir.find('/', slash + 1))
        makeFolder(dir.substr(0, slash));
      makeFolder(dir);
    }
    const std::string folder = dir + "/rank" + std::to_string(r);
    makeFolder(folder);
    RankEvents events{std::make_unique<EventFileWriter>(folder + "/" + fileName, start), RankTimeline(start)};
    return ranks.emplace(r, std::move(events)).first->second;
  };

  // Note [TensorBoard export]
  // Every stored series is written by one loop of writer.scalar(tag, step, value, wall), into
  // its rank's file; a value is stored as TensorBoard's float32. A new source of series is one
  // more loop, after the step records so that its rank's times are known (Note [Export wall
  // time]), with tags that cannot be taken for another's (the named scalars' "scalars/"
  // prefix). docs/export.md lists the tags; test_export reads the files back with protobuf
  // and compares every value.

  // Every field of every step record but the step itself, tagged with its column name.
  std::int64_t scalars = 0;
  store.forEachStep(runId, [&](const StepRecord& s) {
    RankEvents& r = rank(s.rank);
    const double wall = r.time.advance(s.step, s.stepMs);
    StepRecord::forEachField([&](const char* name, auto m) {
      // Note [Not reported]: what nobody reported is left out, not written as a value.
      if constexpr (std::is_same_v<StepFieldType<decltype(m)>, std::int64_t>) {
        // The step is the x axis; a script's own counter is the CSV's (script_step).
        if (m == &StepRecord::step || m == &StepRecord::stepOffset || !isReported(s.*m)) return;
      } else {
        if (m == &StepRecord::loss ? isNotReported(s.*m) : !isReported(s.*m)) return;
      }
      r.writer->scalar(name, s.step, static_cast<float>(s.*m), wall);
      ++scalars;
    });
  });

  // Validation: rank 0 validates, for every rank.
  for (const ValidationRow& v : store.validation(runId)) {
    RankEvents& r = rank(0);
    const double wall = r.time.at(v.step);
    r.writer->scalar("val_loss", v.step, static_cast<float>(v.valLoss), wall);
    ++scalars;
    if (std::isnan(v.valAccuracy)) continue;  // a regression has none
    r.writer->scalar("val_accuracy", v.step, static_cast<float>(v.valAccuracy), wall);
    ++scalars;
  }

  // The named scalars a command run's programs reported (Note [Script ranks]).
  for (const ScalarPoint& p : store.scalars(runId)) {
    RankEvents& r = rank(p.rank);
    r.writer->scalar("scalars/" + p.name, p.step, static_cast<float>(p.value), r.time.at(p.step));
    ++scalars;
  }

  TensorBoardExport out;
  out.scalars = scalars;
  for (auto& [r, events] : ranks) {
    events.writer->close();
    out.files.push_back(events.writer->path());
  }
  return out;
}

}  // namespace ptw::core
