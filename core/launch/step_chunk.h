// SPDX-License-Identifier: GPL-3.0-or-later
// Step chunks: how the run store keeps a run's step records once its step file is packed
// (Note [Step blocks] in launch/run_store.h): the records of one rank and attempt, field by
// field (Note [Step fields]), each field's column transformed and then compressed with
// zstd, so that a record costs a few bytes rather than the 88 of a block or more as a row
// of its own, and every field comes back bit for bit.
//
// A chunk, little-endian: u32 magic "PTWC" | u32 count | u32 fields | u32 layout, then per
// field, in the order of the list that wrote it, its column's transform, then the columns.
//   layout 2 (codec 2, written): per field u8 transform | LEB128 varint raw bytes, then one
//     zstd frame of every column's raw bytes one after the other. A frame and a header a
//     column would cost a few hundred bytes a chunk: a rank's chunk of a few hundred records
//     would pay bytes a record for them.
//   layout 3 (codec 3, a pack): after the header a LEB128 varint serial, then a column of the
//     records' ranks (u8 transform 0 | varint raw bytes) before the fields' as in layout 2, all in
//     one zstd frame. A pack holds several ranks' records, each rank's together; see
//     Note [Packs of ranks] in launch/chunk_archive.h.
//   layout 0 (codec 1, read only): per field u8 transform | u32 raw bytes | u32 packed
//     bytes | the packed bytes (a zstd frame of the raw bytes).
// Transforms of a column:
//   0 delta: each value minus the one before (the first minus 0), zig-zag, LEB128 varint
//   1 xor: each value's 64 bits XOR the one before's, then byte planes (all first bytes,
//     then all second bytes, ...)
//   2 micros: doubles that are whole nanoseconds in milliseconds (v == n / 1e6, as a
//     steady_clock duration in ms is): n as in `delta`, shifted left by one; a value that is
//     not is a varint 1 then its 8 bytes
//   3 per-ms: samples_per_s as the trainer computes it from the step's samples and step_ms
//     (v == k * 1000 / step_ms): k as in `micros`, the others also as there
//   4 parts (layout 2): step_ms in whole nanoseconds less the sum of data_ms, compute_ms,
//     comm_ms and opt_ms in whole nanoseconds (a step is mostly its parts): that rest as
//     in `micros`, a record whose times are not all whole nanoseconds escaped as there
//   5 span (layout 2): doubles all whole nanoseconds in milliseconds: the least n as a
//     zig-zag varint, a byte of width w (0 to 64), then each n less the least in w bits,
//     little-endian from the first value on, the last byte padded with zero bits
//   6 float (layout 2): doubles all floats to the bit: the floats' 32 bits as byte planes
// A reference (codec 3, the row of a rank of a pack other than its first): u8 'R' | varint
// serial | zig-zag varint rank | zig-zag varint first step (of the pack's row) | varint offset of
// the rank's first record in the pack.
// The writer tries those that apply and keeps the smallest. A reader of a build with more
// fields reads the missing ones as 0; one with fewer skips the extra ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/record.h"

namespace ptw::core {

/// The `codec` column of a chunk written by packChunk, and of a pack's rows (packRanks,
/// packReference); chunks of codec kOldestChunkCodec and up are read.
inline constexpr int kChunkCodec = 2;
inline constexpr int kPackCodec = 3;
inline constexpr int kOldestChunkCodec = 1;
/// Whether this build reads chunks of `codec`.
inline bool readsChunkCodec(int codec) { return codec >= kOldestChunkCodec && codec <= kPackCodec; }

/// The chunk holding `records` (of one rank and attempt, in step order for the best ratio).
std::string packChunk(const std::vector<StepRecord>& records);

/// Appends the `count` records of the chunk `blob` (of `size` bytes, a codec readsChunkCodec), of
/// rank `rank`, to `out`. Throws ptw::Error when the chunk is not one.
void unpackChunk(const unsigned char* blob, std::size_t size, std::int64_t count, int rank,
                 std::vector<StepRecord>& out);

/// The pack holding `records` (of several ranks, each rank's records together and in step
/// order), told apart from the run's other packs by `serial`.
std::string packRanks(const std::vector<StepRecord>& records, std::uint64_t serial);
/// Appends the records of the pack `blob` to `out`, each with its rank. Throws ptw::Error when
/// it is not one.
void unpackRanks(const unsigned char* blob, std::size_t size, std::vector<StepRecord>& out);
/// The serial of the pack `blob`; none when it is not a pack.
std::optional<std::uint64_t> packSerial(const unsigned char* blob, std::size_t size);

/// Where a rank's records are in a pack: the pack of `serial` in the row of rank `rank` whose
/// first step is `firstStep`, from its record `offset` on.
struct PackReference {
  std::uint64_t serial = 0;
  int rank = 0;
  std::int64_t firstStep = 0;
  std::int64_t offset = 0;
};
std::string packReference(const PackReference& ref);
/// The reference `blob` holds; none when it is not one (a pack). Throws ptw::Error when it is
/// malformed.
std::optional<PackReference> readReference(const unsigned char* blob, std::size_t size);

}  // namespace ptw::core
