// SPDX-License-Identifier: GPL-3.0-or-later
// RunStore: every run's metadata and every record of every rank, in one SQLite database
// per runs directory (<runs dir>/runs.sqlite). One writer per run (its supervisor);
// WAL mode so the window can read while a run writes. Records are buffered and written at
// least every 250 ms, so a crash of a worker or of the supervisor loses at most the last
// fraction of a second. Nothing is sampled away, unless the profile asks
// (run.keep_every past run.keep_all_until).
// The schema is documented in docs/storage.md. A RunStore is used by one thread at a time
// (it may be handed from one to another); readers elsewhere open their own. It is made of
// parts, each with a file pair of its own: RunCatalog (the runs), StepFileWriter (a run's
// live step file), ChunkArchive (step records packed into chunks, and read in both forms),
// MetricRows (validation and named scalars), LegacyStepConverter (the forms of earlier
// builds) and CsvExport, over one StoreDatabase.
//
// Note [Step blocks]
// A rank of a small model steps in microseconds, and an indexed SQLite row per record costs
// a sizeable fraction of that: on a machine whose cores all train, one row per record would
// take a noticeable share of a core from the ranks (BENCHMARKS.md). While a run is going,
// its step records are therefore packed in blocks, one per rank per commit holding that
// rank's records (kBlockRecordBytes each, little-endian, layout in common/step_block.h and
// docs/storage.md), and appended to the run's step file, <runs dir>/runs.blocks/<run id>, in
// one write a commit; in a supervised run by the ranks themselves
// (Note [Ranks write their steps] in engine/worker.cpp). The blocks stay out of the
// database: in WAL mode every byte written there is written twice (to the WAL, then copied
// back into the database), besides SQLite's own work.
// When the run ends (endRun) its blocks are packed into `step_chunks`, a stretch of the file
// of 524,288 records or fewer a transaction, as rows of a rank and attempt in that stretch
// (of about 256 records each, or, for a rank of few records there, a place in a pack of several
// ranks: Note [Packs of ranks] in launch/chunk_archive.h), the records compressed field by field
// (launch/step_chunk.h), a few bytes each; an interrupted run's when the next run ends, or at `ptw runs` or `ptw
// export`. Chunks are committed with the length of the file packed so
// far (`step_files`), so a reader reads the file only past what is chunks, and a packing cut
// short resumes where it stopped; the file is removed once all of it is chunks. A run's
// records are so in two forms, chunks and the live step file past them, and every reader
// reads both, so a record is visible as soon as it is written, in whichever form it is at
// the time. A block that is not whole (a write cut short: its rank killed, a crash) is
// passed over, and reading goes on at the next block's header.
// Stores of earlier builds hold `steps`, one row per record, or blocks as rows of
// `step_blocks` in the database. Opening a store converts them into chunks, a transaction
// at a time that adds the chunks and removes the rows they hold: a conversion cut short
// leaves each record in one form, and the next opening finishes it. No reader reads those
// forms.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/profile.h"
#include "common/record.h"
#include "launch/metric_rows.h"
#include "launch/run_catalog.h"

