// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/step_chunk.h"

#include <zstd.h>

#include <cmath>
#include <cstring>
#include <limits>
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
constexpr std::uint32_t kLayoutColumnFrames = 0, kLayoutOneFrame = 2, kLayoutRanks = 3;
constexpr char kReferenceTag = 'R';
// Past the default level the ratio gains little on these columns and packing slows down;
// chunks are packed once, when a run ends. A column's transforms are weighed at the fastest
// level: a cheap guess at the order the final one puts them in.
constexpr int kZstdLevel = 6, kWeighLevel = 1;

enum Transform : std::uint8_t { kDelta = 0, kXor = 1, kMicros = 2, kPerMs = 3, kParts = 4, kSpan = 5, kFloat = 6 };

// One compression context a thread, kept: making one costs more than packing a rank's chunk.
struct Contexts {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~Contexts() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};
Contexts& contexts() {
  thread_local Contexts ctx;
  PTW_CHECK(ctx.c && ctx.d, "run store: out of memory for compressing step records");
  return ctx;
}

std::string compressed(const std::string& raw, int level) {
  std::string packed(ZSTD_compressBound(raw.size()), '\0');
  const std::size_t n = ZSTD_compressCCtx(contexts().c, packed.data(), packed.size(), raw.data(), raw.size(), level);
  PTW_CHECK(!ZSTD_isError(n), "run store: compressing step records failed (", ZSTD_getErrorName(n), ")");
  packed.resize(n);
  return packed;
}

