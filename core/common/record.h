// The line protocol a worker speaks to its launcher on stdout: one record per line,
// space-separated, first token the kind. Text keeps it debuggable with `cat` and costs
// ~1 µs a record to write and parse, far below a training step.
//
//   S rank step epoch loss samples_per_s step_ms data_ms compute_ms comm_ms opt_ms lr mem_bytes
//   V rank step val_loss val_accuracy          validation (accuracy is -1 for regression)
//   H rank step state                          heartbeat while alive; state: train|comm|done
//   D rank steps                               finished cleanly
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ptw::core {

struct StepRecord {
  int rank = 0;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double loss = 0;
  double samplesPerS = 0;
  double stepMs = 0;
  double dataMs = 0;
  double computeMs = 0;
  double commMs = 0;
  double optMs = 0;
  double lr = 0;
  std::int64_t memBytes = 0;
};

struct Record {
  enum class Kind { Step, Validation, Heartbeat, Done };
  Kind kind = Kind::Step;
  StepRecord step;          ///< Step: all fields; others: rank and step
  double valLoss = 0;       ///< Validation
  double valAccuracy = -1;  ///< Validation
  std::string state;        ///< Heartbeat
};

/// Appends the line for `r` (with '\n') to `out`.
void formatRecord(const Record& r, std::string& out);

/// Parses one line (without '\n'); nullopt for anything malformed. Never throws.
std::optional<Record> parseRecord(std::string_view line);

}  // namespace ptw::core
