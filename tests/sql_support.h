// SPDX-License-Identifier: GPL-3.0-or-later
// A second connection to a run store's database, as a user's sqlite3 would have: what the
// tests read with plain SQL. Link SQLite::SQLite3.
#pragma once

#include <QTest>

#include <sqlite3.h>

#include <cstdint>
#include <string>

namespace ptw::test {

class Sql {
 public:
  explicit Sql(const std::string& path) { sqlite3_open_v2(path.c_str(), &m_db, SQLITE_OPEN_READWRITE, nullptr); }
  ~Sql() { sqlite3_close(m_db); }
  Sql(const Sql&) = delete;
  Sql& operator=(const Sql&) = delete;
  /// The first column of the first row of `sql`, or -1 when there is none.
  std::int64_t count(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(m_db, sql.c_str(), -1, &s, nullptr);
    const std::int64_t n = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    return n;
  }
  void exec(const std::string& sql) { QCOMPARE(sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK); }
  sqlite3* db() const { return m_db; }

 private:
  sqlite3* m_db = nullptr;
};

}  // namespace ptw::test
