// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/metric_rows.h"

#include <cmath>

#include "common/error.h"
#include "common/step_block.h"
#include "launch/store_database.h"

namespace ptw::core {

MetricRows::MetricRows(StoreDatabase& db) : m_db(db) {
  sqlite3* h = db.handle();
  const bool prepared =
      sqlite3_prepare_v2(h, "INSERT INTO validation VALUES (?, ?, ?, ?, ?)", -1, &m_insertValidation, nullptr) ==
          SQLITE_OK &&
      sqlite3_prepare_v2(h, "INSERT INTO scalars VALUES (?, ?, ?, ?, ?, ?)", -1, &m_insertScalar, nullptr) == SQLITE_OK;
  if (!prepared) {
    const std::string why = sqlite3_errmsg(h);
    sqlite3_finalize(m_insertScalar);
    sqlite3_finalize(m_insertValidation);
    PTW_FAIL("run store: ", why);
  }
}

MetricRows::~MetricRows() {
  sqlite3_finalize(m_insertScalar);
  sqlite3_finalize(m_insertValidation);
}

void MetricRows::add(std::int64_t runId, int attempt, const std::vector<Record>& batch) {
  for (const auto& r : batch)
    if (r.kind == Record::Kind::Validation || r.kind == Record::Kind::Scalar)
      (r.kind == Record::Kind::Validation ? m_validation : m_scalars).push_back({runId, attempt, r});
}

bool MetricRows::commit(std::string& error) {
  if (empty()) return true;
  auto fail = [&](const char* what) {
    const int code = sqlite3_errcode(m_db.handle());
    error = std::string("run store ") + m_db.path() + ": " + what + " failed (" + m_db.error() + ")" +
            (code == SQLITE_FULL ? storeFullAdvice(m_db.path()) : "");
    m_db.rollback();
    return false;
  };
  if (!m_db.tryExec("BEGIN")) return fail("BEGIN");
  if (!insertAll()) return fail("writing metrics");
  if (!m_db.tryExec("COMMIT")) return fail("COMMIT");
  m_validation.clear();
  m_scalars.clear();
  return true;
}

// The buffered rows, in the transaction the caller holds.
bool MetricRows::insertAll() {
  for (const auto& v : m_validation) {
    sqlite3_stmt* s = m_insertValidation;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, v.runId);
    sqlite3_bind_int(s, 2, v.attempt);
    sqlite3_bind_int64(s, 3, v.record.step.step);
    sqlite3_bind_double(s, 4, v.record.valLoss);
    if (v.record.valAccuracy >= 0)
      sqlite3_bind_double(s, 5, v.record.valAccuracy);
    else
      sqlite3_bind_null(s, 5);
    if (sqlite3_step(s) != SQLITE_DONE) return false;
  }
  for (const auto& v : m_scalars) {
    sqlite3_stmt* s = m_insertScalar;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, v.runId);
    sqlite3_bind_int(s, 2, v.attempt);
    sqlite3_bind_int(s, 3, v.record.step.rank);
    sqlite3_bind_int64(s, 4, v.record.step.step);
    const std::string_view name = v.record.scalarName();
    sqlite3_bind_text(s, 5, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
    sqlite3_bind_double(s, 6, v.record.value);  // NaN is stored as NULL and read back as NaN
    if (sqlite3_step(s) != SQLITE_DONE) return false;
  }
  return true;
}

std::vector<ValidationRow> MetricRows::validation(std::int64_t runId) {
  // The latest attempt's record of each step (an attempt after a restart validates again).
  StoreDatabase::Statement s(
      m_db,
      "SELECT step, val_loss, val_accuracy FROM validation v WHERE run_id = ?1 AND attempt = (SELECT "
      "max(attempt) FROM validation w WHERE w.run_id = ?1 AND w.step = v.step) ORDER BY step, rowid");
  sqlite3_bind_int64(s, 1, runId);
  std::vector<ValidationRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    ValidationRow v;
    v.step = sqlite3_column_int64(s, 0);
    v.valLoss = sqlite3_column_type(s, 1) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, 1);
    v.valAccuracy = sqlite3_column_type(s, 2) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, 2);
    if (!out.empty() && out.back().step == v.step)
      out.back() = v;  // the same attempt validated this step twice: the later one
    else
      out.push_back(v);
  }
  PTW_CHECK(rc == SQLITE_DONE, "run store ", m_db.path(), ": cannot read run ", runId, "'s validation (", m_db.error(),
            ")");
  return out;
}

std::vector<std::string> MetricRows::scalarNames(std::int64_t runId) {
  std::vector<std::string> names;
  StoreDatabase::Statement q(m_db, "SELECT DISTINCT name FROM scalars WHERE run_id = ? ORDER BY name");
  sqlite3_bind_int64(q, 1, runId);
  while (sqlite3_step(q) == SQLITE_ROW) names.push_back(StoreDatabase::text(q, 0));
  return names;
}

std::vector<ScalarPoint> MetricRows::scalars(std::int64_t runId, const std::string& name, int rank, double x0,
                                             double x1) {
  StoreDatabase::Statement q(
      m_db,
      "SELECT rank, step, name, value, attempt FROM scalars WHERE run_id = ?1 AND (?2 = '' OR name = ?2) AND "
      "(?3 < 0 OR rank = ?3) AND step BETWEEN ?4 AND ?5 ORDER BY name, rank, step, attempt");
  sqlite3_bind_int64(q, 1, runId);
  sqlite3_bind_text(q, 2, name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(q, 3, rank);
  sqlite3_bind_double(q, 4, x0);
  sqlite3_bind_double(q, 5, x1);
  std::vector<ScalarPoint> out;
  while (sqlite3_step(q) == SQLITE_ROW) {
    ScalarPoint p{sqlite3_column_int(q, 0), sqlite3_column_int64(q, 1), StoreDatabase::text(q, 2),
                  sqlite3_column_type(q, 3) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(q, 3)};
    // Where a restart repeated steps, the later attempt's value (sorted last) stands.
    if (!out.empty() && out.back().rank == p.rank && out.back().step == p.step && out.back().name == p.name)
      out.back() = std::move(p);
    else
      out.push_back(std::move(p));
  }
  return out;
}

}  // namespace ptw::core
