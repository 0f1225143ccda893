// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/run_store.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <system_error>

#include "common/error.h"
#include "common/step_block.h"
#include "launch/chunk_archive.h"
#include "launch/csv_export.h"
#include "launch/legacy_step_converter.h"
#include "launch/step_file_writer.h"
#include "launch/store_database.h"

namespace ptw::core {

RunStore::RunStore(const std::string& runsDir, const RunStoreOptions& options) : m_path(runsDir + "/runs.sqlite") {
  std::error_code ec;
  std::filesystem::create_directories(runsDir, ec);
  PTW_CHECK(!ec, "runs directory ", runsDir, ": cannot create (", ec.message(),
            "); choose another with --runs-dir or PTW_RUNS_DIR");
  const std::string blocksDir = runsDir + "/runs.blocks";
  m_db = std::make_unique<StoreDatabase>(m_path, options.sizeLimitKib);
  m_catalog = std::make_unique<RunCatalog>(*m_db);
  m_metrics = std::make_unique<MetricRows>(*m_db);
  m_writer = std::make_unique<StepFileWriter>(*m_db, blocksDir, options.sizeLimitKib * 1024);
  m_archive = std::make_unique<ChunkArchive>(
      *m_db, blocksDir, options.packRecords > 0 ? options.packRecords : ChunkArchive::kPackRecords);
  LegacyStepConverter legacy(*m_db, *m_archive);
  m_catalog->markInterrupted();
  legacy.convertAll(options.conversionProgress);
}

RunStore::~RunStore() {
  try {
    flush();
  } catch (...) {
  }
}

long long RunStore::stepFileLimit() const { return m_writer->limit(); }

std::int64_t RunStore::beginRun(const std::string& dir, const Profile& p) {
  const std::int64_t id = m_catalog->begin(dir, p);
  m_writer->beginRun(id, p.run);
  return id;
}

void RunStore::append(std::int64_t runId, int attempt, const std::vector<Record>& batch) {
  if (!m_error.empty()) return;
  m_metrics->add(runId, attempt, batch);
  m_writer->add(runId, attempt, batch);
  if (std::chrono::steady_clock::now() - m_lastCommit > std::chrono::milliseconds(250)) commitBuffer();
}

void RunStore::flush() { commitBuffer(); }

std::string RunStore::stepFileForRanks(std::int64_t runId) {
  std::string why;  // unused: the ranks then send their records, and append() stores them
  return m_writer->registerFile(runId, why) ? m_writer->pathOf(runId) : "";
}

// The step blocks first (Note [Step blocks]), then the rows; the blocks are dropped once both are written.
void RunStore::commitBuffer() {
  m_lastCommit = std::chrono::steady_clock::now();
  if ((m_writer->empty() && m_metrics->empty()) || !m_error.empty()) return;
  if (!m_writer->empty() && !m_writer->write(m_error)) return;
  if (!m_metrics->commit(m_error)) return;
  m_writer->clear();
}

void RunStore::packSteps(std::int64_t runId, const PackProgress& progress) {
  if (m_writer->isWriting(runId)) {  // this store's own run: what it buffered, and no more appending to this file
    commitBuffer();
    m_writer->close(runId);
  }
  m_archive->pack(runId, progress);
}

void RunStore::packEndedRuns(const RunPackProgress& progress) {
  for (const std::int64_t id : m_archive->endedRunsToPack()) {
    if (!progress)
      packSteps(id);
    else
      packSteps(id, [&](std::int64_t done, std::int64_t total) { progress(id, done, total); });
  }
}

void RunStore::endRun(std::int64_t runId, const std::string& status, const std::string& message, double finalLoss,
                      double samplesPerS, int attempts, const PackProgress& progress) {
  commitBuffer();
  try {
    packSteps(runId, progress);
    packEndedRuns();  // an interrupted run's, or one whose packing failed before
  } catch (const Error&) {
    // Nothing is lost (the blocks are kept and read), so the run is not failed for it; the
    // next run to end, `ptw runs` or `ptw export` tries again.
  }
  // Not given (the window gives none): from the stored records. Throughput is the caller's
  // (the supervisor's meter); none when it counted no step.
  if (!std::isfinite(finalLoss)) finalLoss = lastLoss(runId);
  std::string why;
  if (!m_catalog->end(runId, {status, message, finalLoss, samplesPerS, attempts}, why) && m_error.empty())
    m_error = why;
}

double RunStore::lastLoss(std::int64_t runId) {
  try {
    const auto extents = m_archive->extents(runId);
    if (extents.empty()) return std::nan("");
    std::int64_t last = extents.begin()->second.second;
    for (const auto& [rank, extent] : extents) last = std::max(last, extent.second);
    const auto at = m_archive->collect(runId, -1, last, last);
    double sum = 0;
    for (const auto& r : at) sum += r.loss;
    return at.empty() ? std::nan("") : sum / static_cast<double>(at.size());
  } catch (const Error&) {
    return std::nan("");  // unreadable records leave the final loss empty; the run's status is not theirs to change
  }
}

std::vector<RunRow> RunStore::runs() { return m_catalog->runs(); }

RunRow RunStore::run(std::int64_t id) { return m_catalog->run(id); }

std::vector<StepRecord> RunStore::steps(std::int64_t runId) {
  return m_archive->collect(runId, -1, 0, std::numeric_limits<std::int64_t>::max());
}

void RunStore::forEachStep(std::int64_t runId, const std::function<void(const StepRecord&)>& f) {
  // A window at a time, so that memory does not grow with the run: each read decodes only
  // the chunks and blocks that overlap the window (a chunk on its edge twice).
  for (const auto& [rank, extent] : m_archive->extents(runId)) {
    for (std::int64_t x0 = extent.first; x0 <= extent.second;) {
      const std::int64_t x1 = x0 > extent.second - (kStepWindow - 1) ? extent.second : x0 + (kStepWindow - 1);
      for (const auto& r : m_archive->collect(runId, rank, x0, x1)) f(r);
      if (x1 == extent.second) break;
      x0 = x1 + 1;
    }
  }
}

std::int64_t RunStore::stepCount(std::int64_t runId) { return m_archive->count(runId); }

std::vector<ValidationRow> RunStore::validation(std::int64_t runId) { return m_metrics->validation(runId); }

std::vector<std::string> RunStore::scalarNames(std::int64_t runId) { return m_metrics->scalarNames(runId); }

std::vector<ScalarPoint> RunStore::scalars(std::int64_t runId, const std::string& name, int rank, double x0,
                                           double x1) {
  return m_metrics->scalars(runId, name, rank, x0, x1);
}

std::vector<std::pair<double, double>> RunStore::series(std::int64_t runId, int rank, const std::string& column,
                                                        double x0, double x1) {
  if (column.rfind("scalar:", 0) == 0) {
    std::vector<std::pair<double, double>> out;
    if (rank < 0 || std::isnan(x0) || std::isnan(x1)) return out;
    for (const auto& p : scalars(runId, column.substr(7), rank, std::floor(x0), std::ceil(x1)))
      out.emplace_back(static_cast<double>(p.step), p.value);
    return out;
  }
  double StepRecord::*field = column == "loss"            ? &StepRecord::loss
                              : column == "samples_per_s" ? &StepRecord::samplesPerS
                              : column == "step_ms"       ? &StepRecord::stepMs
                              : column == "lr"            ? &StepRecord::lr
                                                          : nullptr;
  PTW_CHECK(field != nullptr, "run store: no series \"", column, "\"");
  if (rank < 0 || std::isnan(x0) || std::isnan(x1)) return {};
  const double lo = std::max(0.0, std::floor(x0)), hi = std::ceil(x1);
  if (!(hi >= lo)) return {};
  const auto clampStep = [](double v) {
    return v >= 9e18 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(v);
  };
  std::vector<std::pair<double, double>> out;
  for (const auto& r : m_archive->collect(runId, rank, clampStep(lo), clampStep(hi)))
    out.emplace_back(static_cast<double>(r.step), r.*field);
  return out;
}

std::int64_t RunStore::exportCsv(std::int64_t runId, const std::string& path) {
  return CsvExport(*this).write(runId, path);
}

namespace {

// The records a run of `p` stores, over its reporting ranks, or -1 when its length is not
// known. A run of epochs is taken at the steps of single-rank training, an upper bound.
double projectedRecords(const Profile& p) {
  double steps = static_cast<double>(p.hyper.maxSteps);
  if (steps <= 0) {
    if (p.hyper.epochs <= 0 || p.hyper.batchSize <= 0) return -1;
    const double train = std::ceil(static_cast<double>(p.data.samples) * (1.0 - p.data.valFraction));
    steps = static_cast<double>(p.hyper.epochs) * std::ceil(train / static_cast<double>(p.hyper.batchSize));
  }
  const RunOptions& r = p.run;
  double kept = steps;
  if (r.keepEvery > 1 && steps > static_cast<double>(r.keepAllUntil)) {
    const double until = static_cast<double>(r.keepAllUntil), every = static_cast<double>(r.keepEvery);
    kept = until + std::floor(steps / every) - std::floor(until / every);
  }
  return kept * reportingRanks(p);
}

std::string gigabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

}  // namespace

std::string storeSpaceWarning(const Profile& p, const std::string& runsDir, long long freeBytes) {
  const double records = projectedRecords(p);
  if (records <= 0) return "";
  if (freeBytes < 0) {
    std::filesystem::path dir = runsDir.empty() ? "." : runsDir;
    std::error_code ec;
    while (!std::filesystem::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir)
      dir = dir.parent_path();
    struct statvfs vfs {};
    if (::statvfs(dir.c_str(), &vfs) != 0) return "";
    freeBytes = static_cast<long long>(vfs.f_bavail) * static_cast<long long>(vfs.f_frsize);
  }
  const double stored = records * kStoredRecordBytes, peak = records * static_cast<double>(kBlockRecordBytes) + stored;
  if (peak <= static_cast<double>(freeBytes)) return "";
  char count[32];
  std::snprintf(count, sizeof count, "%.0f", records);
  return std::string("run store: this run's ") + count + " step records would take " + gigabytes(peak) +
         " of disk just before it ends (" + gigabytes(stored) + " once stored), and " + runsDir + " has " +
         gigabytes(static_cast<double>(freeBytes)) +
         " free; free space, choose another --runs-dir, or keep fewer records (run.keep_every, "
         "run.keep_all_until)";
}

}  // namespace ptw::core
