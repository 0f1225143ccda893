// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/chunk_archive.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "common/error.h"
#include "launch/step_chunk.h"
#include "launch/step_file_reader.h"
#include "launch/store_database.h"

namespace ptw::core {

using Statement = StoreDatabase::Statement;

ChunkArchive::ChunkArchive(StoreDatabase& db, std::string blocksDir, std::int64_t packRecords)
    : m_db(db), m_blocksDir(std::move(blocksDir)), m_packRecords(packRecords) {
  PTW_CHECK(packRecords > 0, "run store: the records a packing transaction holds must be > 0, got ", packRecords);
}

long long ChunkArchive::packedBytes(std::int64_t runId) {
  Statement s(m_db, "SELECT unpacked_bytes FROM step_files WHERE run_id = ?");
  sqlite3_bind_int64(s, 1, runId);
  const int rc = sqlite3_step(s);
  PTW_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, "run store: cannot read step_files (", m_db.error(), ")");
  return rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
}

namespace {

// A row of `step_chunks`, inserted with `insert`: false when the insert fails.
bool insertRow(sqlite3_stmt* insert, std::int64_t runId, int attempt, int rank, std::int64_t first, std::int64_t last,
               std::int64_t count, int codec, const std::string& blob) {
  sqlite3_reset(insert);
  sqlite3_bind_int64(insert, 1, runId);
  sqlite3_bind_int(insert, 2, attempt);
  sqlite3_bind_int(insert, 3, rank);
  sqlite3_bind_int64(insert, 4, first);
  sqlite3_bind_int64(insert, 5, last);
  sqlite3_bind_int64(insert, 6, count);
  sqlite3_bind_int(insert, 7, codec);
  sqlite3_bind_blob(insert, 8, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
  return sqlite3_step(insert) == SQLITE_DONE;
}

// The first and last step of records [from, to).
std::pair<std::int64_t, std::int64_t> stepsOf(std::vector<StepRecord>::const_iterator from,
                                              std::vector<StepRecord>::const_iterator to) {
  std::int64_t first = from->step, last = first;
  for (auto r = from; r != to; ++r) first = std::min(first, r->step), last = std::max(last, r->step);
  return {first, last};
}

}  // namespace

// One chunk of `records` (of one attempt and rank), inserted with `insert`.
bool ChunkArchive::insertChunk(sqlite3_stmt* insert, std::int64_t runId, int attempt, int rank,
                               const std::vector<StepRecord>& records) {
  const auto [first, last] = stepsOf(records.begin(), records.end());
  return insertRow(insert, runId, attempt, rank, first, last, static_cast<std::int64_t>(records.size()), kChunkCodec,
                   packChunk(records));
}

// A pack of `records` (of one attempt, each rank's together): the row of its first rank holds
// it, each other rank's row a reference to it (Note [Packs of ranks]). One rank alone is a
// chunk of its own.
bool ChunkArchive::insertPack(sqlite3_stmt* insert, std::int64_t runId, int attempt,
                              const std::vector<StepRecord>& records, std::uint64_t serial) {
  if (records.empty()) return true;
  if (records.front().rank == records.back().rank)
    return insertChunk(insert, runId, attempt, records.front().rank, records);
  PackReference ref{serial, records.front().rank, 0, 0};
  const std::string pack = packRanks(records, serial);
  for (auto from = records.begin(); from != records.end();) {
    auto to = from;
    while (to != records.end() && to->rank == from->rank) ++to;
    const auto [first, last] = stepsOf(from, to);
    const bool own = from == records.begin();
    if (own) ref.firstStep = first;
    ref.offset = from - records.begin();
    if (!insertRow(insert, runId, attempt, from->rank, first, last, to - from, kPackCodec,
                   own ? pack : packReference(ref)))
      return false;
    from = to;
  }
  return true;
}

bool ChunkArchive::insert(std::int64_t runId, const std::vector<Pending>& blocks, long long after) {
  Statement insert(m_db, "INSERT INTO step_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  // Each attempt and rank's blocks, in the order given.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].end > after) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(blocks[a].attempt, blocks[a].rank) < std::tie(blocks[b].attempt, blocks[b].rank);
  });
  std::vector<StepRecord> records;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const Pending& b = blocks[order[k]];
    records.insert(records.end(), b.records.begin(), b.records.end());
    const bool last =
        k + 1 == order.size() || blocks[order[k + 1]].attempt != b.attempt || blocks[order[k + 1]].rank != b.rank;
    if (!last || records.empty()) continue;
    if (!insertChunk(insert, runId, b.attempt, b.rank, records)) return false;
    records.clear();
  }
  return true;
}

