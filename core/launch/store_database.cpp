// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/store_database.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace ptw::core {
namespace {

// The tables of this build. `steps` and `step_blocks`, the forms of earlier builds, are not
// made: each table and index takes a page even when empty, and a store of thousands of ranks'
// short run pays bytes a record for them. A store that has them keeps them, empty once
// converted (Note [Step blocks]).
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY,
  dir TEXT NOT NULL,
  name TEXT NOT NULL,
  strategy TEXT NOT NULL,
  world INTEGER NOT NULL,
  status TEXT NOT NULL,
  started_at TEXT NOT NULL,
  ended_at TEXT,
  message TEXT,
  final_loss REAL,
  samples_per_s REAL,
  attempts INTEGER NOT NULL DEFAULT 1,
  pid INTEGER NOT NULL,
  host TEXT NOT NULL,
  profile TEXT NOT NULL,
  ptw_version TEXT
);
CREATE TABLE IF NOT EXISTS step_chunks (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  count INTEGER NOT NULL,
  codec INTEGER NOT NULL,
  records BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS step_chunks_by_run ON step_chunks (run_id, rank, first_step);
CREATE TABLE IF NOT EXISTS step_files (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id),
  unpacked_bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS validation (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  val_loss REAL,
  val_accuracy REAL
);
CREATE TABLE IF NOT EXISTS scalars (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL
);
CREATE INDEX IF NOT EXISTS scalars_by_run ON scalars (run_id, name, rank, step);
)sql";

}  // namespace

StoreDatabase::StoreDatabase(const std::string& path, long long sizeLimitKib) : m_path(path) {
  // One thread at a time uses a store (run_store.h), so SQLite's own per-call locking
  // (taken many times a stored record) is left out.
  if (sqlite3_open_v2(m_path.c_str(), &m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string why = m_db ? sqlite3_errmsg(m_db) : "out of memory";
    sqlite3_close(m_db);
    m_db = nullptr;
    PTW_FAIL("run store ", m_path, ": cannot open (", why, "); choose a writable runs directory with --runs-dir");
  }
  sqlite3_busy_timeout(m_db, 5000);  // another ptw writing its own run: wait, don't fail
  try {
    configure(sizeLimitKib);
  } catch (...) {
    sqlite3_close(m_db);
    throw;
  }
}

// Read-only: a reader must not change what a running supervisor writes, so the schema is
// checked rather than brought up to date (a store of an earlier build is migrated by the
// next run, `ptw runs` or `ptw export`).
//
// A WAL database read by a read-only connection needs its -wal and -shm files, which SQLite
// creates when a writer has not (and leaves behind). Where there is no -wal file, no writer
// has the store open: it is read as immutable then, and nothing is created beside it.
StoreDatabase::StoreDatabase(const std::string& path, ReadOnly) : m_path(path) {
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      static const char hex[] = "0123456789abcdef";
      uri += '%';
      uri += hex[(c >> 4) & 15];
      uri += hex[c & 15];
    } else {
      uri += c;
    }
  }
  uri += ::access((path + "-wal").c_str(), F_OK) == 0 ? "?mode=ro" : "?mode=ro&immutable=1";
  if (sqlite3_open_v2(uri.c_str(), &m_db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string why = m_db ? sqlite3_errmsg(m_db) : "out of memory";
    sqlite3_close(m_db);
    m_db = nullptr;
    PTW_FAIL("run store ", m_path, ": cannot open for reading (", why, ")");
  }
  sqlite3_busy_timeout(m_db, 5000);
  bool current = false;
  try {
    current = hasColumn("runs", "ptw_version") && hasColumn("step_chunks", "codec") && hasColumn("scalars", "name");
  } catch (const Error&) {
  }
  if (!current) {
    sqlite3_close(m_db);
    m_db = nullptr;
    PTW_FAIL("run store ", m_path,
             ": lacks the tables this ptw reads (an earlier ptw made it, or it is no run store); "
             "`ptw runs --runs-dir DIR` brings a store of an earlier ptw up to date");
  }
}

StoreDatabase::~StoreDatabase() { sqlite3_close(m_db); }

// The pragmas, the schema, and a store made by an earlier build brought up to it in place,
// keeping its runs: columns added since are added empty (NULL), and every reader treats NULL
// as "not recorded". Earlier builds still open a store migrated so (they name the columns
// they write).
void StoreDatabase::configure(long long sizeLimitKib) {
  // Pages of 32 KiB: a chunk is written in large writes rather than 4 KiB ones, and the
  // room left at the end of a page too small for the next rank's chunk is a small share of
  // it; each table and index takes a page even when empty, so larger pages would cost a
  // store of a few short runs more than they save (a new database only; an existing one
  // keeps its page size).
  exec("PRAGMA page_size=32768");
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=NORMAL");
  // The disk-full tests' cap on the database's size.
  PTW_CHECK(sizeLimitKib >= 0, "run store: the size limit must be >= 0 KiB, got ", sizeLimitKib);
  if (sizeLimitKib > 0) {
    Statement size(m_db, "PRAGMA page_size");
    const long long page = sqlite3_step(size) == SQLITE_ROW ? sqlite3_column_int64(size, 0) : 4096;
    exec(("PRAGMA max_page_count=" + std::to_string(std::max(1LL, sizeLimitKib * 1024 / page))).c_str());
  }
  exec(kSchema);
  if (!hasColumn("runs", "ptw_version")) exec("ALTER TABLE runs ADD COLUMN ptw_version TEXT");
}

void StoreDatabase::exec(const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(m_db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string why = msg ? msg : sqlite3_errmsg(m_db);
    sqlite3_free(msg);
    PTW_FAIL("run store ", m_path, ": ", why);
  }
}

bool StoreDatabase::tryExec(const char* sql) { return sqlite3_exec(m_db, sql, nullptr, nullptr, nullptr) == SQLITE_OK; }

void StoreDatabase::rollback() {
  if (!sqlite3_get_autocommit(m_db)) sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
}

bool StoreDatabase::hasColumn(const char* table, const char* column) {
  Statement info(m_db, (std::string("PRAGMA table_info(") + table + ")").c_str());
  while (sqlite3_step(info) == SQLITE_ROW)
    if (std::strcmp(reinterpret_cast<const char*>(sqlite3_column_text(info, 1)), column) == 0) return true;
  return false;
}

StoreDatabase::Statement::Statement(sqlite3* db, const char* sql) {
  PTW_CHECK(sqlite3_prepare_v2(db, sql, -1, &m_stmt, nullptr) == SQLITE_OK, "run store: ", sqlite3_errmsg(db));
}

StoreDatabase::Snapshot::Snapshot(const StoreDatabase& db)
    : m_db(db.handle()),
      m_on(sqlite3_get_autocommit(m_db) && sqlite3_exec(m_db, "BEGIN", nullptr, nullptr, nullptr) == SQLITE_OK) {}

StoreDatabase::Snapshot::~Snapshot() {
  if (m_on) sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr);
}

std::string StoreDatabase::text(sqlite3_stmt* s, int col) {
  auto p = sqlite3_column_text(s, col);
  return p ? reinterpret_cast<const char*>(p) : "";
}

}  // namespace ptw::core