template <class T>
std::uint64_t bitsOf(T v) {
  static_assert(sizeof(T) == 8);
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

// Byte planes of `v` (each value's lowest byte, then its next, ...), `width` bytes a value.
void appendPlanes(std::string& out, const std::vector<std::uint64_t>& v, unsigned width) {
  const std::size_t at = out.size();
  out.resize(at + width * v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    for (unsigned b = 0; b < width; ++b) out[at + b * v.size() + i] = static_cast<char>(v[i] >> (8 * b));
}
std::uint64_t planeValue(const unsigned char* planes, std::size_t count, std::size_t i, unsigned width) {
  std::uint64_t x = 0;
  for (unsigned b = 0; b < width; ++b) x |= std::uint64_t(planes[b * count + i]) << (8 * b);
  return x;
}

// Values all of which `exact(i)` gives as whole numbers: the least as a varint (zig-zag),
// then a byte of the bits it takes to write the others' distance from it, then each distance
// in that many bits, the first value's from the lowest bit of the first byte on; "" when one
// is not whole. Noisy times cost the bits of their spread, where a delta from one to the
// next costs a bit more, and whole bytes a few bits more again.
template <class Exact>
std::string spanColumn(std::size_t count, Exact&& exact) {
  std::vector<std::uint64_t> n(count);
  std::uint64_t least = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::optional<std::int64_t> w = exact(i);
    if (!w) return {};
    n[i] = static_cast<std::uint64_t>(*w);
    if (i == 0 || *w < static_cast<std::int64_t>(least)) least = n[i];
  }
  std::uint64_t most = 0;
  for (auto& x : n) most = std::max(most, x -= least);
  unsigned width = 0;
  while (width < 64 && (most >> width) != 0) ++width;
  std::string out;
  putVarint(out, zigzag(least));
  out += static_cast<char>(width);
  unsigned __int128 bits = 0;  // holds fewer than 8 bits, then a value's
  unsigned held = 0;
  for (const std::uint64_t x : n) {
    bits |= static_cast<unsigned __int128>(x) << held;
    for (held += width; held >= 8; held -= 8, bits >>= 8) out += static_cast<char>(bits & 0xff);
  }
  if (held > 0) out += static_cast<char>(bits & 0xff);
  return out;
}

// Doubles that are all floats to the bit (a loss of a float tensor): the floats' bits as
// byte planes; "" when one is not.
std::string floatColumn(const std::vector<std::uint64_t>& bits) {
  std::vector<std::uint64_t> f(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const double v = fromBits<double>(bits[i]);
    const auto narrow = static_cast<float>(v);
    if (bitsOf(static_cast<double>(narrow)) != bits[i]) return {};
    std::uint32_t u;
    std::memcpy(&u, &narrow, 4);
    f[i] = u;
  }
  std::string out;
  appendPlanes(out, f, 4);
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

// The whole nanoseconds of a step's parts (data, compute, comm, opt), when each is whole.
std::optional<std::uint64_t> partsNanos(const StepRecord& r) {
  const auto data = wholeMicros(r.dataMs), compute = wholeMicros(r.computeMs), comm = wholeMicros(r.commMs),
             opt = wholeMicros(r.optMs);
  if (!data || !compute || !comm || !opt) return std::nullopt;
  return std::uint64_t(*data) + std::uint64_t(*compute) + std::uint64_t(*comm) + std::uint64_t(*opt);
}
// step_ms in whole nanoseconds less its parts'.
std::optional<std::int64_t> restOfParts(const StepRecord& r) {
  const auto step = wholeMicros(r.stepMs);
  const auto parts = partsNanos(r);
  if (!step || !parts) return std::nullopt;
  return static_cast<std::int64_t>(std::uint64_t(*step) - *parts);
}

// The transform of a double column `m` that compresses best, and its raw bytes.
template <class M>
std::pair<std::uint8_t, std::string> bestColumn(const std::vector<StepRecord>& records,
                                                const std::vector<std::uint64_t>& bits, M m) {
  std::pair<std::uint8_t, std::string> best{kXor, xorColumn(bits)};
  if (records.empty()) return best;
  std::size_t bestSize = compressed(best.second, kWeighLevel).size();
  auto weigh = [&](std::uint8_t transform, std::string raw) {
    if (raw.empty()) return;
    const std::size_t size = compressed(raw, kWeighLevel).size();
    if (size < bestSize) best = {transform, std::move(raw)}, bestSize = size;
  };
  weigh(kMicros, escapedColumn(bits, [&](std::size_t i) { return wholeMicros(records[i].*m); }));
  weigh(kSpan, spanColumn(records.size(), [&](std::size_t i) { return wholeMicros(records[i].*m); }));
  weigh(kFloat, floatColumn(bits));
  if (m == &StepRecord::samplesPerS)
    weigh(kPerMs, escapedColumn(bits, [&](std::size_t i) { return wholePerMs(records[i].*m, records[i].stepMs); }));
  if (m == &StepRecord::stepMs)
    weigh(kParts, escapedColumn(bits, [&](std::size_t i) { return restOfParts(records[i]); }));
  return best;
}

}  // namespace

namespace {

std::string chunkHeader(std::size_t count, std::uint32_t layout) {
  std::string out(kChunkHeaderBytes, '\0');
  putLe(out.data(), kChunkMagic);
  putLe(out.data() + 4, static_cast<std::uint32_t>(count));
  putLe(out.data() + 8, static_cast<std::uint32_t>(StepRecord::fieldCount()));
  putLe(out.data() + 12, layout);
  return out;
}

// Each field's transform and raw size appended to `out`, its raw bytes to `raws`.
void appendFields(const std::vector<StepRecord>& records, std::string& out, std::string& raws) {
  std::vector<std::uint64_t> bits(records.size());
  StepRecord::forEachField([&](const char*, auto m) {
    for (std::size_t i = 0; i < records.size(); ++i) bits[i] = bitsOf(records[i].*m);
    std::pair<std::uint8_t, std::string> column;
    if constexpr (std::is_same_v<StepFieldType<decltype(m)>, std::int64_t>)
      column = {kDelta, deltaColumn(bits)};
    else
      column = bestColumn(records, bits, m);
    out += static_cast<char>(column.first);
    putVarint(out, column.second.size());
    raws += column.second;
  });
}

}  // namespace

std::string packChunk(const std::vector<StepRecord>& records) {
  std::string out = chunkHeader(records.size(), kLayoutOneFrame), raws;
  appendFields(records, out, raws);
  out += compressed(raws, kZstdLevel);
  return out;
}

std::string packRanks(const std::vector<StepRecord>& records, std::uint64_t serial) {
  std::string out = chunkHeader(records.size(), kLayoutRanks);
  putVarint(out, serial);
  std::vector<std::uint64_t> ranks(records.size());
  for (std::size_t i = 0; i < records.size(); ++i) ranks[i] = static_cast<std::uint64_t>(std::int64_t(records[i].rank));
  std::string raws = deltaColumn(ranks);
  out += static_cast<char>(kDelta);
  putVarint(out, raws.size());
  appendFields(records, out, raws);
  out += compressed(raws, kZstdLevel);
  return out;
}

std::string packReference(const PackReference& ref) {
  std::string out(1, kReferenceTag);
  putVarint(out, ref.serial);
  putVarint(out, zigzag(static_cast<std::uint64_t>(std::int64_t(ref.rank))));
  putVarint(out, zigzag(static_cast<std::uint64_t>(ref.firstStep)));
  putVarint(out, static_cast<std::uint64_t>(ref.offset));
  return out;
}

std::optional<PackReference> readReference(const unsigned char* blob, std::size_t size) {
  if (size == 0 || blob[0] != static_cast<unsigned char>(kReferenceTag)) return std::nullopt;
  Reader in{blob + 1, blob + size};
  PackReference ref;
  ref.serial = in.varint();
  const auto rank = static_cast<std::int64_t>(unzigzag(in.varint()));
  ref.firstStep = static_cast<std::int64_t>(unzigzag(in.varint()));
  const std::uint64_t offset = in.varint();
  PTW_CHECK(
      in.p == in.end && rank >= 0 && rank <= std::numeric_limits<int>::max() && offset < std::uint64_t(kMostRecords),
      "run store: a step chunk's reference to a pack is malformed");
  ref.rank = static_cast<int>(rank);
  ref.offset = static_cast<std::int64_t>(offset);
  return ref;
}

namespace {

struct StoredColumn {
  std::uint8_t transform = 0;
  std::string raw;
};

// The values of a kSpan column of doubles.
template <class M>
void decodeSpan(const StoredColumn& c, StepRecord* r, std::size_t count, M m) {
  Reader in{reinterpret_cast<const unsigned char*>(c.raw.data()),
            reinterpret_cast<const unsigned char*>(c.raw.data()) + c.raw.size()};
  const std::uint64_t least = unzigzag(in.varint());
  PTW_CHECK(in.p < in.end, "run store: a step chunk's column ends in the middle of a value");
  const unsigned width = *in.p++;
  PTW_CHECK(width <= 64, "run store: a step chunk's column holds a malformed value");
  const std::uint64_t want = (std::uint64_t(width) * count + 7) / 8;
  PTW_CHECK(static_cast<std::uint64_t>(in.end - in.p) == want, "run store: a step chunk's column holds ", in.end - in.p,
            " bytes of values, expected ", want);
  const std::uint64_t mask = width == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << width) - 1;
  unsigned __int128 bits = 0;
  unsigned held = 0;
  for (std::size_t i = 0; i < count; ++i) {
    for (; held < width; held += 8) bits |= static_cast<unsigned __int128>(*in.p++) << held;
    const std::uint64_t x = static_cast<std::uint64_t>(bits) & mask;
    bits >>= width;
    held -= width;
    r[i].*m = static_cast<double>(static_cast<std::int64_t>(least + x)) / 1e6;
  }
}

// The values of a kFloat column of doubles.
template <class M>
void decodeFloats(const StoredColumn& c, StepRecord* r, std::size_t count, M m) {
  PTW_CHECK(c.raw.size() == 4 * count, "run store: a step chunk's float column holds ", c.raw.size(),
            " bytes, expected ", 4 * count);
  const auto* planes = reinterpret_cast<const unsigned char*>(c.raw.data());
  for (std::size_t i = 0; i < count; ++i) {
    const auto u = static_cast<std::uint32_t>(planeValue(planes, count, i, 4));
    float f;
    std::memcpy(&f, &u, 4);
    r[i].*m = static_cast<double>(f);
  }
}

// The values of a column in its records' field `m`; kPerMs reads their step_ms, kParts
// their data_ms, compute_ms, comm_ms and opt_ms.
template <class M>
void decodeColumn(const StoredColumn& c, StepRecord* r, std::size_t count, M m) {
  using T = StepFieldType<M>;
  Reader in{reinterpret_cast<const unsigned char*>(c.raw.data()),
            reinterpret_cast<const unsigned char*>(c.raw.data()) + c.raw.size()};
  std::uint64_t prev = 0;
  if (c.transform == kSpan || c.transform == kFloat) {
    if constexpr (std::is_same_v<T, double>)
      c.transform == kSpan ? decodeSpan(c, r, count, m) : decodeFloats(c, r, count, m);
    else
      PTW_FAIL("run store: a step chunk's integer column has transform ", int(c.transform));
    return;
  }
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
    PTW_CHECK(c.transform == kMicros || c.transform == kPerMs || c.transform == kParts,
              "run store: a step chunk's column has transform ", int(c.transform), ", expected 0 to 6");
    const std::uint64_t w = in.varint();
    if (w == 1) {
      r[i].*m = fromBits<T>(in.word());
      continue;
    }
    PTW_CHECK((w & 1) == 0, "run store: a step chunk's column holds a malformed value");
    prev += unzigzag(w >> 1);
    std::uint64_t n = prev;
    if constexpr (std::is_same_v<T, double>) {
      if (c.transform == kParts) {
        const std::optional<std::uint64_t> parts = partsNanos(r[i]);
        PTW_CHECK(parts, "run store: a step chunk's step_ms column holds a malformed value");
        n += *parts;
      }
      const auto v = static_cast<double>(static_cast<std::int64_t>(n));
      r[i].*m = c.transform == kPerMs ? v * 1000.0 / r[i].stepMs : v / 1e6;
    } else {
      PTW_FAIL("run store: a step chunk's integer column has transform ", int(c.transform));
    }
  }
  PTW_CHECK(in.p == in.end, "run store: a step chunk's column holds bytes past its ", count, " values");
}

