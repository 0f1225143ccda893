// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target for the metrics protocol of the command strategy (common/command.h): on
// any bytes, split into lines, parsed (as records and by two patterns, one without {step})
// and turned into records, nothing crashes, throws or grows past its bound; a parsed
// record's step is >= 0 or, from a pattern without {step}, -1, and its scalars' names are
// valid; the step records of a rank have steps that only go up (Note [Stretches of steps]),
// and every record encodes to frames that decode to the same records.
//
//   build/bin/fuzz_metrics -max_total_time=600 tests/fuzz/seeds/metrics   (longer, on demand)
#include <cstdint>
#include <string>
#include <vector>

#include "common/command.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ptw::core;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  static const OutputPattern pattern("step {step} loss {loss}(?: acc {acc})?");
  static const OutputPattern counted(R"(Epoch: \[{epoch}\].*Time {step_s} \(.*Loss {loss})");
  LineSplitter lines(4096);
  ScriptMetrics metrics(0, 4, 32);
  std::vector<Record> out;
  std::size_t tooLong = 0;
  double now = 0;
  auto take = [&](const ScriptRecord& r, bool stepless) {
    if (r.step < (stepless ? -1 : 0)) __builtin_trap();
    for (const auto& [name, value] : r.scalars)
      if (!isScalarName(name)) __builtin_trap();
    metrics.take(r, now += 0.5, out);
  };
  lines.feed(
      in,
      [&](std::string_view line) {
        if (line.size() > 4096) __builtin_trap();
        ScriptRecord r;
        std::string error;
        if (parseMetricsLine(line, r, error))
          take(r, false);
        else if (error.empty())
          __builtin_trap();
        if (pattern.match(line, r)) take(r, false);
        std::string problem;
        const auto m = counted.match(line, r, problem);
        if (m == OutputPattern::Match::Record) take(r, true);
        if (m == OutputPattern::Match::Bad && problem.empty()) __builtin_trap();
      },
      [&](std::size_t bytes) {
        if (bytes <= 4096) __builtin_trap();
        ++tooLong;
      });
  metrics.flush(now, 0, out);
  std::int64_t last[4] = {-1, -1, -1, -1};
  for (const auto& r : out) {
    if (r.kind != Record::Kind::Step) continue;
    if (r.step.rank < 0 || r.step.rank > 3 || r.step.step <= last[r.step.rank] || r.step.stepOffset < 0)
      __builtin_trap();
    last[r.step.rank] = r.step.step;
  }
  std::string frames;
  for (const auto& r : out) encodeRecord(r, frames);
  std::vector<Record> back;
  bool malformed = false;
  if (decodeRecords(frames, back, malformed) != frames.size() || malformed || back.size() != out.size())
    __builtin_trap();
  return 0;
}