void ChunkArchive::failPacking(std::int64_t runId) {
  const std::string why = m_db.error();
  m_db.rollback();
  PTW_FAIL("run store ", m_db.path(), ": cannot pack run ", runId, "'s step blocks into chunks (", why,
           "); they are kept and still read");
}

// The blocks of a stretch of the step file, those past what is chunks already (another
// connection may have packed some meanwhile), as chunks of each attempt and rank's records in
// file order, about kPackChunkRecords each, and the file's packed length moved past them, in one
// transaction; false when another connection packed all of the file meanwhile (its row
// gone), and there is nothing left to do. Holds one chunk's records at a time.
bool ChunkArchive::packWindow(std::int64_t runId, const StepFileReader& file, const std::vector<BlockHeader>& blocks) {
  if (!m_db.tryExec("BEGIN IMMEDIATE")) failPacking(runId);
  long long now = 0;
  try {
    now = packedBytes(runId);
  } catch (const Error&) {
    failPacking(runId);
  }
  if (now < 0) {
    if (!m_db.tryExec("COMMIT")) failPacking(runId);
    return false;
  }
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].end() > now) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(blocks[a].attempt, blocks[a].rank) < std::tie(blocks[b].attempt, blocks[b].rank);
  });
  try {
    insertStretch(runId, file, blocks, order, static_cast<std::uint64_t>(now));
  } catch (...) {
    m_db.rollback();  // a step file that cannot be read: nothing of the stretch is chunks
    throw;
  }
  if (!order.empty()) {
    Statement advance(m_db, "UPDATE step_files SET unpacked_bytes = ? WHERE run_id = ?");
    sqlite3_bind_int64(advance, 1, blocks.back().end());
    sqlite3_bind_int64(advance, 2, runId);
    if (sqlite3_step(advance) != SQLITE_DONE) failPacking(runId);
  }
  if (!m_db.tryExec("COMMIT")) failPacking(runId);
  return true;
}

