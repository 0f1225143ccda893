// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/record.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ptw::core {
namespace {

void appendNumber(std::string& out, double v) {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, " %.9g", v);
  out.append(buf, static_cast<std::size_t>(n));
}
void appendInt(std::string& out, long long v) {
  char buf[24];
  int n = std::snprintf(buf, sizeof buf, " %lld", v);
  out.append(buf, static_cast<std::size_t>(n));
}

// The fields of `s` in the order of Note [Step fields], each after a space; `from` skips
// the fields before the one by that index.
void appendFields(std::string& out, const StepRecord& s, std::size_t from = 0) {
  std::size_t i = 0;
  StepRecord::forEachField([&](const char*, auto m) {
    if (i++ < from) return;
    if constexpr (std::is_same_v<StepFieldType<decltype(m)>, double>)
      appendNumber(out, s.*m);
    else
      appendInt(out, s.*m);
  });
}

}  // namespace

bool isScalarName(std::string_view name) {
  if (name.empty() || name.size() > Record::kNameBytes) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
          c == '/' || c == '-'))
      return false;
  return true;
}

StepGroup asGroup(const Record& r) {
  if (r.kind == Record::Kind::Group) return r.group;
  StepGroup one;
  if (r.kind == Record::Kind::Step) one.add(r.step);
  return one;
}

double samplesPerS(const Record& r) {
  if (r.kind == Record::Kind::Group && r.group.stepMs > 0) return r.group.samples / (r.group.stepMs / 1000.0);
  return r.step.samplesPerS;
}

void formatRecord(const Record& r, std::string& out) {
  const StepRecord& s = r.step;
  switch (r.kind) {
    case Record::Kind::Step:
      out += 'S';
      appendInt(out, s.rank);
      appendFields(out, s);
      break;
    case Record::Kind::Validation:
      out += 'V';
      appendInt(out, s.rank);
      appendInt(out, s.step);
      appendNumber(out, r.valLoss);
      appendNumber(out, r.valAccuracy);
      break;
    case Record::Kind::Heartbeat:
      out += 'H';
      appendInt(out, s.rank);
      appendInt(out, s.step);
      out += ' ';
      out += r.stateName().empty() ? std::string_view("train") : r.stateName();
      appendInt(out, r.parameters);
      if (r.countsCollectives) {
        appendInt(out, r.collectivesEntered);
        appendInt(out, r.collectivesCompleted);
        out += ' ';
        out += r.collectiveName().empty() ? std::string_view("none") : r.collectiveName();
      }
      break;
    case Record::Kind::Done:
      out += 'D';
      appendInt(out, s.rank);
      appendInt(out, s.step);
      break;
    case Record::Kind::Scalar:
      out += 'N';
      appendInt(out, s.rank);
      appendInt(out, s.step);
      out += ' ';
      out += r.scalarName();
      appendNumber(out, r.value);
      break;
    case Record::Kind::Group: {
      const StepGroup& g = r.group;
      out += 'G';
      appendInt(out, s.rank);
      appendInt(out, g.first);
      appendInt(out, s.step);
      appendInt(out, g.count);
      for (double v : {g.lossSum, g.lossMin, g.lossMax, g.samples, g.stepMs, g.dataMs, g.computeMs, g.commMs, g.optMs})
        appendNumber(out, v);
      appendFields(out, s, 1);  // from epoch on: the step is above
      break;
    }
  }
  out += '\n';
}