// The columns of a chunk of layout 0: a zstd frame each.
std::size_t readColumnFrames(const unsigned char* blob, std::size_t size, std::uint32_t n,
                             std::vector<StoredColumn>& columns) {
  std::size_t at = kChunkHeaderBytes;
  for (auto& c : columns) {
    PTW_CHECK(size - at >= kColumnHeaderBytes, "run store: a step chunk is cut short");
    c.transform = blob[at];
    const std::uint32_t raw = getLe<std::uint32_t>(blob + at + 1), packed = getLe<std::uint32_t>(blob + at + 5);
    at += kColumnHeaderBytes;
    PTW_CHECK(size - at >= packed && raw <= 16 * std::uint64_t(n) + 16, "run store: a step chunk is cut short");
    c.raw.resize(raw);
    const std::size_t got = ZSTD_decompressDCtx(contexts().d, c.raw.data(), raw, blob + at, packed);
    PTW_CHECK(!ZSTD_isError(got) && got == raw, "run store: a step chunk's column does not decompress (",
              ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size", ")");
    at += packed;
  }
  return at;
}

// The columns of a chunk of layout 2 or 3, from `in` on: their transforms and sizes, then
// one zstd frame.
void readOneFrame(Reader in, std::uint32_t n, std::vector<StoredColumn>& columns) {
  std::uint64_t total = 0;
  std::vector<std::uint64_t> sizes;
  for (auto& c : columns) {
    PTW_CHECK(in.p < in.end, "run store: a step chunk is cut short");
    c.transform = *in.p++;
    sizes.push_back(in.varint());
    PTW_CHECK(sizes.back() <= 16 * std::uint64_t(n) + 16, "run store: a step chunk is cut short");
    total += sizes.back();
  }
  std::string raws(total, '\0');
  const auto left = static_cast<std::size_t>(in.end - in.p);
  const std::size_t got = ZSTD_decompressDCtx(contexts().d, raws.data(), raws.size(), in.p, left);
  PTW_CHECK(!ZSTD_isError(got) && got == total && ZSTD_findFrameCompressedSize(in.p, left) == left,
            "run store: a step chunk's columns do not decompress (",
            ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size", ")");
  std::size_t from = 0;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    columns[i].raw.assign(raws, from, sizes[i]);
    from += sizes[i];
  }
}