// The chunks of blocks `order` (each attempt and rank's together, in file order), inserted:
// a rank of many records in chunks of its own, the others in packs of several ranks (Note
// [Packs of ranks]) of the stretch's `serial`.
void ChunkArchive::insertStretch(std::int64_t runId, const StepFileReader& file, const std::vector<BlockHeader>& blocks,
                                 const std::vector<std::size_t>& order, std::uint64_t serial) {
  Statement insert(m_db, "INSERT INTO step_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  std::vector<StepRecord> shared;
  std::vector<unsigned char> bytes;
  int sharedAttempt = 0;
  auto sameGroup = [&](std::size_t i, std::size_t j) {
    return blocks[order[i]].attempt == blocks[order[j]].attempt && blocks[order[i]].rank == blocks[order[j]].rank;
  };
  auto flushShared = [&] {
    if (!insertPack(insert, runId, sharedAttempt, shared, serial)) failPacking(runId);
    shared.clear();
  };
  for (std::size_t k = 0; k < order.size();) {
    std::size_t end = k;
    std::int64_t n = 0;
    for (; end < order.size() && sameGroup(end, k); ++end) n += blocks[order[end]].count;
    const int attempt = blocks[order[k]].attempt, rank = blocks[order[k]].rank;
    if (n >= kShareRecords) {
      insertRanksChunks(insert, runId, file, blocks, order, k, end, n);
    } else {
      if (!shared.empty() && (attempt != sharedAttempt || static_cast<std::int64_t>(shared.size()) + n > kChunkRecords))
        flushShared();
      sharedAttempt = attempt;
      for (std::size_t j = k; j < end; ++j) {
        const BlockHeader& b = blocks[order[j]];
        // A block whose records are not what was written (the pages a crash left) is passed over, as readers do.
        if (file.read(b, bytes))
          StepFileReader::forEachRecord(bytes.data(), bytes.size(), b.count, rank, b.fields,
                                        [&](const StepRecord& r) { shared.push_back(r); });
      }
    }
    k = end;
  }
  flushShared();
}

// The records of blocks order[k, end) (of one attempt and rank, `n` by their headers) in
// chunks of one size, as few as hold them: chunks of 256, 256 and 88 records leave more
// room at the pages' ends that no chunk fits than three of 200. Holds one chunk's records at
// a time.
void ChunkArchive::insertRanksChunks(sqlite3_stmt* insert, std::int64_t runId, const StepFileReader& file,
                                     const std::vector<BlockHeader>& blocks, const std::vector<std::size_t>& order,
                                     std::size_t k, std::size_t end, std::int64_t n) {
  const std::int64_t chunks = std::max<std::int64_t>(1, (n + kPackChunkRecords - 1) / kPackChunkRecords);
  const auto most = static_cast<std::size_t>(std::max<std::int64_t>(1, (n + chunks - 1) / chunks));
  std::vector<StepRecord> records;
  std::vector<unsigned char> bytes;
  for (std::size_t j = k; j < end; ++j) {
    const BlockHeader& b = blocks[order[j]];
    if (file.read(b, bytes))
      StepFileReader::forEachRecord(bytes.data(), bytes.size(), b.count, b.rank, b.fields,
                                    [&](const StepRecord& r) { records.push_back(r); });
    const bool last = j + 1 == end;
    std::size_t at = 0;
    while (records.size() - at >= most || (last && at < records.size())) {
      const std::size_t count = std::min(most, records.size() - at);
      const std::vector<StepRecord> chunk(records.begin() + static_cast<std::ptrdiff_t>(at),
                                          records.begin() + static_cast<std::ptrdiff_t>(at + count));
      if (!insertChunk(insert, runId, b.attempt, b.rank, chunk)) failPacking(runId);
      at += count;
    }
    records.erase(records.begin(), records.begin() + static_cast<std::ptrdiff_t>(at));
  }
}

// All of the file that can be read is chunks. The file goes first: a crash between the two
// leaves a row whose file is gone, which readers skip and the next packing drops.
void ChunkArchive::forgetStepFile(std::int64_t runId) {
  const std::string file = stepFilePath(runId);
  if (::unlink(file.c_str()) != 0 && errno != ENOENT)
    PTW_FAIL("run store ", m_db.path(), ": cannot remove ", file, " (", std::strerror(errno), ") after packing it");
  Statement forget(m_db, "DELETE FROM step_files WHERE run_id = ?");
  sqlite3_bind_int64(forget, 1, runId);
  if (sqlite3_step(forget) != SQLITE_DONE) failPacking(runId);
}

// A transaction packs the blocks of a stretch of the file, at most kPackRecords records over
// the ranks, into chunks of a rank each (packWindow), and moves the file's packed length past
// them: a reader sees each block either in the file or in a chunk, never neither nor both.
// The stretch is long enough that each rank's chunk of a run of thousands of ranks holds a
// few hundred records (what a record costs the store falls as a chunk grows), short enough
// that another run writing to the same store is not kept waiting long. Each block's records
// are read once; progress counts a block passed over as done.
void ChunkArchive::pack(std::int64_t runId, const Progress& progress) {
  const StepFileReader file(stepFilePath(runId));
  const long long from = packedBytes(runId);
  std::int64_t total = 0, done = 0;
  if (file.isOpen() && from >= 0)
    file.forEachBlock(from, [&](const BlockHeader& b) {
      total += b.count;
      return true;
    });
  if (progress && total > 0) progress(0, total);
  // A stretch's headers at a time, not the file's: what packing holds does not grow with
  // the run. Progress is told between transactions, once a block: what it does may read the store.
  // A stretch that would leave less than half a stretch takes the rest too: each rank's
  // records of the last one would make chunks of a few records each, each paying a chunk's
  // header, frame and row.
  std::vector<BlockHeader> blocks;
  std::int64_t taken = 0;
  for (long long at = from; file.isOpen() && from >= 0; at = blocks.back().end()) {
    blocks.clear();
    std::int64_t stretch = 0;
    file.forEachBlock(at, [&](const BlockHeader& b) {
      blocks.push_back(b);
      stretch += b.count;
      return stretch < m_packRecords || total - taken - stretch < m_packRecords / 2;
    });
    taken += stretch;
    if (blocks.empty() || !packWindow(runId, file, blocks)) break;
    for (const BlockHeader& b : blocks)
      if (progress) progress(done += b.count, total);
  }
  if (from >= 0) forgetStepFile(runId);
}

std::vector<std::int64_t> ChunkArchive::endedRunsToPack() {
  std::vector<std::int64_t> out;
  Statement q(m_db, "SELECT run_id FROM step_files EXCEPT SELECT id FROM runs WHERE status = 'running'");
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) out.push_back(sqlite3_column_int64(q, 0));
  PTW_CHECK(rc == SQLITE_DONE, "run store ", m_db.path(), ": cannot list step files (", m_db.error(), ")");
  return out;
}

