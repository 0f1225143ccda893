// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/chunk_decoder.h"

#include <sqlite3.h>

#include "common/error.h"
#include "launch/store_database.h"

namespace ptw::core {

ChunkDecoder::Row ChunkDecoder::Row::fromColumns(sqlite3_stmt* s, int first, std::int64_t runId) {
  Row row;
  row.runId = runId;
  row.attempt = sqlite3_column_int(s, first);
  row.rank = sqlite3_column_int(s, first + 1);
  row.firstStep = sqlite3_column_int64(s, first + 2);
  row.count = sqlite3_column_int64(s, first + 3);
  row.codec = sqlite3_column_int(s, first + 4);
  row.blob = static_cast<const unsigned char*>(sqlite3_column_blob(s, first + 5));
  row.size = static_cast<std::size_t>(sqlite3_column_bytes(s, first + 5));
  return row;
}

void ChunkDecoder::decode(const Row& row, std::vector<StepRecord>& out) {
  PTW_CHECK(readsChunkCodec(row.codec), "run store ", m_db.path(), ": run ", row.runId, " has step chunks of codec ",
            row.codec, ", this build reads ", kOldestChunkCodec, " to ", kPackCodec, " (written by a newer ptw?)");
  if (row.codec < kPackCodec) {
    unpackChunk(row.blob, row.size, row.count, row.rank, out);
    return;
  }
  const std::optional<PackReference> ref = readReference(row.blob, row.size);
  const std::vector<StepRecord>* records = nullptr;
  if (ref) {
    records = &pack(row, *ref, false);
  } else {
    const std::optional<std::uint64_t> serial = packSerial(row.blob, row.size);
    PTW_CHECK(serial, "run store ", m_db.path(), ": run ", row.runId, "'s step chunk of rank ", row.rank,
              " is neither a pack nor a reference to one");
    records = &pack(row, PackReference{*serial, row.rank, row.firstStep, 0}, true);
  }
  const std::int64_t offset = ref ? ref->offset : 0;
  PTW_CHECK(row.count >= 0 && offset + row.count <= static_cast<std::int64_t>(records->size()), "run store ",
            m_db.path(), ": run ", row.runId, "'s step chunk of rank ", row.rank, " holds records ", offset, " to ",
            offset + row.count, " of a pack of ", records->size());
  const auto from = records->begin() + offset, to = from + row.count;
  for (auto r = from; r != to; ++r)
    PTW_CHECK(r->rank == row.rank, "run store ", m_db.path(), ": run ", row.runId, "'s step chunk of rank ", row.rank,
              " points at a record of rank ", r->rank, " in its pack");
  out.insert(out.end(), from, to);
}

// The records of the pack `ref` names: the row's own blob when `own`, else the row of the
// pack's first rank, found by its rank and first step (the index's) and told from another
// pack there by its serial.
const std::vector<StepRecord>& ChunkDecoder::pack(const Row& row, const PackReference& ref, bool own) {
  const Key key{row.runId, row.attempt, ref.rank, ref.firstStep, ref.serial};
  if (m_key == key) return m_pack;
  m_key.reset();
  m_pack.clear();
  if (own) {
    unpackRanks(row.blob, row.size, m_pack);
    m_key = key;
    return m_pack;
  }
  StoreDatabase::Statement s(m_db,
                             "SELECT records FROM step_chunks WHERE run_id = ?1 AND rank = ?2 AND first_step = ?3 "
                             "AND attempt = ?4 AND codec = ?5");
  sqlite3_bind_int64(s, 1, row.runId);
  sqlite3_bind_int(s, 2, ref.rank);
  sqlite3_bind_int64(s, 3, ref.firstStep);
  sqlite3_bind_int(s, 4, row.attempt);
  sqlite3_bind_int(s, 5, kPackCodec);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const auto* blob = static_cast<const unsigned char*>(sqlite3_column_blob(s, 0));
    const auto size = static_cast<std::size_t>(sqlite3_column_bytes(s, 0));
    if (packSerial(blob, size) != ref.serial) continue;
    unpackRanks(blob, size, m_pack);
    m_key = key;
    return m_pack;
  }
  PTW_CHECK(rc == SQLITE_DONE, "run store ", m_db.path(), ": cannot read run ", row.runId, "'s steps (", m_db.error(),
            ")");
  PTW_FAIL("run store ", m_db.path(), ": run ", row.runId, "'s step chunk of rank ", row.rank,
           " refers to a pack in the row of rank ", ref.rank, " at step ", ref.firstStep, " that is not there");
}

}  // namespace ptw::core
