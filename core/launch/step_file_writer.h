// SPDX-License-Identifier: GPL-3.0-or-later
// StepFileWriter: appends the step records a RunStore is given to their run's live step file,
// <runs dir>/runs.blocks/<run id>, in blocks of a rank's records, one write a commit (Note
// [Step blocks] in launch/run_store.h). The ranks of a supervised run append to the same
// file themselves (Note [Ranks write their steps]); this writer makes it ready for them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/profile.h"
#include "common/record.h"

namespace ptw::core {

class StoreDatabase;

class StepFileWriter {
 public:
  /// Writes the step files of `blocksDir` for the store `db`; a file may reach `maxBytes`
  /// before writes to it fail as on a full disk (0: no limit).
  StepFileWriter(StoreDatabase& db, std::string blocksDir, long long maxBytes);
  ~StepFileWriter();
  StepFileWriter(const StepFileWriter&) = delete;
  StepFileWriter& operator=(const StepFileWriter&) = delete;

  /// The step file of `runId`.
  std::string pathOf(std::int64_t runId) const { return m_blocksDir + "/" + std::to_string(runId); }
  long long limit() const { return m_maxBytes; }
  /// A new run, which keeps the step records `keep` says (run.keep_every); a step file by its
  /// id, left from a database removed since, is removed.
  void beginRun(std::int64_t runId, const RunOptions& keep);
  /// Buffers the step records of `batch`, of attempt `attempt` (its other records are not this writer's).
  void add(std::int64_t runId, int attempt, const std::vector<Record>& batch);
  bool empty() const { return m_blocks.empty(); }
  /// Appends the buffered blocks to their runs' step files; false, with `error` set, when it cannot.
  bool write(std::string& error);
  /// Drops the buffered blocks once written, keeping their buffers for the next ones.
  void clear();
  /// Makes the step file's folder and gives the run its step_files row; false (with `why`)
  /// when it cannot.
  bool registerFile(std::int64_t runId, std::string& why);
  /// Whether the step file this writer appends to is that of `runId`.
  bool isWriting(std::int64_t runId) const { return m_file.runId == runId; }
  /// Stops appending to the step file of `runId`, if it is the one open.
  void close(std::int64_t runId);

 private:
  bool open(std::int64_t runId, std::string& error);
  bool writeRun(std::int64_t runId, std::string& error);
  void closeFile();

  StoreDatabase& m_db;
  std::string m_blocksDir;
  long long m_maxBytes = 0;
  std::map<std::int64_t, RunOptions> m_keep;  ///< the runs begun here: which step records they keep
  struct Block {
    std::int64_t runId;
    int attempt;
    int rank;
    std::int64_t firstStep, lastStep, count;
    std::string bytes;
  };
  std::vector<Block> m_blocks;       ///< a few: one per rank (and attempt) since the last commit
  std::vector<std::string> m_spare;  ///< emptied block buffers, kept for their mapped pages
  struct File {
    std::int64_t runId = 0;
    int fd = -1;
    long long bytes = 0;
  } m_file;  ///< the file this writer appends to
};

}  // namespace ptw::core