// Which pass decodes a column: a kParts column reads the times before it, a kPerMs one step_ms.
int passOf(std::uint8_t transform) { return transform == kParts ? 1 : transform == kPerMs ? 2 : 0; }

// The fields of `n` records from `columns` (in the order of the list that wrote them) into r.
void decodeFields(const std::vector<StoredColumn>& columns, StepRecord* r, std::size_t n) {
  for (const int pass : {0, 1, 2}) {
    std::size_t i = 0;
    StepRecord::forEachField([&](const char*, auto m) {
      if (i < columns.size() && passOf(columns[i].transform) == pass) decodeColumn(columns[i], r, n, m);
      ++i;
    });
  }
}

// The header of a chunk: its records, fields and layout.
struct ChunkHeader {
  std::uint32_t n, fields, layout;
};
ChunkHeader readHeader(const unsigned char* blob, std::size_t size) {
  PTW_CHECK(size >= kChunkHeaderBytes && getLe<std::uint32_t>(blob) == kChunkMagic,
            "run store: a step chunk does not start with \"PTWC\"");
  const ChunkHeader h{getLe<std::uint32_t>(blob + 4), getLe<std::uint32_t>(blob + 8), getLe<std::uint32_t>(blob + 12)};
  PTW_CHECK(h.n <= kMostRecords && h.fields <= kMostFields, "run store: a step chunk holds ", h.n, " records of ",
            h.fields, " fields");
  return h;
}

}  // namespace

