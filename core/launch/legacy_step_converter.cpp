// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/legacy_step_converter.h"

#include <algorithm>
#include <map>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "common/record.h"
#include "common/step_block.h"
#include "launch/chunk_archive.h"
#include "launch/step_file_reader.h"
#include "launch/store_database.h"

namespace ptw::core {
namespace {

using Statement = StoreDatabase::Statement;

// What is read from `steps` after the rowid: attempt, rank and its columns in the order of
// Note [Step fields], 0 for one that a store of an earlier build has not.
std::string stepsColumns(sqlite3* db) {
  Statement info(db, "PRAGMA table_info(steps)");
  std::vector<std::string> has;
  while (sqlite3_step(info) == SQLITE_ROW)
    has.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(info, 1)));
  std::string out = "attempt, rank";
  StepRecord::forEachField([&](const char* name, auto) {
    out += std::string(", ") + (std::find(has.begin(), has.end(), name) != has.end() ? name : "0");
  });
  return out;
}

// The record of the `steps` row at `s`, whose columns from `at` on are stepsColumns()' fields.
StepRecord stepOfRow(sqlite3_stmt* s, int rank, int at) {
  StepRecord r;
  r.rank = rank;
  StepRecord::forEachField([&](const char*, auto m) {
    if constexpr (std::is_same_v<StepFieldType<decltype(m)>, double>)
      r.*m = sqlite3_column_double(s, at++);
    else
      r.*m = sqlite3_column_int64(s, at++);
  });
  return r;
}

}  // namespace

LegacyStepConverter::LegacyStepConverter(StoreDatabase& db, ChunkArchive& archive) : m_db(db), m_archive(archive) {}

void LegacyStepConverter::fail(std::int64_t runId) {
  const std::string why = m_db.error();
  m_db.rollback();
  PTW_FAIL("run store ", m_db.path(), ": cannot convert run ", runId,
           "'s step records of an earlier build into chunks (", why,
           "); they are kept, and converted when the store is opened where it can be written (free space, or "
           "make the runs directory writable)");
}

void LegacyStepConverter::begin(std::int64_t runId) {
  if (!m_db.tryExec("BEGIN IMMEDIATE")) fail(runId);
}

void LegacyStepConverter::commit(std::int64_t runId) {
  if (!m_db.tryExec("COMMIT")) fail(runId);
}

void LegacyStepConverter::convertAll(const Progress& progress) {
  std::map<std::int64_t, std::int64_t> runs;  // run id: its records in earlier forms
  // A store made since has neither table (store_database.cpp's schema).
  const bool rows = m_db.hasColumn("steps", "run_id"), blockRows = m_db.hasColumn("step_blocks", "run_id");
  if (rows || blockRows) {
    std::string sql = rows ? "SELECT run_id, count(*) FROM steps GROUP BY run_id" : "";
    if (blockRows)
      sql += (rows ? " UNION ALL " : "") + std::string("SELECT run_id, sum(count) FROM step_blocks GROUP BY run_id");
    Statement q(m_db, sql.c_str());
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) runs[sqlite3_column_int64(q, 0)] += sqlite3_column_int64(q, 1);
    PTW_CHECK(rc == SQLITE_DONE, "run store ", m_db.path(), ": cannot list the step records of earlier builds (",
              m_db.error(), ")");
  }
  if (runs.empty()) return;
  const std::string columns = stepsColumns(m_db.handle());
  for (const auto& [runId, total] : runs) {
    std::int64_t done = 0;
    if (progress) progress(runId, 0, total);
    if (rows) convertRows(runId, columns, done, total, progress);
    if (blockRows) convertBlockRows(runId, done, total, progress);
  }
}

// The run's `steps` rows, kChunkRecords a transaction in the order of their index (rank,
// step): the chunks they make are added and the rows removed together.
void LegacyStepConverter::convertRows(std::int64_t runId, const std::string& columns, std::int64_t& done,
                                      std::int64_t total, const Progress& progress) {
  const std::string sql = "SELECT rowid, " + columns + " FROM steps WHERE run_id = ? ORDER BY rank, step LIMIT " +
                          std::to_string(ChunkArchive::kChunkRecords);
  Statement read(m_db, sql.c_str());
  Statement drop(m_db, "DELETE FROM steps WHERE rowid = ?");
  for (;;) {
    begin(runId);
    sqlite3_reset(read);
    sqlite3_bind_int64(read, 1, runId);
    std::vector<ChunkArchive::Pending> pending;
    std::vector<std::int64_t> rows;
    int rc;
    while ((rc = sqlite3_step(read)) == SQLITE_ROW) {
      rows.push_back(sqlite3_column_int64(read, 0));
      const int attempt = sqlite3_column_int(read, 1), rank = sqlite3_column_int(read, 2);
      if (pending.empty() || pending.back().attempt != attempt || pending.back().rank != rank)
        pending.push_back({attempt, rank, 0, {}});
      pending.back().records.push_back(stepOfRow(read, rank, 3));
    }
    if (rc != SQLITE_DONE) fail(runId);
    if (rows.empty()) return commit(runId);
    if (!m_archive.insert(runId, pending, -1)) fail(runId);
    for (const std::int64_t row : rows) {
      sqlite3_reset(drop);
      sqlite3_bind_int64(drop, 1, row);
      if (sqlite3_step(drop) != SQLITE_DONE) fail(runId);
    }
    commit(runId);
    done += static_cast<std::int64_t>(rows.size());
    if (progress) progress(runId, done, total);
  }
}

// The run's `step_blocks` rows (blocks of the first layout), a row a transaction.
void LegacyStepConverter::convertBlockRows(std::int64_t runId, std::int64_t& done, std::int64_t total,
                                           const Progress& progress) {
  Statement read(m_db, "SELECT rowid, attempt, rank, count, records FROM step_blocks WHERE run_id = ? LIMIT 1");
  Statement drop(m_db, "DELETE FROM step_blocks WHERE rowid = ?");
  for (;;) {
    begin(runId);
    sqlite3_reset(read);
    sqlite3_bind_int64(read, 1, runId);
    const int rc = sqlite3_step(read);
    if (rc == SQLITE_DONE) return commit(runId);
    if (rc != SQLITE_ROW) fail(runId);
    const std::int64_t row = sqlite3_column_int64(read, 0), count = sqlite3_column_int64(read, 3);
    std::vector<ChunkArchive::Pending> one(1);
    one[0].attempt = sqlite3_column_int(read, 1);
    one[0].rank = sqlite3_column_int(read, 2);
    StepFileReader::forEachRecord(static_cast<const unsigned char*>(sqlite3_column_blob(read, 4)),
                                  static_cast<std::size_t>(sqlite3_column_bytes(read, 4)), count, one[0].rank,
                                  kFirstBlockFields, [&](const StepRecord& r) { one[0].records.push_back(r); });
    sqlite3_reset(read);
    if (!m_archive.insert(runId, one, -1)) fail(runId);
    sqlite3_reset(drop);
    sqlite3_bind_int64(drop, 1, row);
    if (sqlite3_step(drop) != SQLITE_DONE) fail(runId);
    commit(runId);
    done += count;
    if (progress) progress(runId, done, total);
  }
}

}  // namespace ptw::core
