// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/crc32c.h"

#include <array>

namespace ptw::core {
namespace {

// The reflected Castagnoli polynomial 0x1EDC6F41.
constexpr std::uint32_t kPolynomial = 0x82f63b78u;

constexpr std::array<std::uint32_t, 256> makeTable() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr auto kTable = makeTable();

}  // namespace

std::uint32_t crc32c(std::string_view data, std::uint32_t crc) {
  crc = ~crc;
  for (const char ch : data) crc = kTable[(crc ^ static_cast<unsigned char>(ch)) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace ptw::core
