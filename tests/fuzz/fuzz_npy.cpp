// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target for the .npy header parser: on any bytes it either throws ptw::Error or
// returns a header whose shape and dtype account for exactly the bytes after it.
//
//   build/bin/fuzz_npy -max_total_time=600 tests/fuzz/seeds/npy   (longer, on demand)
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "common/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    const auto h = ptw::core::parseNpyHeader(in, "fuzz.npy");
    if (h.dataOffset > size) __builtin_trap();
    if (h.itemSize != 4 && h.itemSize != 8) __builtin_trap();
    const auto n = static_cast<std::size_t>(h.count());
    if (n * h.itemSize != size - h.dataOffset) __builtin_trap();
  } catch (const ptw::Error&) {
  }
  return 0;
}
