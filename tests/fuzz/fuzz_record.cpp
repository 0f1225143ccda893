// libFuzzer target for the worker record parser: never crash or throw on any line, and a
// parsed record formats back into a line that parses to the same kind, rank and step.
//
//   build/bin/fuzz_record -max_total_time=600 tests/fuzz/seeds/record   (longer, on demand)
#include <cstdint>
#include <string>

#include "common/record.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto r = ptw::core::parseRecord(line);
  if (!r) return 0;
  std::string out;
  ptw::core::formatRecord(*r, out);
  if (out.empty() || out.back() != '\n') __builtin_trap();
  out.pop_back();
  auto again = ptw::core::parseRecord(out);
  if (!again || again->kind != r->kind || again->step.rank != r->step.rank || again->step.step != r->step.step)
    __builtin_trap();
  return 0;
}
