// SPDX-License-Identifier: GPL-3.0-or-later
// Step blocks: how step records are kept in a run's step file (Note [Step blocks] in
// launch/run_store.h). The store reads them; the ranks of a stored run write them (Note
// [Ranks write their steps]), so both ends share this format.
//
// A block is a header of kBlockHeaderBytes, then `count` records of kBlockRecordBytes.
// The header, little-endian: u32 magic "PTWB", u16 count, u16 fields (0 in files of
// older builds, whose records hold 11), i32 rank, i32 attempt, i64 first_step,
// i64 last_step, u64 checksum of the records (XXH3-64). A record: `fields` step fields
// (Note [Step fields] in common/record.h: step, epoch (i64), loss, samples_per_s, step_ms,
// data_ms, compute_ms, comm_ms, opt_ms, lr (f64), mem_bytes, step_offset (i64)), 8 bytes each,
// little-endian, no padding. A reader reads the fields it knows, and a field a block has
// not as 0: a step file outlives the build that wrote it when its run is interrupted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/record.h"

namespace ptw::core {

inline constexpr std::uint32_t kBlockMagic = 0x42575450;  // "PTWB"
inline constexpr std::size_t kBlockHeaderBytes = 40;
inline constexpr std::size_t kBlockRecordBytes = 8 * StepRecord::fieldCount();
/// The fields of a record of a block whose header says 0 (the first layout).
inline constexpr std::size_t kFirstBlockFields = 11;
/// Records per block at most: about what a small model's rank fills between two flushes (250 ms).
inline constexpr std::int64_t kBlockRecords = 8192;

namespace le {
inline constexpr bool kLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
template <class T>
using WordOf = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
template <class U>
U fromNative(U u) {
  if constexpr (kLittleEndian)
    return u;
  else if constexpr (sizeof(U) == 8)
    return __builtin_bswap64(u);
  else
    return __builtin_bswap32(u);
}
}  // namespace le

/// Stores `v` (4 or 8 bytes) at `at`, little-endian.
template <class T>
void putLe(char* at, T v) {
  static_assert(sizeof(T) == 8 || sizeof(T) == 4);
  le::WordOf<T> u;
  std::memcpy(&u, &v, sizeof u);
  u = le::fromNative(u);
  std::memcpy(at, &u, sizeof u);
}
/// Loads a little-endian value (4 or 8 bytes) from `at`.
template <class T>
T getLe(const unsigned char* at) {
  static_assert(sizeof(T) == 8 || sizeof(T) == 4);
  le::WordOf<T> u;
  std::memcpy(&u, at, sizeof u);
  u = le::fromNative(u);
  T v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

/// Appends `r`'s record (its rank is the block's) to `out`.
void packStep(const StepRecord& r, std::string& out);
/// The record at `f`, of rank `rank`, of `fields` fields (8 bytes each).
StepRecord unpackStep(const unsigned char* f, int rank, std::size_t fields = StepRecord::fieldCount());

/// Tells a whole block from one that a crash cut short or left as zeros: XXH3-64 of its records.
std::uint64_t blockChecksum(const unsigned char* p, std::size_t n);
/// Whether the records `p`, `n` bytes, have the checksum `sum`: blockChecksum's, or that of
/// the step files of older builds.
bool blockIsWhole(const unsigned char* p, std::size_t n, std::uint64_t sum);

/// The header of a block parsed, with where its records start in the file.
struct BlockHeader {
  int attempt = 0, rank = 0;
  std::int64_t firstStep = 0, lastStep = 0, count = 0;
  std::size_t fields = StepRecord::fieldCount();  ///< of each record
  std::uint64_t sum = 0;
  long long records = 0;  ///< where its records start in the file
  long long recordBytes() const { return 8 * static_cast<long long>(fields); }
  long long end() const { return records + count * recordBytes(); }
};

/// Parses the header at `h` (kBlockHeaderBytes) of a block at file offset `at`; false when it
/// is not one (wrong magic, or fields no writer writes).
bool parseBlockHeader(const unsigned char* h, long long at, BlockHeader& out);

/// What to do when the disk, or the store's size limit (RunStoreOptions::sizeLimitKib), is full,
/// for `file` of a runs folder (its runs.sqlite, or a step file in its runs.blocks): it names
/// that folder, to free space in or to move away from with --runs-dir.
std::string storeFullAdvice(const std::string& file);

/// The error a failed write of a run's metrics to `path` (its step file, or the store's
/// database) reports: `why`, and for a full disk (`err` ENOSPC, EFBIG or EDQUOT) what to do.
std::string metricsWriteError(const std::string& path, const std::string& why, int err);

/// Fills in the header at the front of `bytes`: kBlockHeaderBytes reserved, then `count`
/// packed records.
void finishBlock(std::string& bytes, std::int64_t count, int rank, int attempt, std::int64_t firstStep,
                 std::int64_t lastStep);

}  // namespace ptw::core
