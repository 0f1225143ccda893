// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target for the profile parser and --set overrides: never crash, never hang,
// and whatever parses survives a round trip through toJson unchanged.
//
//   build/bin/fuzz_profile -max_total_time=600 tests/fuzz/seeds/profile   (longer, on demand)
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    ptw::core::Profile p = ptw::core::parseProfile(text, "fuzz");
    ptw::core::Profile again = ptw::core::parseProfile(ptw::core::toJson(p), "fuzz");
    if (!(again == p)) __builtin_trap();
  } catch (const ptw::Error&) {
  }
  // The first line as a --set assignment.
  try {
    ptw::core::applyOverrides(ptw::core::defaultProfile(), {text.substr(0, text.find('\n'))});
  } catch (const ptw::Error&) {
  }
  return 0;
}
