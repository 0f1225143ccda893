// SPDX-License-Identifier: GPL-3.0-or-later
// What a worker tells its launcher, record by record.
//
// Records travel on a pipe of their own (the worker's --records descriptor) as fixed-size
// binary frames, written in batches: encoding one is a few stores, so a rank that steps in
// microseconds pays almost nothing to be watched, and the launcher decodes without parsing
// text. Stray output of libraries on stdout cannot garble them. A worker started by hand,
// without --records, writes the same records as text lines on stdout instead:
//
//   S rank step epoch loss samples_per_s step_ms data_ms compute_ms comm_ms opt_ms lr mem_bytes step_offset
//   V rank step val_loss val_accuracy          validation (accuracy is -1 for regression)
//   G rank first step count loss_sum loss_min loss_max samples busy_ms data_ms compute_ms comm_ms opt_ms
//     then the group's last step record's fields as in S from epoch on: a group of steps
//   H rank step state parameters [entered completed collective]
//                                              heartbeat while alive; state: train|comm|quiet|done;
//                                              the model's parameter count (0: none, a command rank);
//                                              a DDP rank's collective counts and the name of its last
//                                              collective (Note [Collective positions] in engine/)
//   D rank steps                               finished cleanly
//   N rank step name value                     a named scalar (a script's, Note [Script ranks] in command.h)
//
// Frame (kRecordFrameBytes, native byte order: both ends are the same build on one host):
//   u32 magic "PTWR" | u8 kind 'S'/'V'/'H'/'D'/'N' | 3 zero bytes | i32 rank | 4 zero bytes |
//   i64 step | i64 epoch | f64 x 8 (S: loss .. lr; V: val_loss, val_accuracy; H: the state,
//   up to 16 letters, then i64 parameters, i64 entered, i64 completed, the collective's name in 16
//   bytes and a byte 1 when the rank counts its collectives: a frame of a build from before the
//   counts holds zeros there and reads as a rank that does not count them) | i64 mem_bytes: the
//   step fields, in the order of Note [Step fields];
//   N frames hold the name (48 bytes, NUL-padded) where the epoch is, then the value;
//   G frames (kind 'G') then add kGroupFrameBytes - kRecordFrameBytes bytes: i64 first | i64 count | f64 loss_sum,
//   loss_min, loss_max, samples, then the sums of step_ms, data_ms, compute_ms, comm_ms, opt_ms
//
// Note [Step groups]
// A rank of a stored run writes its step records to the run's step file itself (Note [Ranks
// write their steps]) and tells its launcher only a summary of them: one Group record for
// the steps of a window, [w, w + span) where span = stepGroupSpan(w), a power of two that
// grows with the step (1 below step 2048, then step / 1024 rounded down to a power of two,
// at most 4096). The windows are the same on every rank, so the window's mean over ranks
// adds up group by group; they tile the steps, so a window's span is the same for all its
// steps. A group also ends where the rank's records leave (every 250 ms), at its warm-up
// (Note [Warm-up steps]) and at its last step: a window may then come in several groups,
// whose sums add up. So watching a run costs the launcher and the window a record per
// window, not per step (a thousandth of them at step 10^6), what the run stores is every
// record, and a chart keeps each group's extremes.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ptw::core {

// Note [Step fields]
// A step record's fields are listed once, by StepRecord::forEachField: the record frame,
// its text line, the step blocks of a step file, the store's compressed chunks and the CSV
// export all follow that list, in its order. Every field is 8 bytes (an i64 or an f64), so
// that a frame or a block keeps its fields at fixed offsets; the rank is not in the list,
// since a frame and a block carry it in their headers. Adding a field is one line there,
// at the end: a step block's header says how many fields its records hold and a chunk how
// many columns it has, so step files and stores written before read the new field as 0
// (as do the `steps` rows of older stores; frames are only read by the build that wrote
// them).
// Note [Not reported]
// A script reports what it has: a loss and no samples, times in seconds and no split, no
// learning rate. A field nobody reported is "not reported", never 0, wherever it is shown:
// `–` on the console and in the runs list, null in the summary, an empty CSV cell. In a
// step record, a double nobody reported is NaN, an integer (epoch, mem_bytes) is -1. The
// loss is the one field where NaN is also a real value (a diverged run, Note [Diverged
// runs]), so an unreported loss is notReported(), a NaN with a payload of its own, which
// every stage keeps bit for bit (frames, step blocks and chunks copy the bits). It never
// enters arithmetic: StepGroup::add leaves it out of the loss sums, and a group whose
// steps reported no loss holds notReported() there.

