// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/step_file_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/step_block.h"
#include "launch/store_database.h"

namespace ptw::core {

StepFileWriter::StepFileWriter(StoreDatabase& db, std::string blocksDir, long long maxBytes)
    : m_db(db), m_blocksDir(std::move(blocksDir)), m_maxBytes(maxBytes) {}

StepFileWriter::~StepFileWriter() { closeFile(); }

void StepFileWriter::beginRun(std::int64_t runId, const RunOptions& keep) {
  m_keep[runId] = keep;
  ::unlink(pathOf(runId).c_str());
}

void StepFileWriter::add(std::int64_t runId, int attempt, const std::vector<Record>& batch) {
  const auto keep = m_keep.find(runId);
  Block* block = nullptr;
  for (const auto& r : batch) {
    if (r.kind != Record::Kind::Step) continue;
    const StepRecord& s = r.step;
    if (keep != m_keep.end() && !keepsStep(keep->second, s.step)) continue;  // run.keep_every
    if (!block || block->rank != s.rank || block->count >= kBlockRecords) {
      block = nullptr;
      for (auto& b : m_blocks)
        if (b.runId == runId && b.attempt == attempt && b.rank == s.rank && b.count < kBlockRecords) block = &b;
      if (!block) {
        m_blocks.push_back({runId, attempt, s.rank, s.step, s.step, 0, {}});
        block = &m_blocks.back();
        // A buffer of an earlier commit, whose pages are already mapped: fresh memory costs
        // a page fault every 4 KiB, which under virtualisation is more than the packing.
        if (!m_spare.empty()) {
          block->bytes = std::move(m_spare.back());
          m_spare.pop_back();
        }
        block->bytes.reserve(kBlockHeaderBytes + kBlockRecords * kBlockRecordBytes);
        block->bytes.assign(kBlockHeaderBytes, '\0');  // filled in when written
      }
    }
    packStep(s, block->bytes);
    block->firstStep = std::min(block->firstStep, s.step);
    block->lastStep = std::max(block->lastStep, s.step);
    ++block->count;
  }
}

void StepFileWriter::clear() {
  for (auto& b : m_blocks) {
    b.bytes.clear();
    if (m_spare.size() < 2 * m_blocks.size()) m_spare.push_back(std::move(b.bytes));
  }
  m_blocks.clear();
}

// The run's row in step_files before anything is in its file: a reader reads a file only
// while its run has one, from the packed length it holds (0 for a new file).
bool StepFileWriter::registerFile(std::int64_t runId, std::string& why) {
  const std::string file = pathOf(runId);
  std::error_code ec;
  std::filesystem::create_directories(m_blocksDir, ec);
  if (ec) {
    why = metricsWriteError(file, ec.message(), ec.value());
    return false;
  }
  struct stat st {};
  const bool fresh = ::stat(file.c_str(), &st) != 0 || st.st_size == 0;
  const std::string sql = std::string(fresh ? "INSERT OR REPLACE" : "INSERT OR IGNORE") + " INTO step_files VALUES (" +
                          std::to_string(runId) + ", 0)";
  if (!m_db.tryExec(sql.c_str())) {
    why = metricsWriteError(m_db.path(), m_db.error(), sqlite3_errcode(m_db.handle()) == SQLITE_FULL ? ENOSPC : 0);
    return false;
  }
  return true;
}

void StepFileWriter::close(std::int64_t runId) {
  if (m_file.runId == runId) closeFile();
}

void StepFileWriter::closeFile() {
  if (m_file.fd >= 0) ::close(m_file.fd);
  m_file = File{};
}

// Note [Step blocks]
bool StepFileWriter::write(std::string& error) {
  std::vector<std::int64_t> runIds;
  for (const auto& b : m_blocks)
    if (std::find(runIds.begin(), runIds.end(), b.runId) == runIds.end()) runIds.push_back(b.runId);
  for (const std::int64_t runId : runIds)
    if (!open(runId, error) || !writeRun(runId, error)) return false;
  return true;
}

// The step file of `runId` open for appending.
bool StepFileWriter::open(std::int64_t runId, std::string& error) {
  // A file packed and removed under this writer (by a store that took the run for an
  // interrupted one: another host's ptw on a shared runs directory) is started again, not
  // written where no one reads.
  struct stat st {};
  if (m_file.runId == runId && m_file.fd >= 0 && ::fstat(m_file.fd, &st) == 0 && st.st_nlink == 0) closeFile();
  if (m_file.runId == runId && m_file.fd >= 0) return true;
  closeFile();
  if (!registerFile(runId, error)) return false;
  const std::string file = pathOf(runId);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    error = metricsWriteError(file, std::strerror(err), err);
    return false;
  }
  m_file = {runId, fd, static_cast<long long>(st.st_size)};
  return true;
}

// The run's buffered blocks in one write; a short one (a full disk) is continued, an error
// ends the run's recording.
bool StepFileWriter::writeRun(std::int64_t runId, std::string& error) {
  auto fail = [&](int err) {
    error = metricsWriteError(pathOf(runId), std::strerror(err), err);
    return false;
  };
  std::vector<iovec> parts;
  long long total = 0;
  for (auto& b : m_blocks) {
    if (b.runId != runId) continue;
    finishBlock(b.bytes, b.count, b.rank, b.attempt, b.firstStep, b.lastStep);
    parts.push_back({b.bytes.data(), b.bytes.size()});
    total += static_cast<long long>(b.bytes.size());
  }
  if (m_maxBytes > 0 && m_file.bytes + total > m_maxBytes) return fail(ENOSPC);
  std::size_t next = 0;
  while (next < parts.size()) {
    const auto count = static_cast<int>(std::min<std::size_t>(parts.size() - next, IOV_MAX));
    const ssize_t n = ::writev(m_file.fd, parts.data() + next, count);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno);
    if (n == 0) return fail(ENOSPC);
    m_file.bytes += n;
    for (auto left = static_cast<std::size_t>(n); left > 0 && next < parts.size();) {
      const std::size_t used = std::min(left, parts[next].iov_len);
      parts[next].iov_base = static_cast<char*>(parts[next].iov_base) + used;
      parts[next].iov_len -= used;
      left -= used;
      if (parts[next].iov_len == 0) ++next;
    }
  }
  return true;
}

}  // namespace ptw::core
