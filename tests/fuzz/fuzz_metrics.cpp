// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target for the metrics protocol of the command strategy (common/command.h): on
// any bytes, split into lines, parsed and turned into records, nothing crashes, throws or
// grows past its bound; a parsed record's step is >= 0 and its scalars' names are valid, and
// every record it makes encodes to frames that decode to the same records.
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
  LineSplitter lines(4096);
  ScriptMetrics metrics(0, 4);
  std::vector<Record> out;
  std::size_t tooLong = 0;
  auto take = [&](const ScriptRecord& r) {
    if (r.step < 0) __builtin_trap();
    for (const auto& [name, value] : r.scalars)
      if (!isScalarName(name)) __builtin_trap();
    metrics.convert(r, 1.0, out);
  };
  lines.feed(
      in,
      [&](std::string_view line) {
        if (line.size() > 4096) __builtin_trap();
        ScriptRecord r;
        std::string error;
        if (parseMetricsLine(line, r, error))
          take(r);
        else if (error.empty())
          __builtin_trap();
        if (pattern.match(line, r)) take(r);
      },
      [&](std::size_t bytes) {
        if (bytes <= 4096) __builtin_trap();
        ++tooLong;
      });
  std::string frames;
  for (const auto& r : out) encodeRecord(r, frames);
  std::vector<Record> back;
  bool malformed = false;
  if (decodeRecords(frames, back, malformed) != frames.size() || malformed || back.size() != out.size())
    __builtin_trap();
  return 0;
}
