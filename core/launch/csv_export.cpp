// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/csv_export.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "common/error.h"
#include "launch/run_store.h"

namespace ptw::core {

void CsvExport::write(std::int64_t runId, const std::string& path) {
  m_store.run(runId);  // names a missing run
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    PTW_CHECK(out, path, ": cannot write (", std::strerror(errno), "); choose a writable file");
    writeRows(runId, out);
    out.flush();
    PTW_CHECK(out.good(), path, ": write failed (", std::strerror(errno), ")");
  }
  PTW_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot replace (", std::strerror(errno), ")");
}

void CsvExport::writeHeader(std::ostream& out, const std::vector<std::string>& names) {
  out << "rank";
  StepRecord::forEachField([&](const char* name, auto) { out << ',' << name; });
  for (const auto& n : names) out << ',' << n;
  out << '\n';
}

// Rows of scalars alone (a step that has scalars and no step record: its step fields empty
// but the step), for the (rank, step) pairs before `before`.
void CsvExport::writeScalarsBefore(std::ostream& out, ScalarRows& byStep, std::pair<int, std::int64_t> before) {
  while (!byStep.empty() && byStep.begin()->first < before) {
    out << byStep.begin()->first.first;
    bool first = true;
    StepRecord::forEachField([&](const char*, auto) {
      out << ',';
      if (first) out << byStep.begin()->first.second;
      first = false;
    });
    for (double v : byStep.begin()->second) out << ',' << v;
    out << '\n';
    byStep.erase(byStep.begin());
  }
}

// Named scalars (a script's) are columns after the step fields, by (rank, step).
void CsvExport::writeRows(std::int64_t runId, std::ostream& out) {
  const std::vector<std::string> names = m_store.scalarNames(runId);
  ScalarRows byStep;
  for (std::size_t i = 0; i < names.size(); ++i)
    for (const auto& p : m_store.scalars(runId, names[i], -1, 0, 9e18)) {
      auto& row = byStep[{p.rank, p.step}];
      row.resize(names.size(), std::nan(""));
      row[i] = p.value;
    }
  writeHeader(out, names);
  out.precision(std::numeric_limits<double>::max_digits10);  // every value read back exactly
  m_store.forEachStep(runId, [&](const StepRecord& r) {      // by rank, then step
    writeScalarsBefore(out, byStep, {r.rank, r.step});
    out << r.rank;
    StepRecord::forEachField([&](const char*, auto m) { out << ',' << r.*m; });
    const auto it = byStep.find({r.rank, r.step});
    for (std::size_t i = 0; i < names.size(); ++i) {
      out << ',';
      if (it != byStep.end()) out << it->second[i];
    }
    if (it != byStep.end()) byStep.erase(it);
    out << '\n';
  });
  writeScalarsBefore(out, byStep, {INT_MAX, 0});
}

}  // namespace ptw::core
