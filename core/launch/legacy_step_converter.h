// SPDX-License-Identifier: GPL-3.0-or-later
// LegacyStepConverter: turns the step records that stores of earlier builds hold in forms of
// their own into chunks, once, when a store is opened (Note [Step blocks] in
// launch/run_store.h): `steps`, a row a record, and `step_blocks`, blocks as rows of the
// database. Each transaction adds chunks and removes the rows they hold, so a conversion cut
// short (a crash, a full disk) leaves every record in one form, and the next opening goes on.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace ptw::core {

class ChunkArchive;
class StoreDatabase;

class LegacyStepConverter {
 public:
  /// Called as a run's records are converted: `done` of `total`, from 0 to `total`, once a transaction.
  using Progress = std::function<void(std::int64_t runId, std::int64_t done, std::int64_t total)>;

  LegacyStepConverter(StoreDatabase& db, ChunkArchive& archive);
  /// Converts every record in an earlier form into chunks. Throws ptw::Error when it cannot
  /// (what is not converted yet is kept, and converted when the store is opened again).
  void convertAll(const Progress& progress = {});

 private:
  void convertRows(std::int64_t runId, const std::string& columns, std::int64_t& done, std::int64_t total,
                   const Progress& progress);
  void convertBlockRows(std::int64_t runId, std::int64_t& done, std::int64_t total, const Progress& progress);
  void begin(std::int64_t runId);
  void commit(std::int64_t runId);
  [[noreturn]] void fail(std::int64_t runId);

  StoreDatabase& m_db;
  ChunkArchive& m_archive;
};

}  // namespace ptw::core