// The records of the run's chunks that overlap [x0, x1], with their attempt.
void ChunkArchive::readChunks(std::int64_t runId, int rank, std::int64_t x0, std::int64_t x1,
                              const std::function<void(int attempt, const StepRecord&)>& f) {
  // No rank filter in the text for every rank, so that one rank's range uses the
  // (run_id, rank, first_step) index rather than an `?2 < 0 OR` that defeats it.
  const std::string sql =
      std::string("SELECT attempt, rank, first_step, count, codec, records FROM step_chunks WHERE run_id = ?1") +
      (rank < 0 ? "" : " AND rank = ?2") + " AND last_step >= ?3 AND first_step <= ?4";
  Statement s(m_db, sql.c_str());
  sqlite3_bind_int64(s, 1, runId);
  sqlite3_bind_int(s, 2, rank);
  sqlite3_bind_int64(s, 3, x0);
  sqlite3_bind_int64(s, 4, x1);
  std::vector<StepRecord> chunk;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const auto row = ChunkDecoder::Row::fromColumns(s, 0, runId);
    chunk.clear();
    m_decoder.decode(row, chunk);
    for (const auto& r : chunk) f(row.attempt, r);
  }
  PTW_CHECK(rc == SQLITE_DONE, "run store ", m_db.path(), ": cannot read run ", runId, "'s steps (", m_db.error(), ")");
}

std::vector<StepRecord> ChunkArchive::collect(std::int64_t runId, int rank, std::int64_t x0, std::int64_t x1) {
  struct Found {
    int attempt;
    StepRecord r;
  };
  std::vector<Found> found;
  auto keep = [&](int attempt, const StepRecord& r) {
    if (r.step >= x0 && r.step <= x1) found.push_back({attempt, r});
  };
  const StepFileReader file(stepFilePath(runId));
  const StoreDatabase::Snapshot snapshot(m_db);
  readChunks(runId, rank, x0, x1, keep);
  if (const long long from = packedBytes(runId); file.isOpen() && from >= 0) {
    std::vector<unsigned char> bytes;
    file.forEachBlock(from, [&](const BlockHeader& b) {
      if ((rank >= 0 && b.rank != rank) || b.lastStep < x0 || b.firstStep > x1 || !file.read(b, bytes)) return true;
      StepFileReader::forEachRecord(bytes.data(), bytes.size(), b.count, b.rank, b.fields,
                                    [&](const StepRecord& r) { keep(b.attempt, r); });
      return true;
    });
  }
  // Where a restart replayed steps, the later attempt's record wins.
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.r.rank, a.r.step, a.attempt) < std::tie(b.r.rank, b.r.step, b.attempt);
  });
  std::vector<StepRecord> out;
  out.reserve(found.size());
  for (const auto& f : found) {
    if (!out.empty() && out.back().rank == f.r.rank && out.back().step == f.r.step)
      out.back() = f.r;
    else
      out.push_back(f.r);
  }
  return out;
}

std::map<int, std::pair<std::int64_t, std::int64_t>> ChunkArchive::extents(std::int64_t runId) {
  std::map<int, std::pair<std::int64_t, std::int64_t>> out;
  auto widen = [&out](int rank, std::int64_t first, std::int64_t last) {
    const auto [at, fresh] = out.try_emplace(rank, first, last);
    if (fresh) return;
    at->second.first = std::min(at->second.first, first);
    at->second.second = std::max(at->second.second, last);
  };
  const StepFileReader file(stepFilePath(runId));
  const StoreDatabase::Snapshot snapshot(m_db);
  Statement s(m_db, "SELECT rank, min(first_step), max(last_step) FROM step_chunks WHERE run_id = ?1 GROUP BY rank");
  sqlite3_bind_int64(s, 1, runId);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    widen(sqlite3_column_int(s, 0), sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2));
  PTW_CHECK(rc == SQLITE_DONE, "run store ", m_db.path(), ": cannot read run ", runId, "'s steps (", m_db.error(), ")");
  if (const long long from = packedBytes(runId); file.isOpen() && from >= 0)
    file.forEachBlock(from, [&](const BlockHeader& b) {
      widen(b.rank, b.firstStep, b.lastStep);
      return true;
    });
  return out;
}

std::int64_t ChunkArchive::count(std::int64_t runId) {
  const StepFileReader file(stepFilePath(runId));
  const StoreDatabase::Snapshot snapshot(m_db);
  Statement s(m_db, "SELECT ifnull(sum(count), 0) FROM step_chunks WHERE run_id = ?1");
  sqlite3_bind_int64(s, 1, runId);
  std::int64_t n = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
  if (const long long from = packedBytes(runId); file.isOpen() && from >= 0) {
    std::vector<unsigned char> bytes;
    file.forEachBlock(from, [&](const BlockHeader& b) {
      if (file.read(b, bytes)) n += b.count;  // what the other readers read
      return true;
    });
  }
  return n;
}

}  // namespace ptw::core
