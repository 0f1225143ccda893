// SPDX-License-Identifier: GPL-3.0-or-later
// StepFileReader: reads the blocks of a run's step file (Note [Step blocks] in
// launch/run_store.h; the layout in common/step_block.h), passing over a block that a write
// cut short or a crash left unlike what its header says.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/step_block.h"

namespace ptw::core {

class StepFileReader {
 public:
  /// Opens the file at `path` for reading; a file that is not there reads as no blocks.
  explicit StepFileReader(const std::string& path);
  ~StepFileReader();
  StepFileReader(const StepFileReader&) = delete;
  StepFileReader& operator=(const StepFileReader&) = delete;

  bool isOpen() const { return m_fd >= 0; }
  /// Calls `each(block)` for the blocks from byte `from` on, while it returns true.
  void forEachBlock(long long from, const std::function<bool(const BlockHeader&)>& each) const;
  /// The records of `block` into `out`; false when they are not what its header says. Throws
  /// ptw::Error when the file cannot be read (the records may be whole: nothing is passed over).
  bool read(const BlockHeader& block, std::vector<unsigned char>& out) const;

  /// Calls `f` for the records at `bytes`: `count` of them of `fields` fields, of rank
  /// `rank`, or as many as its `size` bytes hold if fewer.
  template <class F>
  static void forEachRecord(const unsigned char* bytes, std::size_t size, std::int64_t count, int rank,
                            std::size_t fields, F&& f) {
    const std::size_t recordBytes = 8 * fields;
    const auto n = std::min<std::int64_t>(count, static_cast<std::int64_t>(size / recordBytes));
    for (std::int64_t i = 0; i < n; ++i) f(unpackStep(bytes + static_cast<std::size_t>(i) * recordBytes, rank, fields));
  }

 private:
  bool blockAt(long long at, long long size, BlockHeader& b) const;
  bool nextBlockAfter(long long from, long long size, BlockHeader& b) const;

  int m_fd = -1;
};

}  // namespace ptw::core
