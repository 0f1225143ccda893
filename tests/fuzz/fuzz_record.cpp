// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target for the record-pipe decoder: never crash or throw on any bytes; what
// decodes encodes back to frames that decode to the same records (byte for byte, NaNs
// included); a malformed frame stops decoding at its own offset.
//
//   build/bin/fuzz_record -max_total_time=600 tests/fuzz/seeds/record   (longer, on demand)
#include <cstdint>
#include <string>
#include <vector>

#include "common/record.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ptw::core;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<Record> records;
  bool malformed = false;
  const std::size_t used = decodeRecords(in, records, malformed);
  std::size_t frameBytes = 0;  // a group's frame is longer than the others
  for (const auto& r : records) frameBytes += r.kind == Record::Kind::Group ? kGroupFrameBytes : kRecordFrameBytes;
  if (used != frameBytes || used > size) __builtin_trap();
  const std::size_t left = size - used;
  if (!malformed && left >= kRecordFrameBytes && (in[used + 4] != 'G' || left >= kGroupFrameBytes)) __builtin_trap();
  std::string frames;
  for (const auto& r : records) encodeRecord(r, frames);
  if (frames.size() != used) __builtin_trap();
  std::vector<Record> again;
  bool bad = false;
  if (decodeRecords(frames, again, bad) != used || bad || again.size() != records.size()) __builtin_trap();
  std::string framesAgain;
  for (const auto& r : again) encodeRecord(r, framesAgain);
  if (framesAgain != frames) __builtin_trap();
  for (const auto& r : again) {
    std::string line;
    formatRecord(r, line);
    if (line.empty() || line.back() != '\n') __builtin_trap();
  }
  return 0;
}
