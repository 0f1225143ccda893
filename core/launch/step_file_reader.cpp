// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/step_file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace ptw::core {
namespace {

bool preadAll(int fd, void* into, std::size_t n, long long at) {
  auto* p = static_cast<char*>(into);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, at += got, n -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

StepFileReader::StepFileReader(const std::string& path) : m_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}

StepFileReader::~StepFileReader() {
  if (m_fd >= 0) ::close(m_fd);
}

// The header of the block at `at`, if one starts there and its header is whole.
bool StepFileReader::blockAt(long long at, long long size, BlockHeader& b) const {
  unsigned char h[kBlockHeaderBytes];
  return at + static_cast<long long>(kBlockHeaderBytes) <= size && preadAll(m_fd, h, sizeof h, at) &&
         parseBlockHeader(h, at, b);
}

// The first block whose header starts in [from, size), or false.
bool StepFileReader::nextBlockAfter(long long from, long long size, BlockHeader& b) const {
  static const char magic[4] = {'P', 'T', 'W', 'B'};  // kBlockMagic, little-endian
  std::vector<char> chunk(64 * 1024);
  for (long long at = from; at + static_cast<long long>(kBlockHeaderBytes) <= size;) {
    const auto n = static_cast<std::size_t>(std::min<long long>(static_cast<long long>(chunk.size()), size - at));
    if (!preadAll(m_fd, chunk.data(), n, at)) return false;
    for (std::size_t i = 0; i + sizeof magic <= n; ++i) {
      const void* hit = std::memchr(chunk.data() + i, magic[0], n - sizeof magic + 1 - i);
      if (!hit) break;
      i = static_cast<std::size_t>(static_cast<const char*>(hit) - chunk.data());
      if (std::memcmp(chunk.data() + i, magic, sizeof magic) == 0 && blockAt(at + static_cast<long long>(i), size, b))
        return true;
    }
    if (n < chunk.size()) return false;
    at += static_cast<long long>(n - sizeof magic + 1);  // a magic across the chunks' border is seen in the next
  }
  return false;
}

// Every block is one write: the store's own, or a rank's (Note [Ranks write their steps]),
// several ranks appending to one file. A write cut short (its rank killed in the middle, or a
// crash) leaves a block shorter than its header says, and a later write starts right after
// its last byte. So a block whose end is not the file's end nor the start of another block
// is followed by a search for the next header from its records on; a block whose records
// pass the end of the file is one being written, or cut short and then passed over when a
// header follows it. Readers check each block's records against its checksum (read()) and
// pass over those that differ.
void StepFileReader::forEachBlock(long long from, const std::function<bool(const BlockHeader&)>& each) const {
  struct stat st {};
  if (m_fd < 0 || ::fstat(m_fd, &st) != 0) return;
  const long long size = st.st_size;
  BlockHeader b, next;
  if (!blockAt(from, size, b) && !nextBlockAfter(from, size, b)) return;
  for (;;) {
    if (b.end() > size) {  // being written, or cut short
      if (!nextBlockAfter(b.records, size, b)) return;
      continue;
    }
    if (!each(b)) return;
    if (b.end() == size) return;
    if (blockAt(b.end(), size, next))
      b = next;
    else if (!nextBlockAfter(b.records, size, b))
      return;
  }
}

bool StepFileReader::read(const BlockHeader& b, std::vector<unsigned char>& out) const {
  out.resize(static_cast<std::size_t>(b.count * b.recordBytes()));
  PTW_CHECK(preadAll(m_fd, out.data(), out.size(), b.records), "run store: cannot read a step file (",
            std::strerror(errno), ")");
  return blockIsWhole(out.data(), out.size(), b.sum);
}

}  // namespace ptw::core
