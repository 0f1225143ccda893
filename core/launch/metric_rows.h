// SPDX-License-Identifier: GPL-3.0-or-later
// MetricRows: the run store's validation records and named scalars, a row each in the
// database (`validation`, `scalars`): buffered as a run appends them, committed with its step
// blocks, and read back by step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/record.h"

struct sqlite3_stmt;

namespace ptw::core {

class StoreDatabase;

/// One value of a named scalar (a script's, reported by name).
struct ScalarPoint {
  int rank = 0;
  std::int64_t step = 0;
  std::string name;
  double value = 0;
};

/// A validation record of a run (rank 0's: the ranks' parameters are equal when it validates).
struct ValidationRow {
  std::int64_t step = 0;
  double valLoss = 0;
  double valAccuracy = 0;  ///< NaN for a regression (none stored)
};

class MetricRows {
 public:
  explicit MetricRows(StoreDatabase& db);
  ~MetricRows();
  MetricRows(const MetricRows&) = delete;
  MetricRows& operator=(const MetricRows&) = delete;

  /// Buffers the validation and scalar records of `batch` (its others are not these rows').
  void add(std::int64_t runId, int attempt, const std::vector<Record>& batch);
  bool empty() const { return m_validation.empty() && m_scalars.empty(); }
  /// Writes what is buffered in one transaction; false, with `error` set, when it cannot (the
  /// buffer is then kept).
  bool commit(std::string& error);

  /// The validation records of a run by step (the latest attempt's, where attempts overlap).
  std::vector<ValidationRow> validation(std::int64_t runId);
  /// The names of the run's named scalars, sorted.
  std::vector<std::string> scalarNames(std::int64_t runId);
  /// The run's named scalars, `name` ("" : all) of `rank` (-1 : all) for steps in [x0, x1],
  /// ordered by name, rank and step; where a restart repeated a step, its latest attempt's.
  std::vector<ScalarPoint> scalars(std::int64_t runId, const std::string& name, int rank, double x0, double x1);

 private:
  bool insertAll();

  StoreDatabase& m_db;
  sqlite3_stmt* m_insertValidation = nullptr;
  sqlite3_stmt* m_insertScalar = nullptr;
  struct Pending {
    std::int64_t runId;
    int attempt;
    Record record;
  };
  std::vector<Pending> m_validation;
  std::vector<Pending> m_scalars;
};

}  // namespace ptw::core
