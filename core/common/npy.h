// SPDX-License-Identifier: GPL-3.0-or-later
// NpyHeader: the header of a NumPy .npy file (format versions 1.0 and 2.0), parsed strictly and
// without LibTorch, so the parser can be fuzzed on its own (tests/fuzz/fuzz_npy.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ptw::core {

/// What a .npy header says. Only little-endian float32, float64 and int64 in C order are
/// accepted (descr "<f4", "<f8", "<i8"); anything else is an error that names the file.
/// Example: NpyHeader h = parseNpyHeader(bytes, "x.npy"); // h.shape = {100, 3, 32, 32}
struct NpyHeader {
  std::string descr = "";                ///< "<f4", "<f8" or "<i8"
  std::size_t itemSize = 0;              ///< 4 or 8
  std::vector<std::int64_t> shape = {};  ///< () is a scalar, one element
  std::size_t dataOffset = 0;            ///< where the array's bytes start in the file
  std::int64_t count() const;            ///< elements (product of shape)
};

/// Parses the header at the start of `bytes` (the whole file, or at least its header) and checks
/// that the file holds exactly the array's bytes after it. Throws ptw::Error naming `file`.
NpyHeader parseNpyHeader(std::string_view bytes, const std::string& file);

}  // namespace ptw::core