void unpackChunk(const unsigned char* blob, std::size_t size, std::int64_t count, int rank,
                 std::vector<StepRecord>& out) {
  const ChunkHeader h = readHeader(blob, size);
  PTW_CHECK(h.n == count, "run store: a step chunk holds ", h.n, " records, expected ", count);
  PTW_CHECK(h.layout == kLayoutColumnFrames || h.layout == kLayoutOneFrame, "run store: a step chunk has layout ",
            h.layout, ", expected ", kLayoutColumnFrames, " or ", kLayoutOneFrame);
  std::vector<StoredColumn> columns(h.fields);
  if (h.layout == kLayoutOneFrame)
    readOneFrame(Reader{blob + kChunkHeaderBytes, blob + size}, h.n, columns);
  else
    PTW_CHECK(readColumnFrames(blob, size, h.n, columns) == size,
              "run store: a step chunk holds bytes past its columns");
  const std::size_t first = out.size();
  out.resize(first + h.n);
  StepRecord* r = out.data() + first;
  for (std::size_t i = 0; i < h.n; ++i) r[i].rank = rank;
  try {
    decodeFields(columns, r, h.n);
  } catch (...) {
    out.resize(first);
    throw;
  }
}

std::optional<std::uint64_t> packSerial(const unsigned char* blob, std::size_t size) {
  if (size < kChunkHeaderBytes || getLe<std::uint32_t>(blob) != kChunkMagic ||
      getLe<std::uint32_t>(blob + 12) != kLayoutRanks)
    return std::nullopt;
  Reader in{blob + kChunkHeaderBytes, blob + size};
  return in.varint();
}

void unpackRanks(const unsigned char* blob, std::size_t size, std::vector<StepRecord>& out) {
  const ChunkHeader h = readHeader(blob, size);
  PTW_CHECK(h.layout == kLayoutRanks, "run store: a step chunk has layout ", h.layout, ", expected ", kLayoutRanks);
  Reader in{blob + kChunkHeaderBytes, blob + size};
  in.varint();                                      // the serial
  std::vector<StoredColumn> columns(h.fields + 1);  // the ranks, then the fields
  readOneFrame(in, h.n, columns);
  PTW_CHECK(columns[0].transform == kDelta, "run store: a step chunk's rank column has transform ",
            int(columns[0].transform), ", expected ", int(kDelta));
  const std::size_t first = out.size();
  out.resize(first + h.n);
  StepRecord* r = out.data() + first;
  try {
    const std::string& raw = columns[0].raw;
    Reader ranks{reinterpret_cast<const unsigned char*>(raw.data()),
                 reinterpret_cast<const unsigned char*>(raw.data()) + raw.size()};
    std::uint64_t rank = 0;
    for (std::size_t i = 0; i < h.n; ++i) {
      rank += unzigzag(ranks.varint());
      PTW_CHECK(rank <= std::uint64_t(std::numeric_limits<int>::max()),
                "run store: a step chunk holds a record of rank ", static_cast<std::int64_t>(rank));
      r[i].rank = static_cast<int>(rank);
    }
    PTW_CHECK(ranks.p == ranks.end, "run store: a step chunk's rank column holds bytes past its ", h.n, " values");
    columns.erase(columns.begin());
    decodeFields(columns, r, h.n);
  } catch (...) {
    out.resize(first);
    throw;
  }
}

}  // namespace ptw::core