namespace {

constexpr std::uint32_t kMagic = 0x52575450;  // "PTWR"

char kindCode(Record::Kind k) {
  switch (k) {
    case Record::Kind::Step: return 'S';
    case Record::Kind::Validation: return 'V';
    case Record::Kind::Heartbeat: return 'H';
    case Record::Kind::Done: return 'D';
    case Record::Kind::Group: return 'G';
    case Record::Kind::Scalar: return 'N';
  }
  return '?';
}

template <class T>
void put(char* frame, std::size_t at, T v) {
  std::memcpy(frame + at, &v, sizeof v);
}
template <class T>
T get(const char* frame, std::size_t at) {
  T v;
  std::memcpy(&v, frame + at, sizeof v);
  return v;
}

// The step fields start at kStepAt (Note [Step fields]); a V or H frame keeps its values
// where the loss is, and leaves the rest of the fields' bytes zero.
constexpr std::size_t kKindAt = 4, kRankAt = 8, kStepAt = 16, kEpochAt = 24, kValuesAt = 32;
constexpr std::size_t kGroupAt = kRecordFrameBytes;                    // G: first, count, then 9 sums
constexpr std::size_t kScalarValueAt = kEpochAt + Record::kNameBytes;  // N: the name, then the value
static_assert(kScalarValueAt + 8 <= kRecordFrameBytes);
constexpr std::size_t kParametersAt = kValuesAt + Record::kStateBytes;  // H: the state, then the parameters
static_assert(kParametersAt + 8 <= kRecordFrameBytes);
// H: then the collective counts, the last collective's name and whether the rank counts them.
constexpr std::size_t kEnteredAt = kParametersAt + 8, kCompletedAt = kEnteredAt + 8, kCollectiveAt = kCompletedAt + 8;
constexpr std::size_t kCountsAt = kCollectiveAt + Record::kStateBytes;
static_assert(kCountsAt + 1 <= kRecordFrameBytes);
static_assert(kGroupAt + 16 + 9 * 8 == kGroupFrameBytes);

// The step fields of `s` into the frame `f`, and back.
void putFields(char* f, const StepRecord& s) {
  std::size_t at = kStepAt;
  StepRecord::forEachField([&](const char*, auto m) {
    put(f, at, s.*m);
    at += 8;
  });
}
void getFields(const char* f, StepRecord& s) {
  std::size_t at = kStepAt;
  StepRecord::forEachField([&](const char*, auto m) {
    s.*m = get<StepFieldType<decltype(m)>>(f, at);
    at += 8;
  });
}
constexpr std::size_t kStateBytes = Record::kStateBytes;

bool allZero(const char* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

// A heartbeat's collective counts (Note [Collective positions]): none from a rank that does
// not count them, whose frame (as one of a build before the counts) is zero from kEnteredAt.
bool readCollectives(const char* f, Record& r) {
  if (f[kCountsAt] == 0) return allZero(f + kEnteredAt, kRecordFrameBytes - kEnteredAt);
  const char* name = f + kCollectiveAt;
  std::size_t n = 0;
  while (n < kStateBytes && ((name[n] >= 'a' && name[n] <= 'z') || name[n] == '-')) ++n;
  const auto entered = get<std::int64_t>(f, kEnteredAt), completed = get<std::int64_t>(f, kCompletedAt);
  r.setCollectives(entered, completed, std::string_view(name, n));
  return f[kCountsAt] == 1 && completed >= 0 && completed <= entered && allZero(name + n, kStateBytes - n) &&
         allZero(f + kCountsAt + 1, kRecordFrameBytes - kCountsAt - 1);
}

}  // namespace

void encodeRecord(const Record& r, std::string& out) {
  char f[kGroupFrameBytes] = {};
  const StepRecord& s = r.step;
  put(f, 0, kMagic);
  f[kKindAt] = kindCode(r.kind);
  put<std::int32_t>(f, kRankAt, s.rank);
  switch (r.kind) {
    case Record::Kind::Group: {
      const StepGroup& g = r.group;
      put<std::int64_t>(f, kGroupAt, g.first);
      put<std::int64_t>(f, kGroupAt + 8, g.count);
      const double sums[9] = {g.lossSum, g.lossMin,   g.lossMax, g.samples, g.stepMs,
                              g.dataMs,  g.computeMs, g.commMs,  g.optMs};
      std::memcpy(f + kGroupAt + 16, sums, sizeof sums);
    }
      [[fallthrough]];  // then the last step's record, as a step frame holds it
    case Record::Kind::Step: putFields(f, s); break;
    case Record::Kind::Validation:
      put<std::int64_t>(f, kStepAt, s.step);
      put(f, kValuesAt, r.valLoss);
      put(f, kValuesAt + 8, r.valAccuracy);
      break;
    case Record::Kind::Heartbeat: {
      put<std::int64_t>(f, kStepAt, s.step);
      const std::string_view state = r.stateName().empty() ? std::string_view("train") : r.stateName();
      std::memcpy(f + kValuesAt, state.data(), std::min(state.size(), kStateBytes));
      put<std::int64_t>(f, kParametersAt, r.parameters);
      if (r.countsCollectives) {
        put<std::int64_t>(f, kEnteredAt, r.collectivesEntered);
        put<std::int64_t>(f, kCompletedAt, r.collectivesCompleted);
        const std::string_view name = r.collectiveName();
        std::memcpy(f + kCollectiveAt, name.data(), std::min(name.size(), kStateBytes));
        f[kCountsAt] = 1;
      }
      break;
    }
    case Record::Kind::Done: put<std::int64_t>(f, kStepAt, s.step); break;
    case Record::Kind::Scalar: {
      put<std::int64_t>(f, kStepAt, s.step);
      const std::string_view name = r.scalarName();
      std::memcpy(f + kEpochAt, name.data(), std::min(name.size(), Record::kNameBytes));
      put(f, kScalarValueAt, r.value);
      break;
    }
  }
  out.append(f, r.kind == Record::Kind::Group ? kGroupFrameBytes : kRecordFrameBytes);
}

std::size_t decodeRecords(std::string_view in, std::vector<Record>& out, bool& malformed) {
  std::size_t at = 0;
  // A quarter more than needed, not twice the capacity: batches are handed on and their
  // vectors reused, and doubling would make them large enough that the reuser drops some.
  const std::size_t need = out.size() + in.size() / kRecordFrameBytes;
  if (out.capacity() < need) out.reserve(need + need / 4);
  for (std::size_t size = kRecordFrameBytes; in.size() - at >= kRecordFrameBytes; at += size) {
    const char* f = in.data() + at;
    size = f[kKindAt] == 'G' ? kGroupFrameBytes : kRecordFrameBytes;
    if (in.size() - at < size) break;  // the rest of a group's frame comes with the next read
    const auto rank = get<std::int32_t>(f, kRankAt);
    const auto step = get<std::int64_t>(f, kStepAt);
    // Bytes a frame of this kind leaves zero must be zero: anything else is not ours.
    if (get<std::uint32_t>(f, 0) != kMagic || !allZero(f + kKindAt + 1, 3) || !allZero(f + kRankAt + 4, 4) ||
        rank < 0 || rank > 1'000'000 || step < 0) {
      malformed = true;
      return at;
    }
    // The vector's memory was last touched long ago (the window takes batches about once a
    // second): ask for the lines of a record a few ahead, so that their misses overlap.
    __builtin_prefetch(
        reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(out.data() + out.size()) + 8 * sizeof(Record)),
        1);
    Record& r = out.emplace_back();
    r.step.rank = rank;
    r.step.step = step;
    const char kind = f[kKindAt];
    bool ok = true;
    if (kind == 'S' || kind == 'G') {
      r.kind = kind == 'S' ? Record::Kind::Step : Record::Kind::Group;
      getFields(f, r.step);
      if (kind == 'G') {
        StepGroup& g = r.group;
        g.first = get<std::int64_t>(f, kGroupAt);
        g.count = get<std::int64_t>(f, kGroupAt + 8);
        double sums[9];
        std::memcpy(sums, f + kGroupAt + 16, sizeof sums);
        g.lossSum = sums[0], g.lossMin = sums[1], g.lossMax = sums[2], g.samples = sums[3], g.stepMs = sums[4];
        g.dataMs = sums[5], g.computeMs = sums[6], g.commMs = sums[7], g.optMs = sums[8];
        ok = g.count >= 1 && g.first >= 0 && g.first <= step && g.count <= step - g.first + 1;
      }
    } else if (kind == 'V') {
      r.kind = Record::Kind::Validation;
      r.valLoss = get<double>(f, kValuesAt);
      r.valAccuracy = get<double>(f, kValuesAt + 8);
      ok = allZero(f + kEpochAt, 8) && allZero(f + kValuesAt + 16, kRecordFrameBytes - kValuesAt - 16);
    } else if (kind == 'H') {
      // A state is a word (train, comm, done): nothing that could garble a display.
      r.kind = Record::Kind::Heartbeat;
      const char* state = f + kValuesAt;
      std::size_t n = 0;
      while (n < kStateBytes && state[n] >= 'a' && state[n] <= 'z') ++n;
      r.setState(std::string_view(state, n));
      r.parameters = get<std::int64_t>(f, kParametersAt);
      ok = n > 0 && allZero(state + n, kStateBytes - n) && allZero(f + kEpochAt, 8) && r.parameters >= 0 &&
           readCollectives(f, r);
    } else if (kind == 'N') {
      r.kind = Record::Kind::Scalar;
      const char* name = f + kEpochAt;
      std::size_t n = 0;
      while (n < Record::kNameBytes && name[n] != 0) ++n;
      r.setName(std::string_view(name, n));
      r.value = get<double>(f, kScalarValueAt);
      ok = isScalarName(r.scalarName()) && allZero(name + n, Record::kNameBytes - n) &&
           allZero(f + kScalarValueAt + 8, kRecordFrameBytes - kScalarValueAt - 8);
    } else if (kind == 'D') {
      r.kind = Record::Kind::Done;
      ok = allZero(f + kEpochAt, kRecordFrameBytes - kEpochAt);
    } else {
      ok = false;
    }
    if (!ok) {
      out.pop_back();
      malformed = true;
      return at;
    }
  }
  return at;
}

}  // namespace ptw::core
