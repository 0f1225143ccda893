// SPDX-License-Identifier: GPL-3.0-or-later
// ChunkArchive: the run store's step records, read and packed. A run's records are in two
// forms (Note [Step blocks] in launch/run_store.h): compressed chunks in the database
// (`step_chunks`, launch/step_chunk.h), and the blocks of its live step file past the length
// already packed (`step_files`). This archive packs a step file's blocks into chunks and
// reads both forms as one, so a record is visible as soon as it is written.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/record.h"
#include "common/step_block.h"
#include "launch/chunk_decoder.h"

struct sqlite3_stmt;

namespace ptw::core {

class StepFileReader;
class StoreDatabase;

// Note [Packs of ranks]
// A chunk costs its header, its zstd frame, its row and index entry, and the room it leaves at
// the end of a database page that no chunk fits: a few hundred bytes, nothing for a rank of
// thousands of records a stretch, bytes a record for thousands of ranks of a hundred records
// each. A rank with fewer than kShareRecords records in a stretch therefore shares a pack
// (codec 3, launch/step_chunk.h) with the next ranks of its attempt, up to kChunkRecords
// records over them: the pack is the row of its first rank, and each other rank's row holds a
// reference to it (the pack's serial, which is the stretch's start in the step file, its row's
// rank and first step, and where the rank's records start in it). So every rank keeps a row
// of its own with its steps and count, which a reader of one rank, of the extents or of the
// count reads as before; reading one rank's records decodes the whole pack, which the
// decoder keeps for the next rank's row (launch/chunk_decoder.h). A pack is larger than a
// page: SQLite fills the overflow pages of a large row whole, and the ranks' small rows fill
// the room left beside the part that stays in the leaf page.
class ChunkArchive {
 public:
  /// The step records of `db`, the step files of its runs in `blocksDir`; pack() holds
  /// `packRecords` records a transaction (kPackRecords), the last one up to half as many more.
  ChunkArchive(StoreDatabase& db, std::string blocksDir, std::int64_t packRecords = kPackRecords);

  /// Called as step records become chunks: `done` of `total`.
  using Progress = std::function<void(std::int64_t done, std::int64_t total)>;
  /// Records on their way into chunks: of one attempt and rank, from a step file's block
  /// that ends at `end` (or from rows of an earlier build's form).
  struct Pending {
    int attempt = 0, rank = 0;
    long long end = 0;
    std::vector<StepRecord> records;
  };
  /// At most this many records a chunk: what a reader of a range of steps unpacks at most.
  static constexpr std::int64_t kChunkRecords = 2 * kBlockRecords;
  /// At most this many records a chunk that pack() makes: a few KiB, so that the database's
  /// pages, which hold whole chunks, are left with little room at their end that no chunk
  /// fits (larger chunks save few bytes a record more).
  static constexpr std::int64_t kPackChunkRecords = 256;
  /// A rank with fewer records than this in a stretch shares a pack with other ranks (Note
  /// [Packs of ranks]).
  static constexpr std::int64_t kShareRecords = 4 * kPackChunkRecords;
  /// At most this many records a transaction of pack(), over the ranks: fewer and larger
  /// chunks cost fewer bytes a record, and the write lock is held a fraction of a second.
  static constexpr std::int64_t kPackRecords = 64 * kBlockRecords;

  /// The records of `pending` that end past `after`, as one chunk per attempt and rank,
  /// inserted in the transaction the caller holds. False when an insert fails.
  bool insert(std::int64_t runId, const std::vector<Pending>& pending, long long after);
  /// Packs the blocks of the run's step file into chunks and removes the file (Note [Step
  /// blocks]), reporting to `progress` from 0 of all, once a block, to all. Its writer must
  /// have stopped. Throws ptw::Error when it cannot (the blocks are then kept and still read).
  void pack(std::int64_t runId, const Progress& progress = {});
  /// The runs not `running` whose step file is not all chunks: interrupted, or whose packing failed.
  std::vector<std::int64_t> endedRunsToPack();

  /// Step records of `runId` in [x0, x1] of `rank` (-1: every rank), ordered by rank and
  /// step, where attempts overlap the latest attempt's.
  std::vector<StepRecord> collect(std::int64_t runId, int rank, std::int64_t x0, std::int64_t x1);
  /// The first and last step of each rank's records of `runId`.
  std::map<int, std::pair<std::int64_t, std::int64_t>> extents(std::int64_t runId);
  /// The records of `runId`, every attempt's.
  std::int64_t count(std::int64_t runId);

 private:
  std::string stepFilePath(std::int64_t runId) const { return m_blocksDir + "/" + std::to_string(runId); }
  /// How much of a run's step file is chunks already, or -1 when the run has none to read.
  long long packedBytes(std::int64_t runId);
  void readChunks(std::int64_t runId, int rank, std::int64_t x0, std::int64_t x1,
                  const std::function<void(int attempt, const StepRecord&)>& f);
  bool packWindow(std::int64_t runId, const StepFileReader& file, const std::vector<BlockHeader>& blocks);
  void insertStretch(std::int64_t runId, const StepFileReader& file, const std::vector<BlockHeader>& blocks,
                     const std::vector<std::size_t>& order, std::uint64_t serial);
  void insertRanksChunks(sqlite3_stmt* insert, std::int64_t runId, const StepFileReader& file,
                         const std::vector<BlockHeader>& blocks, const std::vector<std::size_t>& order, std::size_t k,
                         std::size_t end, std::int64_t n);
  bool insertChunk(sqlite3_stmt* insert, std::int64_t runId, int attempt, int rank,
                   const std::vector<StepRecord>& records);
  bool insertPack(sqlite3_stmt* insert, std::int64_t runId, int attempt, const std::vector<StepRecord>& records,
                  std::uint64_t serial);
  void forgetStepFile(std::int64_t runId);
  [[noreturn]] void failPacking(std::int64_t runId);

  StoreDatabase& m_db;
  std::string m_blocksDir;
  std::int64_t m_packRecords;
  ChunkDecoder m_decoder{m_db};
};

}  // namespace ptw::core
