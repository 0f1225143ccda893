// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/step_block.h"

#include <xxhash.h>

#include <cerrno>

namespace ptw::core {

void packStep(const StepRecord& r, std::string& out) {
  char f[kBlockRecordBytes];
  char* at = f;
  StepRecord::forEachField([&](const char*, auto m) {
    putLe(at, r.*m);
    at += 8;
  });
  out.append(f, sizeof f);
}

StepRecord unpackStep(const unsigned char* f, int rank, std::size_t fields) {
  StepRecord r;
  r.rank = rank;
  std::size_t i = 0;
  StepRecord::forEachField([&](const char*, auto m) {
    if (i < fields) r.*m = getLe<StepFieldType<decltype(m)>>(f + 8 * i);
    ++i;
  });
  return r;
}

std::uint64_t blockChecksum(const unsigned char* p, std::size_t n) { return XXH3_64bits(p, n); }

// The sum of the records' 8-byte words with a rotation, in four lanes: what blocks carried
// before they carried XXH3, kept so that a step file written by an older build (a run
// interrupted then, packed by this one) still reads.
std::uint64_t legacyBlockChecksum(const unsigned char* p, std::size_t n) {
  auto mix = [](std::uint64_t sum, std::uint64_t word) { return ((sum << 7) | (sum >> 57)) + word; };
  std::uint64_t lane[4] = {n, 1, 2, 3};
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) lane[k] = mix(lane[k], getLe<std::uint64_t>(p + i + 8 * k));
  for (; i + 8 <= n; i += 8) lane[0] = mix(lane[0], getLe<std::uint64_t>(p + i));
  return mix(mix(mix(lane[0], lane[1]), lane[2]), lane[3]);
}

bool blockIsWhole(const unsigned char* p, std::size_t n, std::uint64_t sum) {
  return blockChecksum(p, n) == sum || legacyBlockChecksum(p, n) == sum;
}

bool parseBlockHeader(const unsigned char* h, long long at, BlockHeader& b) {
  const std::uint32_t sizes = getLe<std::uint32_t>(h + 4);
  b.count = sizes & 0xffff;
  b.fields = (sizes >> 16) == 0 ? kFirstBlockFields : (sizes >> 16);
  b.rank = getLe<std::int32_t>(h + 8);
  b.attempt = getLe<std::int32_t>(h + 12);
  b.firstStep = getLe<std::int64_t>(h + 16);
  b.lastStep = getLe<std::int64_t>(h + 24);
  b.sum = getLe<std::uint64_t>(h + 32);
  b.records = at + static_cast<long long>(kBlockHeaderBytes);
  return getLe<std::uint32_t>(h) == kBlockMagic && b.count >= 1 && b.count <= kBlockRecords && b.fields >= 2 &&
         b.rank >= 0 && b.attempt >= 0 && b.firstStep <= b.lastStep;
}

std::string storeFullAdvice(const std::string& file) {
  auto parent = [](const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
  };
  std::string folder = parent(file);
  const auto slash = folder.rfind('/');
  if (folder.compare(slash == std::string::npos ? 0 : slash + 1, std::string::npos, "runs.blocks") == 0)
    folder = parent(folder);
  return "; the disk holding " + folder + " is full: free space there or pass --runs-dir another folder, then " +
         "resume the run from its last checkpoint (run.resume_from)";
}

std::string metricsWriteError(const std::string& path, const std::string& why, int err) {
  const bool full = err == ENOSPC || err == EFBIG || err == EDQUOT;
  return "run store " + path + ": writing metrics failed (" + why + ")" + (full ? storeFullAdvice(path) : "");
}

void finishBlock(std::string& bytes, std::int64_t count, int rank, int attempt, std::int64_t firstStep,
                 std::int64_t lastStep) {
  char* h = bytes.data();
  const auto* records = reinterpret_cast<const unsigned char*>(bytes.data()) + kBlockHeaderBytes;
  putLe(h, kBlockMagic);
  putLe(h + 4, static_cast<std::uint32_t>(count) | static_cast<std::uint32_t>(StepRecord::fieldCount() << 16));
  putLe(h + 8, static_cast<std::int32_t>(rank));
  putLe(h + 12, static_cast<std::int32_t>(attempt));
  putLe(h + 16, firstStep);
  putLe(h + 24, lastStep);
  putLe(h + 32, blockChecksum(records, bytes.size() - kBlockHeaderBytes));
}

}  // namespace ptw::core
