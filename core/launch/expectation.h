// SPDX-License-Identifier: GPL-3.0-or-later
// Expectations a CI run asserts on its results: `final.loss < 0.05`,
// `throughput.samples_per_s > 1000`. Parsed before the run starts, judged after it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ptw::core {

struct Expectation {
  std::string text;    ///< as given
  std::string metric;  ///< e.g. final.loss
  std::string op;      ///< < <= > >= == !=
  double threshold = 0;

  /// Throws ptw::Error naming the expression and what was expected.
  static Expectation parse(const std::string& text);
  bool holds(double value) const;
};

/// The metrics a run produces, by name, and what each means (for --help and errors).
const std::map<std::string, std::string>& knownMetrics();

}  // namespace ptw::core
