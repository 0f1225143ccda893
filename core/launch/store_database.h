// SPDX-License-Identifier: GPL-3.0-or-later
// StoreDatabase: the run store's connection to its SQLite database (<runs dir>/runs.sqlite),
// opened in WAL mode with the store's schema, and the statements and read transactions that
// the store's parts (RunStore and the classes it is made of) share. Used by one thread at a
// time, as a RunStore is.
#pragma once

#include <sqlite3.h>

#include <string>

namespace ptw::core {

class StoreDatabase {
 public:
  /// Opens or creates the database at `path`, brings an earlier build's schema up to this one
  /// and caps its size at `sizeLimitKib` (0: none). Throws ptw::Error naming the file when it
  /// cannot be opened or written.
  StoreDatabase(const std::string& path, long long sizeLimitKib);
  /// Opens the database at `path` for reading only (`ptw follow`, `ptw stop`): nothing is
  /// created, migrated or written. Throws ptw::Error naming the file when it cannot be opened
  /// or is not a store of this build's schema.
  struct ReadOnly {};
  StoreDatabase(const std::string& path, ReadOnly);
  ~StoreDatabase();
  StoreDatabase(const StoreDatabase&) = delete;
  StoreDatabase& operator=(const StoreDatabase&) = delete;

  sqlite3* handle() const { return m_db; }
  const std::string& path() const { return m_path; }
  /// Runs `sql`; throws ptw::Error naming the file when it fails.
  void exec(const char* sql);
  /// Runs `sql`; false when it fails (the connection's error says why).
  bool tryExec(const char* sql);
  /// Rolls back the transaction open on the connection, if any.
  void rollback();
  /// The connection's last error.
  std::string error() const { return sqlite3_errmsg(m_db); }
  /// Whether `table` of the database has `column`.
  bool hasColumn(const char* table, const char* column);

  /// A prepared statement, finalized when it goes; throws ptw::Error when `sql` is not one.
  class Statement {
   public:
    Statement(sqlite3* db, const char* sql);
    Statement(const StoreDatabase& db, const char* sql) : Statement(db.handle(), sql) {}
    ~Statement() { sqlite3_finalize(m_stmt); }
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;
    operator sqlite3_stmt*() const { return m_stmt; }

   private:
    sqlite3_stmt* m_stmt = nullptr;
  };

  /// One read transaction, where the caller is in none: what another connection packs
  /// meanwhile is seen in one form. A run's step file is opened before it begins (Note [Step
  /// blocks]): a file packed and removed after that is still there to read, and one removed
  /// before is all chunks in it.
  class Snapshot {
   public:
    explicit Snapshot(const StoreDatabase& db);
    ~Snapshot();
    Snapshot(const Snapshot&) = delete;
    Snapshot& operator=(const Snapshot&) = delete;

   private:
    sqlite3* m_db;
    bool m_on;
  };

  /// Column `col` of the row at `s` as text, "" for NULL.
  static std::string text(sqlite3_stmt* s, int col);

 private:
  void configure(long long sizeLimitKib);

  std::string m_path;
  sqlite3* m_db = nullptr;
};

}  // namespace ptw::core
