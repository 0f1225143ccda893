// SPDX-License-Identifier: GPL-3.0-or-later
// ChunkDecoder: the step records of a row of `step_chunks`, whichever codec wrote it. A row of
// a pack (Note [Packs of ranks] in launch/chunk_archive.h) holds several ranks' records or
// refers to the row that does; the last pack decoded is kept, so that its ranks' rows, read one
// after another, decode it once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "common/record.h"
#include "launch/step_chunk.h"

struct sqlite3_stmt;

namespace ptw::core {

class StoreDatabase;

class ChunkDecoder {
 public:
  /// Reads the packs that rows refer to from `db`, in the caller's transaction.
  explicit ChunkDecoder(const StoreDatabase& db) : m_db(db) {}

  /// A row of `step_chunks`; `blob` stays the caller's.
  struct Row {
    std::int64_t runId = 0;
    int attempt = 0, rank = 0;
    std::int64_t firstStep = 0, count = 0;
    int codec = 0;
    const unsigned char* blob = nullptr;
    std::size_t size = 0;
    /// The row of a step_chunks query whose columns from `first` are attempt, rank,
    /// first_step, count, codec and blob; valid until the statement steps on.
    static Row fromColumns(sqlite3_stmt* s, int first, std::int64_t runId);
  };
  /// Appends the row's `count` records to `out`. Throws ptw::Error when the row is not one
  /// this build reads, or its pack is not there.
  void decode(const Row& row, std::vector<StepRecord>& out);

 private:
  const std::vector<StepRecord>& pack(const Row& row, const PackReference& ref, bool own);

  const StoreDatabase& m_db;
  // The pack kept: its run, attempt, row's rank and first step, and serial.
  using Key = std::tuple<std::int64_t, int, int, std::int64_t, std::uint64_t>;
  std::optional<Key> m_key;
  std::vector<StepRecord> m_pack;
};

}  // namespace ptw::core