namespace ptw::core {

class ChunkArchive;
class StepFileWriter;
class StoreDatabase;

/// The bytes a step record of the default profile costs the store once its run has ended,
/// at most (Note [Step blocks]; a test holds a realistic run to it): what projections use.
inline constexpr double kStoredRecordBytes = 16;

/// "" when the step records of a run of `profile` would fit in the free disk of `runsDir`,
/// else a warning that says how much they would take, how much is free, and what to do.
/// They take the most just before the run ends: its step file (kBlockRecordBytes a record)
/// and the chunks it is being packed into. A run bounded by neither hyper.max_steps nor
/// hyper.epochs is not projected. `freeBytes` < 0: the free space of the file system that
/// holds `runsDir` (or the nearest folder above it that exists).
std::string storeSpaceWarning(const Profile& profile, const std::string& runsDir, long long freeBytes = -1);

/// How a RunStore is opened.
/// Example: RunStore store(dir, RunStoreOptions().setSizeLimitKib(640));
struct RunStoreOptions {
  /// The KiB the database, and each run's step file, may reach before writes fail as on a
  /// full disk (the disk-full tests); 0: no limit.
  long long sizeLimitKib = 0;
  /// Told how converting the step records of a store of an earlier build goes when it is
  /// opened (Note [Step blocks]), run by run: `done` of `total`, from 0, once a transaction.
  std::function<void(std::int64_t runId, std::int64_t done, std::int64_t total)> conversionProgress = {};
  /// The step records a transaction packs into chunks, the last up to half as many more
  /// (Note [Step blocks]); 0:
  /// ChunkArchive::kPackRecords. The tests of a packing cut short between transactions make
  /// it small.
  std::int64_t packRecords = 0;
  RunStoreOptions& setSizeLimitKib(long long kib) {
    sizeLimitKib = kib;
    return *this;
  }
  RunStoreOptions& setPackRecords(std::int64_t n) {
    packRecords = n;
    return *this;
  }
  RunStoreOptions& setConversionProgress(std::function<void(std::int64_t, std::int64_t, std::int64_t)> f) {
    conversionProgress = std::move(f);
    return *this;
  }
};

class RunStore {
 public:
  /// Opens or creates <runsDir>/runs.sqlite, converting the step records of an earlier
  /// build's store into chunks (Note [Step blocks]). Runs that a supervisor left `running`
  /// and that no live process owns any more are marked `interrupted`. Throws ptw::Error
  /// naming the file when it cannot be opened or written, or its records not converted.
  explicit RunStore(const std::string& runsDir, const RunStoreOptions& options = {});
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore(RunStore&&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  std::string path() const { return m_path; }

  /// Records a new run as `running` by this process; returns its id.
  std::int64_t beginRun(const std::string& dir, const Profile& profile);
  /// Buffers records of attempt `attempt`; commits when the last commit is 250 ms old.
  /// Never throws: a write error (disk full) is kept in error() and later appends are dropped.
  void append(std::int64_t runId, int attempt, const std::vector<Record>& batch);
  /// Commits what is buffered.
  void flush();
  /// The step file the ranks of `runId` append their step records to themselves (Note [Ranks
  /// write their steps] in engine/worker.cpp), made ready for them and its readers; "" when
  /// it cannot be (the ranks then send their records, and append() stores them).
  std::string stepFileForRanks(std::int64_t runId);
  /// The bytes a step file may reach before writes to it fail as on a full disk
  /// (RunStoreOptions::sizeLimitKib); 0: no limit.
  long long stepFileLimit() const;
  /// Called as step records become chunks: `done` of `total`, from 0 (before the first block)
  /// to `total`, once a block (at most 8,192 records).
  using PackProgress = std::function<void(std::int64_t done, std::int64_t total)>;

  /// Marks the run ended and packs its step blocks into chunks (reporting to `progress`). A
  /// final loss not given (NaN) comes from the records; a throughput not given is left empty.
  void endRun(std::int64_t runId, const std::string& status, const std::string& message, double finalLoss,
              double samplesPerS, int attempts, const PackProgress& progress = {});

  /// "" while every write succeeded, else what failed and what to do.
  const std::string& error() const { return m_error; }

  /// Packs the run's step blocks into chunks (Note [Step blocks]); endRun does it.
  /// Throws ptw::Error when it cannot (the blocks are then kept and still read).
  void packSteps(std::int64_t runId, const PackProgress& progress = {});
  /// Packs the blocks of every run that is not running (interrupted, or whose packing
  /// failed), reporting each run's packing to `progress` with its id. endRun does it, after
  /// its own run; long for a large run, so not on a window's thread.
  using RunPackProgress = std::function<void(std::int64_t runId, std::int64_t done, std::int64_t total)>;
  void packEndedRuns(const RunPackProgress& progress = {});

  std::vector<RunRow> runs();
  RunRow run(std::int64_t id);
  /// Step records of a run, ordered by rank then step (the last attempt's, where attempts overlap).
  std::vector<StepRecord> steps(std::int64_t runId);
  /// Calls f for every step record of a run, in the order of steps(), holding only a window
  /// of one rank's steps (kStepWindow) in memory at a time: what an export of a long run reads.
  void forEachStep(std::int64_t runId, const std::function<void(const StepRecord&)>& f);
  static constexpr std::int64_t kStepWindow = 65536;
  std::int64_t stepCount(std::int64_t runId);
  /// The validation records of a run by step (the latest attempt's, where attempts overlap).
  std::vector<ValidationRow> validation(std::int64_t runId);
  /// (step, value) of one rank's `column` (loss | samples_per_s | step_ms | lr | scalar:NAME) for steps in [x0, x1],
  /// the latest attempt's where attempts overlap: what a chart reads when zoomed in.
  std::vector<std::pair<double, double>> series(std::int64_t runId, int rank, const std::string& column, double x0,
                                                double x1);
  /// The names of the run's named scalars, sorted.
  std::vector<std::string> scalarNames(std::int64_t runId);
  /// The run's named scalars, `name` ("" : all) of `rank` (-1 : all) for steps in [x0, x1],
  /// ordered by name, rank and step; where a restart repeated a step, its latest attempt's.
  std::vector<ScalarPoint> scalars(std::int64_t runId, const std::string& name = "", int rank = -1, double x0 = 0,
                                   double x1 = 9e18);
  /// Writes every step record of a run as CSV with a header row, then a column per named
  /// scalar; atomically (CsvExport).
  std::int64_t exportCsv(std::int64_t runId, const std::string& path);

 private:
  void commitBuffer();
  /// The mean over ranks of the loss of the run's last step, from its records; NaN when none.
  double lastLoss(std::int64_t runId);

  std::string m_path;
  std::unique_ptr<StoreDatabase> m_db;  ///< first: the parts below use it until they go
  std::unique_ptr<RunCatalog> m_catalog;
  std::unique_ptr<MetricRows> m_metrics;
  std::unique_ptr<StepFileWriter> m_writer;
  std::unique_ptr<ChunkArchive> m_archive;
  std::chrono::steady_clock::time_point m_lastCommit = std::chrono::steady_clock::now();
  std::string m_error;
};

}  // namespace ptw::core