/// The loss a step record holds when its rank reported none (Note [Not reported]).
inline double notReported() {
  constexpr std::uint64_t bits = 0x7ff8'0000'0000'7e57ULL;
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
/// Whether `v` is notReported(), bit for bit.
inline bool isNotReported(double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits == 0x7ff8'0000'0000'7e57ULL;
}
/// Whether a step field holds a value: a double that is not NaN (the loss: not
/// notReported()), an integer >= 0.
inline bool isReported(double v) { return !std::isnan(v); }
inline bool isReported(std::int64_t v) { return v >= 0; }
inline bool isReportedLoss(double v) { return !isNotReported(v); }

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
  /// step - the script's own step counter: a command rank's global step (Note [Stretches of
  /// steps] in common/command.h) less the counter the script printed; 0 for ptw's own ranks.
  std::int64_t stepOffset = 0;

  /// The step as its rank counted it (a script's own counter).
  std::int64_t ownStep() const { return step - stepOffset; }

  /// Calls f(name, member) for each field but the rank, in the order of Note [Step fields];
  /// `name` is the field's column name (CSV, the text line's documentation).
  template <class F>
  static constexpr void forEachField(F&& f) {
    f("step", &StepRecord::step);
    f("epoch", &StepRecord::epoch);
    f("loss", &StepRecord::loss);
    f("samples_per_s", &StepRecord::samplesPerS);
    f("step_ms", &StepRecord::stepMs);
    f("data_ms", &StepRecord::dataMs);
    f("compute_ms", &StepRecord::computeMs);
    f("comm_ms", &StepRecord::commMs);
    f("opt_ms", &StepRecord::optMs);
    f("lr", &StepRecord::lr);
    f("mem_bytes", &StepRecord::memBytes);
    f("step_offset", &StepRecord::stepOffset);
  }
  static constexpr std::size_t fieldCount() {
    std::size_t n = 0;
    forEachField([&n](const char*, auto) { ++n; });
    return n;
  }

  /// Every field equal (a record that went through a pipe or the store and came back whole).
  friend bool operator==(const StepRecord& a, const StepRecord& b) {
    bool same = a.rank == b.rank;
    forEachField([&](const char*, auto m) { same = same && a.*m == b.*m; });
    return same;
  }
  friend bool operator!=(const StepRecord& a, const StepRecord& b) { return !(a == b); }
};

/// The type of the field that `member` (a StepRecord member pointer) points at.
template <class M>
using StepFieldType =
    std::remove_cv_t<std::remove_reference_t<decltype(std::declval<StepRecord&>().*std::declval<M>())>>;

namespace detail {
template <class M>
constexpr bool isEightBytes(M) {
  using T = StepFieldType<M>;
  return std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>;
}
constexpr bool allFieldsEightBytes() {
  bool all = true;
  StepRecord::forEachField([&all](const char*, auto m) { all = all && isEightBytes(m); });
  return all;
}
}  // namespace detail
static_assert(detail::allFieldsEightBytes(), "Note [Step fields]: a step field is an std::int64_t or a double");

/// Consecutive step records of one rank, summed (Note [Step groups]).
struct StepGroup {
  std::int64_t first = 0;  ///< the first step; the last is the Record's step
  std::int64_t count = 0;  ///< step records
  double lossSum = 0, lossMin = 0, lossMax = 0;
  double samples = 0;  ///< sum of samples_per_s x step_ms / 1000: the samples of the steps
  double stepMs = 0, dataMs = 0, computeMs = 0, commMs = 0, optMs = 0;  ///< sums

  /// Adds `s`, a later step of the same rank. Losses not reported are left out of the loss
  /// sums, which hold notReported() until one is (Note [Not reported]).
  void add(const StepRecord& s) {
    if (count == 0) first = s.step, lossSum = lossMin = lossMax = notReported();
    ++count;
    if (isReportedLoss(s.loss)) {
      if (isNotReported(lossSum)) {
        lossSum = lossMin = lossMax = s.loss;
      } else {
        lossSum += s.loss;
        lossMin = s.loss < lossMin ? s.loss : lossMin;
        lossMax = s.loss > lossMax ? s.loss : lossMax;
      }
    }
    samples += s.samplesPerS * (s.stepMs / 1000.0);
    stepMs += s.stepMs, dataMs += s.dataMs, computeMs += s.computeMs, commMs += s.commMs, optMs += s.optMs;
  }
  friend bool operator==(const StepGroup& a, const StepGroup& b) {
    return a.first == b.first && a.count == b.count && a.lossSum == b.lossSum && a.lossMin == b.lossMin &&
           a.lossMax == b.lossMax && a.samples == b.samples && a.stepMs == b.stepMs && a.dataMs == b.dataMs &&
           a.computeMs == b.computeMs && a.commMs == b.commMs && a.optMs == b.optMs;
  }
};

