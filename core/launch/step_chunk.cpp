// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/step_chunk.h"

#include <zstd.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>

#include "common/error.h"
#include "common/step_block.h"

namespace ptw::core {
namespace {

constexpr std::uint32_t kChunkMagic = 0x43575450;  // "PTWC"
constexpr std::size_t kChunkHeaderBytes = 16, kColumnHeaderBytes = 9;
constexpr std::int64_t kMostRecords = std::int64_t(1) << 26;  // far more than the store writes in a chunk
constexpr std::uint32_t kMostFields = 256;
// Past the default level the ratio gains little on these columns and packing slows down;
// chunks are packed once, when a run ends.
constexpr int kZstdLevel = 6;

enum Transform : std::uint8_t { kDelta = 0, kXor = 1, kMicros = 2, kPerMs = 3 };

template <class T>
std::uint64_t bitsOf(T v) {
  std::uint64_t u;
  std::memcpy(&u, &v, 8);
  return u;
}
template <class T>
T fromBits(std::uint64_t u) {
  T v;
  std::memcpy(&v, &u, 8);
  return v;
}
std::uint64_t zigzag(std::uint64_t d) { return (d << 1) ^ (0 - (d >> 63)); }
std::uint64_t unzigzag(std::uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }

void putVarint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// Reads a column's raw bytes; every read is checked against their end.
struct Reader {
  const unsigned char* p;
  const unsigned char* end;
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      PTW_CHECK(p < end, "run store: a step chunk's column ends in the middle of a value");
      const unsigned char b = *p++;
      v |= std::uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    PTW_FAIL("run store: a step chunk's column holds a varint longer than 64 bits");
  }
  std::uint64_t word() {
    PTW_CHECK(end - p >= 8, "run store: a step chunk's column ends in the middle of a value");
    const auto u = getLe<std::uint64_t>(p);
    p += 8;
    return u;
  }
};

std::string deltaColumn(const std::vector<std::uint64_t>& v) {
  std::string out;
  std::uint64_t prev = 0;
  for (const std::uint64_t x : v) putVarint(out, zigzag(x - prev)), prev = x;
  return out;
}

std::string xorColumn(const std::vector<std::uint64_t>& v) {
  std::string out(8 * v.size(), '\0');
  std::uint64_t prev = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint64_t x = v[i] ^ prev;
    prev = v[i];
    for (std::size_t b = 0; b < 8; ++b) out[b * v.size() + i] = static_cast<char>(x >> (8 * b));
  }
  return out;
}

// Values that `exact(i)` gives as whole numbers (their deltas), the others escaped; "" when
// too few are whole for it to pay.
template <class Exact>
std::string escapedColumn(const std::vector<std::uint64_t>& v, Exact&& exact) {
  std::string out;
  std::uint64_t prev = 0;
  std::size_t escaped = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (const std::optional<std::int64_t> n = exact(i)) {
      putVarint(out, zigzag(static_cast<std::uint64_t>(*n) - prev) << 1);
      prev = static_cast<std::uint64_t>(*n);
    } else {
      if (++escaped > v.size() / 2) return {};
      putVarint(out, 1);
      char raw[8];
      putLe(raw, v[i]);
      out.append(raw, 8);
    }
  }
  return out;
}

// n, when v is n / 1e6 to the bit: a duration of whole nanoseconds in milliseconds.
std::optional<std::int64_t> wholeMicros(double v) {
  if (!(std::fabs(v) < 1e12)) return std::nullopt;
  const auto n = std::llround(v * 1e6);
  if (bitsOf(static_cast<double>(n) / 1e6) != bitsOf(v)) return std::nullopt;
  return n;
}
// k, when v is k * 1000 / stepMs to the bit: the trainer's samples_per_s of k samples.
std::optional<std::int64_t> wholePerMs(double v, double stepMs) {
  if (!(std::fabs(v) < 1e15) || !(stepMs > 0)) return std::nullopt;
  const auto k = std::llround(v * stepMs / 1000.0);
  if (bitsOf(static_cast<double>(k) * 1000.0 / stepMs) != bitsOf(v)) return std::nullopt;
  return k;
}

void appendColumn(std::string& out, std::uint8_t transform, const std::string& raw) {
  std::string packed(ZSTD_compressBound(raw.size()), '\0');
  const std::size_t n = ZSTD_compress(packed.data(), packed.size(), raw.data(), raw.size(), kZstdLevel);
  PTW_CHECK(!ZSTD_isError(n), "run store: compressing step records failed (", ZSTD_getErrorName(n), ")");
  char h[kColumnHeaderBytes];
  h[0] = static_cast<char>(transform);
  putLe(h + 1, static_cast<std::uint32_t>(raw.size()));
  putLe(h + 5, static_cast<std::uint32_t>(n));
  out.append(h, sizeof h);
  out.append(packed.data(), n);
}

}  // namespace

