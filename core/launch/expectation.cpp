// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/expectation.h"

#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace ptw::core {

const std::map<std::string, std::string>& knownMetrics() {
  static const std::map<std::string, std::string> metrics = {
      {"final.loss", "training loss of the last step, averaged over ranks"},
      {"final.step", "optimizer steps taken"},
      {"final.val_loss", "validation loss at the end (needs data.val_fraction > 0)"},
      {"final.val_accuracy", "validation accuracy at the end, 0-1 (classification with data.val_fraction > 0)"},
      {"throughput.samples_per_s",
       "samples per second over all ranks (sum of per-rank throughput; warm-up steps left out)"},
      {"throughput.steps_per_s", "optimizer steps per second (slowest rank; warm-up steps left out)"},
      {"wall_s", "wall time of the run in seconds, start to end"},
  };
  return metrics;
}

Expectation Expectation::parse(const std::string& text) {
  static const char* ops[] = {"<=", ">=", "==", "!=", "<", ">"};
  Expectation e;
  e.text = text;
  std::size_t at = std::string::npos;
  for (const char* op : ops) {
    auto pos = text.find(op);
    if (pos != std::string::npos && (at == std::string::npos || pos < at)) {
      at = pos;
      e.op = op;
    }
  }
  PTW_CHECK(at != std::string::npos, "--expect '", text,
            "': expected METRIC OP NUMBER with OP one of < <= > >= == !=, e.g. 'final.loss < 0.05'");
  auto trim = [](std::string s) {
    auto b = s.find_first_not_of(" \t"), end = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, end - b + 1);
  };
  e.metric = trim(text.substr(0, at));
  std::string number = trim(text.substr(at + e.op.size()));
  if (!knownMetrics().count(e.metric)) {
    std::string known;
    for (const auto& [name, _] : knownMetrics()) known += (known.empty() ? "" : ", ") + name;
    PTW_FAIL("--expect '", text, "': unknown metric \"", e.metric, "\" (known: ", known, ")");
  }
  char* end = nullptr;
  e.threshold = std::strtod(number.c_str(), &end);
  PTW_CHECK(!number.empty() && end == number.c_str() + number.size() && std::isfinite(e.threshold), "--expect '", text,
            "': expected a number after ", e.op, ", got \"", number, "\"");
  return e;
}

bool Expectation::holds(double v) const {
  if (std::isnan(v)) return false;
  if (op == "<") return v < threshold;
  if (op == "<=") return v <= threshold;
  if (op == ">") return v > threshold;
  if (op == ">=") return v >= threshold;
  if (op == "==") return v == threshold;
  return v != threshold;
}

}  // namespace ptw::core
