// SPDX-License-Identifier: GPL-3.0-or-later
// CsvExport: a run's step records as CSV (`ptw export`, the window's File menu): a header
// row, a row per step record ordered by rank and step (the latest attempt's where attempts
// overlap), every value as the shortest text that reads back exactly (empty where nobody reported
// it), then a column per named scalar.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/record.h"

namespace ptw::core {

class RunStore;

class CsvExport {
 public:
  explicit CsvExport(RunStore& store) : m_store(store) {}
  /// Writes run `runId` to `path`, atomically, and returns the rows written below the
  /// header. Throws ptw::Error naming the run or the file.
  std::int64_t write(std::int64_t runId, const std::string& path);

 private:
  /// The named scalars of a run, by (rank, step): a value per name, NaN where it has none.
  using ScalarRows = std::map<std::pair<int, std::int64_t>, std::vector<double>>;
  std::int64_t writeRows(std::int64_t runId, std::ostream& out);
  static void writeHeader(std::ostream& out, const std::vector<std::string>& names);
  static std::int64_t writeScalarsBefore(std::ostream& out, ScalarRows& byStep, std::pair<int, std::int64_t> before);

  RunStore& m_store;
};

}  // namespace ptw::core