/// The span of the window of steps that `step` falls in (Note [Step groups]); the window
/// starts at step - step % span.
inline std::int64_t stepGroupSpan(std::int64_t step) {
  std::int64_t span = 1;
  while (span < 4096 && step / 1024 >= 2 * span) span *= 2;
  return span;
}

/// Plain data (copied by value at every stage between a rank and the store).
struct Record {
  static constexpr std::size_t kStateBytes = 16;
  static constexpr std::size_t kNameBytes = 48;
  enum class Kind { Step, Validation, Heartbeat, Done, Group, Scalar };
  Kind kind = Kind::Step;
  StepRecord step;                   ///< Step: all fields; Group: the group's last step; others: rank and step
  StepGroup group;                   ///< Group
  double valLoss = 0;                ///< Validation
  double valAccuracy = -1;           ///< Validation
  char state[kStateBytes + 1] = {};  ///< Heartbeat: a lower-case word of at most 16 letters, NUL-terminated
  char name[kNameBytes + 1] = {};    ///< Scalar: its name (isScalarName), NUL-terminated
  double value = 0;                  ///< Scalar
  /// Heartbeat: the parameters of the rank's model (0: none yet, or a command rank's program),
  /// so that the window can show the model's size without loading it.
  std::int64_t parameters = 0;
  /// Heartbeat: the collectives the rank has entered and completed, and the name of the last
  /// one it entered (Note [Collective positions] in engine/collective_position.h), when
  /// countsCollectives; a rank that does not count them (not DDP, an older build) has none.
  bool countsCollectives = false;
  std::int64_t collectivesEntered = 0;
  std::int64_t collectivesCompleted = 0;
  char collective[kStateBytes + 1] = {};

  /// Sets `state`, cut to kStateBytes.
  void setState(std::string_view s) {
    const std::size_t n = s.size() < kStateBytes ? s.size() : kStateBytes;
    for (std::size_t i = 0; i <= kStateBytes; ++i) state[i] = i < n ? s[i] : '\0';
  }
  std::string_view stateName() const { return state; }
  /// Sets `name`, cut to kNameBytes.
  void setName(std::string_view s) {
    const std::size_t n = s.size() < kNameBytes ? s.size() : kNameBytes;
    for (std::size_t i = 0; i <= kNameBytes; ++i) name[i] = i < n ? s[i] : '\0';
  }
  std::string_view scalarName() const { return name; }
  /// Sets the collective counts of a heartbeat and the name of its last collective (letters
  /// and '-', cut to kStateBytes).
  void setCollectives(std::int64_t entered, std::int64_t completed, std::string_view last) {
    countsCollectives = true;
    collectivesEntered = entered;
    collectivesCompleted = completed;
    const std::size_t n = last.size() < kStateBytes ? last.size() : kStateBytes;
    for (std::size_t i = 0; i <= kStateBytes; ++i) collective[i] = i < n ? last[i] : '\0';
  }
  std::string_view collectiveName() const { return collective; }
};

/// A named scalar's name: 1 to Record::kNameBytes characters of [A-Za-z0-9_./-].
bool isScalarName(std::string_view name);

/// Whether `r` holds steps: a Step or a Group record.
inline bool holdsSteps(const Record& r) { return r.kind == Record::Kind::Step || r.kind == Record::Kind::Group; }

/// The steps `r` holds, as a group: a step record is a group of one (Note [Step groups]),
/// so that whoever sums steps reads both kinds the same way. Other kinds hold none.
StepGroup asGroup(const Record& r);

/// Samples per second over the steps `r` holds: a step's own rate, exactly as the rank
/// measured it; a group's samples over its time (its last step's rate when it took none).
double samplesPerS(const Record& r);

static_assert(std::is_trivially_copyable_v<Record>);

/// A frame: 16 bytes of magic, kind and rank, then the step fields (Note [Step fields]).
inline constexpr std::size_t kRecordFrameBytes = 16 + 8 * StepRecord::fieldCount();
/// A group's frame: a step frame, then first, count and 9 sums.
inline constexpr std::size_t kGroupFrameBytes = kRecordFrameBytes + 16 + 9 * 8;

/// Appends the frame for `r` to `out`.
void encodeRecord(const Record& r, std::string& out);

/// Decodes the whole frames at the front of `in` into `out` and returns the bytes used (a
/// partial frame at the end is left for the next read). Stops at the first malformed frame
/// and sets `malformed`. Never throws.
std::size_t decodeRecords(std::string_view in, std::vector<Record>& out, bool& malformed);

/// Appends the text line for `r` (with '\n') to `out`: what a worker run by hand prints.
void formatRecord(const Record& r, std::string& out);

}  // namespace ptw::core
