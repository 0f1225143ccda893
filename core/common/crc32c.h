// SPDX-License-Identifier: GPL-3.0-or-later
// CRC-32C (Castagnoli), the checksum of TensorFlow's record files (TensorBoard's event files).
//
// Debian packages no C or C++ library for it (zlib's crc32 is the IEEE polynomial, not this
// one), and the records written here are small, so a byte-wise table is enough: it is tested
// against the published vectors (RFC 3720, TensorFlow's crc32c_test) in test_export.
#pragma once

#include <cstdint>
#include <string_view>

namespace ptw::core {

/// CRC-32C of `data`, continuing from `crc` (the CRC of the bytes before it; 0 to start).
std::uint32_t crc32c(std::string_view data, std::uint32_t crc = 0);

/// TensorFlow's masked CRC: a record file stores this, not the CRC itself, so that a CRC of
/// bytes that hold CRCs is not trivially related to them.
constexpr std::uint32_t maskCrc32c(std::uint32_t crc) {
  return static_cast<std::uint32_t>(((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

}  // namespace ptw::core