std::string packChunk(const std::vector<StepRecord>& records) {
  std::string out(kChunkHeaderBytes, '\0');
  putLe(out.data(), kChunkMagic);
  putLe(out.data() + 4, static_cast<std::uint32_t>(records.size()));
  putLe(out.data() + 8, static_cast<std::uint32_t>(StepRecord::fieldCount()));
  std::vector<std::uint64_t> bits(records.size());
  StepRecord::forEachField([&](const char*, auto m) {
    for (std::size_t i = 0; i < records.size(); ++i) bits[i] = bitsOf(records[i].*m);
    if constexpr (std::is_same_v<StepFieldType<decltype(m)>, std::int64_t>) {
      appendColumn(out, kDelta, deltaColumn(bits));
      return;
    } else {
      // Each transform that applies, compressed; the smallest is kept.
      std::string best;
      auto tryColumn = [&](std::uint8_t transform, const std::string& raw) {
        if (raw.empty() && !records.empty()) return;
        std::string column;
        appendColumn(column, transform, raw);
        if (best.empty() || column.size() < best.size()) best = std::move(column);
      };
      tryColumn(kXor, xorColumn(bits));
      tryColumn(kMicros, escapedColumn(bits, [&](std::size_t i) { return wholeMicros(records[i].*m); }));
      if (m == &StepRecord::samplesPerS)
        tryColumn(kPerMs,
                  escapedColumn(bits, [&](std::size_t i) { return wholePerMs(records[i].*m, records[i].stepMs); }));
      out += best;
    }
  });
  return out;
}

namespace {

struct StoredColumn {
  std::uint8_t transform = 0;
  std::string raw;
};

// The values of a column in its records' field `m`; kPerMs reads their step_ms.
template <class M>
void decodeColumn(const StoredColumn& c, StepRecord* r, std::size_t count, M m) {
  using T = StepFieldType<M>;
  Reader in{reinterpret_cast<const unsigned char*>(c.raw.data()),
            reinterpret_cast<const unsigned char*>(c.raw.data()) + c.raw.size()};
  std::uint64_t prev = 0;
  if (c.transform == kXor) {
    PTW_CHECK(c.raw.size() == 8 * count, "run store: a step chunk's xor column holds ", c.raw.size(),
              " bytes, expected ", 8 * count);
    for (std::size_t i = 0; i < count; ++i) {
      std::uint64_t x = 0;
      for (std::size_t b = 0; b < 8; ++b)
        x |= std::uint64_t(static_cast<unsigned char>(c.raw[b * count + i])) << (8 * b);
      prev ^= x;
      r[i].*m = fromBits<T>(prev);
    }
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (c.transform == kDelta) {
      prev += unzigzag(in.varint());
      r[i].*m = fromBits<T>(prev);
      continue;
    }
    PTW_CHECK(c.transform == kMicros || c.transform == kPerMs, "run store: a step chunk's column has transform ",
              int(c.transform), ", expected 0 to 3");
    const std::uint64_t w = in.varint();
    if (w == 1) {
      r[i].*m = fromBits<T>(in.word());
      continue;
    }
    PTW_CHECK((w & 1) == 0, "run store: a step chunk's column holds a malformed value");
    prev += unzigzag(w >> 1);
    const auto n = static_cast<double>(static_cast<std::int64_t>(prev));
    if constexpr (std::is_same_v<T, double>)
      r[i].*m = c.transform == kMicros ? n / 1e6 : n * 1000.0 / r[i].stepMs;
    else
      PTW_FAIL("run store: a step chunk's integer column has transform ", int(c.transform));
  }
  PTW_CHECK(in.p == in.end, "run store: a step chunk's column holds bytes past its ", count, " values");
}

}  // namespace

void unpackChunk(const unsigned char* blob, std::size_t size, std::int64_t count, int rank,
                 std::vector<StepRecord>& out) {
  PTW_CHECK(size >= kChunkHeaderBytes && getLe<std::uint32_t>(blob) == kChunkMagic,
            "run store: a step chunk does not start with \"PTWC\"");
  const std::uint32_t n = getLe<std::uint32_t>(blob + 4), fields = getLe<std::uint32_t>(blob + 8);
  PTW_CHECK(n == count && count <= kMostRecords && fields <= kMostFields, "run store: a step chunk holds ", n,
            " records of ", fields, " fields, expected ", count, " records");
  std::vector<StoredColumn> columns(fields);
  std::size_t at = kChunkHeaderBytes;
  for (auto& c : columns) {
    PTW_CHECK(size - at >= kColumnHeaderBytes, "run store: a step chunk is cut short");
    c.transform = blob[at];
    const std::uint32_t raw = getLe<std::uint32_t>(blob + at + 1), packed = getLe<std::uint32_t>(blob + at + 5);
    at += kColumnHeaderBytes;
    PTW_CHECK(size - at >= packed && raw <= 16 * std::uint64_t(n) + 16, "run store: a step chunk is cut short");
    c.raw.resize(raw);
    const std::size_t got = ZSTD_decompress(c.raw.data(), raw, blob + at, packed);
    PTW_CHECK(!ZSTD_isError(got) && got == raw, "run store: a step chunk's column does not decompress (",
              ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size", ")");
    at += packed;
  }
  PTW_CHECK(at == size, "run store: a step chunk holds bytes past its columns");
  const std::size_t first = out.size();
  out.resize(first + n);
  StepRecord* r = out.data() + first;
  for (std::size_t i = 0; i < n; ++i) r[i].rank = rank;
  try {
    // Two passes: a per-ms column reads step_ms, which may come after it.
    for (const bool perMs : {false, true}) {
      std::size_t i = 0;
      StepRecord::forEachField([&](const char*, auto m) {
        if (i < columns.size() && (columns[i].transform == kPerMs) == perMs) decodeColumn(columns[i], r, n, m);
        ++i;
      });
    }
  } catch (...) {
    out.resize(first);
    throw;
  }
}

}  // namespace ptw::core
