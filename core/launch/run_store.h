// RunStore: every run's metadata and every record of every rank, in one SQLite database
// per runs directory (<runs dir>/runs.sqlite). One writer per run (its supervisor);
// WAL mode so the window can read while a run writes. Records are buffered and committed
// in one transaction at least every 250 ms, so a crash of a worker, of the supervisor or
// of the machine loses at most the last fraction of a second. Nothing is sampled away.
// The schema is documented in the README. A RunStore is used by one thread at a time
// (it may be handed from one to another); readers elsewhere open their own.
//
// Note [Step blocks]
// A rank of a small model steps every ~30 µs, and SQLite takes ~3 µs to insert an indexed
// row: on a machine whose cores all train, one row per record would take a tenth of a
// core from the ranks. While a run is going, its step records are therefore stored in
// blocks, one row of `step_blocks` per rank per commit holding that rank's records packed
// (kBlockRecordBytes each, little-endian, layout in run_store.cpp and the README). When the
// run ends (endRun) its blocks are unpacked into `steps`, one row per record, for plain
// SQL; an interrupted run's when the next run ends, or at `ptw runs` or `ptw export`.
// Every reader here reads both, so a record is visible as soon as it is committed, in
// whichever form it is at the time.
//
// Note [Background checkpoints]
// In WAL mode a commit appends to runs.sqlite-wal, and a checkpoint copies the pages back
// into the database and syncs both files. SQLite does that in the commit that takes the WAL
// past 1,000 pages, on the writer's thread: here the supervisor's, which then reads no
// rank's records for the 50-200 ms the disk takes to sync (every ~13 s at the shared-memory
// rate, longer on a busy disk), while each rank's record pipe holds only ~350 ms of records
// before the rank blocks on it. A store that writes runs hands checkpoints to a thread of
// its own, with its own connection: the commit that takes the WAL past 16 MiB wakes it, and
// it checkpoints without blocking the writer (PASSIVE). A commit then waits for the disk only
// briefly, when it starts the WAL over (a sync of its header), or when the thread has fallen
// behind a disk slower than the run and the WAL has passed 64 MiB (the writer checkpoints
// itself then, as SQLite would, so the WAL stays bounded).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/profile.h"
#include "common/record.h"

struct sqlite3;
struct sqlite3_stmt;

namespace ptw::core {

struct RunRow {
  std::int64_t id = 0;
  std::string dir;
  std::string name;
  std::string strategy;
  int world = 0;
  std::string status;  ///< running | finished | failed | stopped | interrupted
  std::string startedAt, endedAt;  ///< UTC, ISO 8601
  std::string message;
  double finalLoss = 0;
  double samplesPerS = 0;
  int attempts = 0;
  std::string profileJson;
};

class RunStore {
 public:
  /// Opens or creates <runsDir>/runs.sqlite. Runs that a supervisor left `running` and
  /// that no live process owns any more are marked `interrupted`. Throws ptw::Error
  /// naming the file when it cannot be opened or written.
  explicit RunStore(const std::string& runsDir);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore(RunStore&&) = delete;  // its checkpointing thread and WAL hook point into it
  RunStore& operator=(const RunStore&) = delete;

  std::string path() const { return m_path; }

  /// Records a new run as `running` by this process; returns its id.
  std::int64_t beginRun(const std::string& dir, const Profile& profile);
  /// Buffers records of attempt `attempt`; commits when the last commit is 250 ms old.
  /// Never throws: a write error (disk full) is kept in error() and later appends are dropped.
  void append(std::int64_t runId, int attempt, const std::vector<Record>& batch);
  /// Commits what is buffered.
  void flush();
  /// Called as step records become rows: `done` of `total`, from 0 (before the first block)
  /// to `total`, once a block (at most 8,192 records, ~20 ms).
  using UnpackProgress = std::function<void(std::int64_t done, std::int64_t total)>;

  /// Marks the run ended and unpacks its step blocks (reporting to `progress`); the summary
  /// (final loss, throughput) comes from the records when not given (NaN).
  void endRun(std::int64_t runId, const std::string& status, const std::string& message, double finalLoss,
              double samplesPerS, int attempts, const UnpackProgress& progress = {});

  /// "" while every write succeeded, else what failed and what to do.
  const std::string& error() const { return m_error; }

  /// Unpacks the run's step blocks into `steps` rows (Note [Step blocks]); endRun does it.
  /// Throws ptw::Error when it cannot (the blocks are then kept and still read).
  void unpackBlocks(std::int64_t runId, const UnpackProgress& progress = {});
  /// Unpacks the blocks of every run that is not running (interrupted, or whose unpacking
  /// failed). endRun does it, after its own run; ~2 µs a record, so not on a window's thread.
  void unpackEndedRuns();

  std::vector<RunRow> runs();
  RunRow run(std::int64_t id);
  /// Step records of a run, ordered by rank then step (the last attempt's, where attempts overlap).
  std::vector<StepRecord> steps(std::int64_t runId);
  std::int64_t stepCount(std::int64_t runId);
  /// (step, value) of one rank's `column` (loss | samples_per_s | step_ms) for steps in [x0, x1],
  /// the latest attempt's where attempts overlap: what a chart reads when zoomed in.
  std::vector<std::pair<double, double>> series(std::int64_t runId, int rank, const std::string& column, double x0,
                                                double x1);
  /// Writes every step record of a run as CSV with a header row; atomically.
  void exportCsv(std::int64_t runId, const std::string& path);

  /// Checkpoints by this store's checkpointing thread that found new pages to copy into the
  /// database (Note [Background checkpoints]).
  int backgroundCheckpoints();

 private:
  std::vector<RunRow> selectRuns(const char* where, std::int64_t id);
  void startCheckpointer();
  void stopCheckpointer();
  void exec(const char* sql);
  void commitBuffer();
  /// Step records of `runId` in [x0, x1] of `rank` (-1: every rank) from rows and blocks,
  /// ordered by rank and step, where attempts overlap the latest attempt's.
  std::vector<StepRecord> collect(std::int64_t runId, int rank, std::int64_t x0, std::int64_t x1);

  std::string m_path;
  sqlite3* m_db = nullptr;
  sqlite3_stmt* m_insertStep = nullptr;
  sqlite3_stmt* m_insertBlock = nullptr;
  sqlite3_stmt* m_insertValidation = nullptr;
  struct Block {
    std::int64_t runId;
    int attempt;
    int rank;
    std::int64_t firstStep, lastStep, count;
    std::string bytes;
  };
  struct Validation {
    std::int64_t runId;
    int attempt;
    Record record;
  };
  std::vector<Block> m_blocks;  ///< a few: one per rank (and attempt) since the last commit
  std::vector<std::string> m_spare;  ///< emptied block buffers, kept for their mapped pages
  std::vector<Validation> m_validation;
  std::chrono::steady_clock::time_point m_lastCommit = std::chrono::steady_clock::now();
  std::string m_error;
  // Note [Background checkpoints]
  struct Checkpointer {
    std::thread thread;
    std::mutex mutex;
    std::condition_variable wake;
    bool wanted = false, stop = false;
    int done = 0;
    long long pageBytes = 65536;
  } m_checkpoints;
};

}  // namespace ptw::core
