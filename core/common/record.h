// What a worker tells its launcher, record by record.
//
// Records travel on a pipe of their own (the worker's --records descriptor) as fixed-size
// binary frames, written in batches: encoding one is a few stores, so a rank stepping
// every 30 µs pays almost nothing to be watched, and the launcher decodes without parsing
// text. Stray output of libraries on stdout cannot garble them. A worker started by hand,
// without --records, writes the same records as text lines on stdout instead:
//
//   S rank step epoch loss samples_per_s step_ms data_ms compute_ms comm_ms opt_ms lr mem_bytes
//   V rank step val_loss val_accuracy          validation (accuracy is -1 for regression)
//   H rank step state                          heartbeat while alive; state: train|comm|done
//   D rank steps                               finished cleanly
//
// Frame (kRecordFrameBytes, native byte order: both ends are the same build on one host):
//   u32 magic "PTWR" | u8 kind 'S'/'V'/'H'/'D' | 3 zero bytes | i32 rank | 4 zero bytes |
//   i64 step | i64 epoch | f64 x 8 (S: loss .. lr; V: val_loss, val_accuracy; H: the state,
//   up to 16 letters) | i64 mem_bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

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

  /// Every field equal (a record that went through a pipe or the store and came back whole).
  friend bool operator==(const StepRecord& a, const StepRecord& b) {
    return a.rank == b.rank && a.step == b.step && a.epoch == b.epoch && a.loss == b.loss &&
           a.samplesPerS == b.samplesPerS && a.stepMs == b.stepMs && a.dataMs == b.dataMs &&
           a.computeMs == b.computeMs && a.commMs == b.commMs && a.optMs == b.optMs && a.lr == b.lr &&
           a.memBytes == b.memBytes;
  }
  friend bool operator!=(const StepRecord& a, const StepRecord& b) { return !(a == b); }
};

/// Plain data (copied by value at every stage between a rank and the store).
struct Record {
  static constexpr std::size_t kStateBytes = 16;
  enum class Kind { Step, Validation, Heartbeat, Done };
  Kind kind = Kind::Step;
  StepRecord step;          ///< Step: all fields; others: rank and step
  double valLoss = 0;       ///< Validation
  double valAccuracy = -1;  ///< Validation
  char state[kStateBytes + 1] = {};  ///< Heartbeat: a lower-case word of at most 16 letters, NUL-terminated

  /// Sets `state`, cut to kStateBytes.
  void setState(std::string_view s) {
    const std::size_t n = s.size() < kStateBytes ? s.size() : kStateBytes;
    for (std::size_t i = 0; i <= kStateBytes; ++i) state[i] = i < n ? s[i] : '\0';
  }
  std::string_view stateName() const { return state; }
};

static_assert(std::is_trivially_copyable_v<Record>);

inline constexpr std::size_t kRecordFrameBytes = 104;

/// Appends the frame for `r` to `out`.
void encodeRecord(const Record& r, std::string& out);

/// Decodes the whole frames at the front of `in` into `out` and returns the bytes used (a
/// partial frame at the end is left for the next read). Stops at the first malformed frame
/// and sets `malformed`. Never throws.
std::size_t decodeRecords(std::string_view in, std::vector<Record>& out, bool& malformed);

/// Appends the text line for `r` (with '\n') to `out`: what a worker run by hand prints.
void formatRecord(const Record& r, std::string& out);

/// A worker's exit code after a stop signal that did not come from its launcher (someone ran
/// kill on the rank): it stopped gracefully, with the others, but the run did not end by
/// ptw's own stop, and the launcher says so.
inline constexpr int kWorkerStoppedFromOutside = 5;

}  // namespace ptw::core
