// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/csv_export.h"

#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>
#include <type_traits>

#include "common/error.h"
#include "launch/run_store.h"

namespace ptw::core {
namespace {

// Note [Not reported]: a value nobody reported is an empty cell. A double is written as the
// shortest text that reads back as the same double (0.651298, not 0.65129800000000004).
void putDouble(std::ostream& out, double v) {
  if (std::isnan(v)) return;
  char text[32];
  const auto r = std::to_chars(text, text + sizeof text, v);
  out.write(text, r.ptr - text);
}

// A step field's cell; the loss is the one double that may be a reported NaN (a diverged run).
template <class M>
void putField(std::ostream& out, const StepRecord& r, M m) {
  if constexpr (std::is_same_v<StepFieldType<M>, double>) {
    if (m == &StepRecord::loss && std::isnan(r.loss) && !isNotReported(r.loss))
      out << "nan";
    else
      putDouble(out, r.*m);
  } else if (m == &StepRecord::stepOffset) {
    out << r.ownStep();
  } else if (m == &StepRecord::step || isReported(r.*m)) {
    out << r.*m;
  }
}

// The column of a step field: the offset is shown as the script's own step.
const char* columnName(const char* field) { return std::string_view(field) == "step_offset" ? "script_step" : field; }

}  // namespace

std::int64_t CsvExport::write(std::int64_t runId, const std::string& path) {
  m_store.run(runId);  // names a missing run
  const std::string tmp = path + ".tmp";
  std::int64_t rows = 0;
  {
    std::ofstream out(tmp, std::ios::trunc);
    PTW_CHECK(out, path, ": cannot write (", std::strerror(errno), "); choose a writable file");
    rows = writeRows(runId, out);
    out.flush();
    PTW_CHECK(out.good(), path, ": write failed (", std::strerror(errno), ")");
  }
  PTW_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot replace (", std::strerror(errno), ")");
  return rows;
}

void CsvExport::writeHeader(std::ostream& out, const std::vector<std::string>& names) {
  out << "rank";
  StepRecord::forEachField([&](const char* name, auto) { out << ',' << columnName(name); });
  for (const auto& n : names) out << ',' << n;
  out << '\n';
}

// Rows of scalars alone (a step that has scalars and no step record: its step fields empty
// but the step), for the (rank, step) pairs before `before`.
std::int64_t CsvExport::writeScalarsBefore(std::ostream& out, ScalarRows& byStep, std::pair<int, std::int64_t> before) {
  std::int64_t rows = 0;
  while (!byStep.empty() && byStep.begin()->first < before) {
    out << byStep.begin()->first.first;
    bool first = true;
    StepRecord::forEachField([&](const char*, auto) {
      out << ',';
      if (first) out << byStep.begin()->first.second;
      first = false;
    });
    for (double v : byStep.begin()->second) {
      out << ',';
      putDouble(out, v);
    }
    out << '\n';
    byStep.erase(byStep.begin());
    ++rows;
  }
  return rows;
}

// Named scalars (a script's) are columns after the step fields, by (rank, step).
std::int64_t CsvExport::writeRows(std::int64_t runId, std::ostream& out) {
  std::int64_t rows = 0;
  const std::vector<std::string> names = m_store.scalarNames(runId);
  ScalarRows byStep;
  for (std::size_t i = 0; i < names.size(); ++i)
    for (const auto& p : m_store.scalars(runId, names[i], -1, 0, 9e18)) {
      auto& row = byStep[{p.rank, p.step}];
      row.resize(names.size(), std::nan(""));
      row[i] = p.value;
    }
  writeHeader(out, names);
  m_store.forEachStep(runId, [&](const StepRecord& r) {  // by rank, then step
    rows += writeScalarsBefore(out, byStep, {r.rank, r.step}) + 1;
    out << r.rank;
    StepRecord::forEachField([&](const char*, auto m) {
      out << ',';
      putField(out, r, m);
    });
    const auto it = byStep.find({r.rank, r.step});
    for (std::size_t i = 0; i < names.size(); ++i) {
      out << ',';
      if (it != byStep.end()) putDouble(out, it->second[i]);
    }
    if (it != byStep.end()) byStep.erase(it);
    out << '\n';
  });
  return rows + writeScalarsBefore(out, byStep, {INT_MAX, 0});
}

}  // namespace ptw::core
