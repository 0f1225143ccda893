// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/run_follower.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/profile.h"
#include "common/version.h"
#include "launch/chunk_decoder.h"
#include "launch/follow_stream.h"
#include "launch/headless.h"
#include "launch/step_file_reader.h"
#include "launch/store_database.h"

namespace ptw::core {
namespace {

using Statement = StoreDatabase::Statement;

// A log line longer than this is written in pieces of it: a rank that prints without
// newlines is still followed, in bounded memory.
constexpr std::size_t kMaxLogLine = 64 * 1024;
// What one poll reads of one log file at most, so that a rank that floods its log does not
// hold the records back.
constexpr std::size_t kLogReadBytes = 1 << 20;

// N when `name` is rankN.log.
bool rankLogName(const char* name, int& rank) {
  const std::size_t n = std::strlen(name);
  if (n < 9 || std::strncmp(name, "rank", 4) != 0 || std::strcmp(name + n - 4, ".log") != 0) return false;
  rank = 0;
  for (std::size_t i = 4; i < n - 4; ++i) {
    if (name[i] < '0' || name[i] > '9' || rank > 1'000'000) return false;
    rank = rank * 10 + (name[i] - '0');
  }
  return true;
}

}  // namespace

// Note [Woken by the step file]: tells when the file it watches was written to. Where inotify
// cannot be had (the user's limit of instances reached) it never tells, and the follower
// polls alone.
class StepFileWatch {
 public:
  StepFileWatch() : m_fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {}
  ~StepFileWatch() {
    if (m_fd >= 0) ::close(m_fd);
  }
  StepFileWatch(const StepFileWatch&) = delete;
  StepFileWatch& operator=(const StepFileWatch&) = delete;
  /// Watches `path` from now on, once it is there; false while it cannot be watched.
  bool watch(const std::string& path) {
    if (m_fd >= 0 && !m_watching) m_watching = ::inotify_add_watch(m_fd, path.c_str(), IN_MODIFY) >= 0;
    return m_watching;
  }
  /// Waits at most `ms` for a write; true when one came.
  bool wait(int ms) {
    pollfd p{m_fd, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    char buf[4096];
    while (::read(m_fd, buf, sizeof buf) > 0) {
    }
    return true;
  }

 private:
  int m_fd = -1;
  bool m_watching = false;
};

struct RunFollower::LogFile {
  int fd = -1;
  long long offset = 0;
  std::string partial;  ///< the bytes after the last newline read
  ~LogFile() {
    if (fd >= 0) ::close(fd);
  }
};

int followExitCode(const std::string& status) {
  if (status == "finished") return kExitOk;
  if (status == "stopped") return kExitInterrupted;
  return kExitTrainingFailed;  // failed, or interrupted: its supervisor ended without a verdict
}

RunFollower::RunFollower(FollowOptions options) : m_options(std::move(options)) {
  const std::string path = m_options.runsDir + "/runs.sqlite";
  PTW_CHECK(::access(path.c_str(), F_OK) == 0, "runs directory ", m_options.runsDir,
            " holds no runs (no runs.sqlite there); give the folder that runs were written to");
  openStore();
  m_run = m_catalog->named(m_options.run);
  // Frames are read by the build that wrote them (record.h), and a store's forms change
  // between versions: another version's run is followed by that version.
  PTW_CHECK(
      m_run.ptwVersion == kVersion, "run ", m_run.id, " was made by ",
      m_run.ptwVersion.empty() ? std::string("a ptw from before versions were recorded") : "ptw " + m_run.ptwVersion,
      ", not by this ptw ", kVersion, "; follow it with the ptw that runs it (`ptw export` reads it when it ends)");
  m_stepFile = m_options.runsDir + "/runs.blocks/" + std::to_string(m_run.id);
  closeStore();
}

// Open for the length of a poll only: a reader that has the store open when its writer
// closes it keeps SQLite from removing the -wal file then, which a reader cannot remove.
void RunFollower::openStore() {
  m_db = std::make_unique<StoreDatabase>(m_options.runsDir + "/runs.sqlite", StoreDatabase::ReadOnly{});
  m_catalog = std::make_unique<RunCatalog>(*m_db);
}

void RunFollower::closeStore() {
  m_catalog.reset();
  m_db.reset();
}

RunFollower::~RunFollower() = default;

long long RunFollower::packedBytes() {
  Statement s(*m_db, "SELECT unpacked_bytes FROM step_files WHERE run_id = ?");
  sqlite3_bind_int64(s, 1, m_run.id);
  const int rc = sqlite3_step(s);
  PTW_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, "run store ", m_db->path(), ": cannot read step_files (",
            m_db->error(), ")");
  return rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
}

int RunFollower::follow(FollowStream& out) {
  out.begin(m_run);
  if (!out.flush()) return followExitCode(m_run.status);
  StepFileWatch watch;
  for (;;) {
    const bool ended = poll(out);
    if (!out.flush()) return followExitCode(m_run.status);  // nobody reads on: nothing left to do
    if (ended) break;
    if (!waitForSteps(out, watch)) return followExitCode(m_run.status);
  }
  const int code = followExitCode(m_run.status);
  out.end(m_run, code);
  out.flush();
  return code;
}

// Note [Woken by the step file]. Until the next poll is due, the blocks appended to the step
// file as they come; false when nobody reads on.
bool RunFollower::waitForSteps(FollowStream& out, StepFileWatch& watch) {
  using Clock = std::chrono::steady_clock;
  const auto due = Clock::now() + m_options.pollInterval;
  if (!m_file || !watch.watch(m_stepFile)) {
    std::this_thread::sleep_until(due);
    return true;
  }
  // Bounded: each pass waits for a write, and the ranks hand over at most every few ms.
  for (int i = 0; i < 100000; ++i) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(due - Clock::now()).count();
    if (left <= 0 || !watch.wait(static_cast<int>(left) + 1)) break;
    readSteps(out, false);
    if (!out.flush()) return false;
  }
  return true;
}

// Note [Following a run]. True once the run has ended and all of it is written.
bool RunFollower::poll(FollowStream& out) {
  std::unique_ptr<StepFileReader> opened;
  if (!m_file && !m_fileDone) {  // before the snapshot (Note [Step blocks])
    opened = std::make_unique<StepFileReader>(m_stepFile);
    if (!opened->isOpen()) opened.reset();
  }
  bool ended = false;
  openStore();
  {
    const StoreDatabase::Snapshot snapshot(*m_db);
    m_run = m_catalog->run(m_run.id);
    ended = m_run.status != "running";
    if (!ended && supervisorGone(m_run)) {
      ended = true;
      m_run.status = "interrupted";
      m_run.message = "the supervisor ended without closing the run (killed, or crashed)";
    }
    if (!m_file) {  // chunks are read only until the step file is open: then it holds the rest
      readChunks(out);
      if (opened) {
        const long long packed = packedBytes();
        if (packed >= 0) {
          m_file = std::move(opened);
          m_filePos = packed;
        } else {
          m_fileDone = true;  // removed before the snapshot: all of it is chunks
        }
      }
    }
    if (m_file) readSteps(out, ended);
    readRows(out);
  }
  closeStore();
  readHosts(out);
  // Once the run has ended its logs grow no more: read to their ends (bounded all the same,
  // should an orphan of a rank still write).
  for (int i = 0; readLogs(out, ended) && ended && i < 4096; ++i) {
  }
  return ended;
}

void RunFollower::readChunks(FollowStream& out) {
  Statement s(*m_db,
              "SELECT rowid, attempt, rank, first_step, count, codec, records FROM step_chunks WHERE run_id = ?1 AND "
              "rowid > ?2 ORDER BY rowid");
  sqlite3_bind_int64(s, 1, m_run.id);
  sqlite3_bind_int64(s, 2, m_chunkRow);
  // A pack's rows are committed together, its own first (Note [Packs of ranks]): one decoder
  // for the poll decodes each pack once.
  ChunkDecoder decoder(*m_db);
  std::vector<StepRecord> chunk;
  Record r;
  r.kind = Record::Kind::Step;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    m_chunkRow = sqlite3_column_int64(s, 0);
    const auto row = ChunkDecoder::Row::fromColumns(s, 1, m_run.id);
    chunk.clear();
    decoder.decode(row, chunk);
    for (const auto& step : chunk) {
      if (step.step < m_options.fromStep) continue;
      r.step = step;
      out.record(r);
    }
  }
  PTW_CHECK(rc == SQLITE_DONE, "run store ", m_db->path(), ": cannot read run ", m_run.id, "'s steps (", m_db->error(),
            ")");
}

// The blocks past m_filePos. One that does not match its checksum is a write cut short (passed
// over, as every reader does) or, at the end of the file while the run goes on, one still
// being written: that one is read again at the next poll.
void RunFollower::readSteps(FollowStream& out, bool ended) {
  std::vector<BlockHeader> blocks;
  m_file->forEachBlock(m_filePos, [&](const BlockHeader& b) {
    blocks.push_back(b);
    return true;
  });
  std::vector<unsigned char> bytes;
  Record r;
  r.kind = Record::Kind::Step;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const BlockHeader& b = blocks[i];
    if (!m_file->read(b, bytes)) {
      if (i + 1 == blocks.size() && !ended) return;
      m_filePos = b.end();
      continue;
    }
    StepFileReader::forEachRecord(bytes.data(), bytes.size(), b.count, b.rank, b.fields, [&](const StepRecord& step) {
      if (step.step < m_options.fromStep) return;
      r.step = step;
      out.record(r);
    });
    m_filePos = b.end();
  }
}

void RunFollower::readRows(FollowStream& out) {
  {
    Statement s(*m_db,
                "SELECT rowid, step, val_loss, val_accuracy FROM validation WHERE run_id = ?1 AND rowid > ?2 "
                "ORDER BY rowid");
    sqlite3_bind_int64(s, 1, m_run.id);
    sqlite3_bind_int64(s, 2, m_validationRow);
    Record r;
    r.kind = Record::Kind::Validation;
    while (sqlite3_step(s) == SQLITE_ROW) {
      m_validationRow = sqlite3_column_int64(s, 0);
      r.step.step = sqlite3_column_int64(s, 1);
      if (r.step.step < m_options.fromStep) continue;
      r.valLoss = sqlite3_column_type(s, 2) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, 2);
      // -1: a regression's, as a worker's frame has it (record.h)
      r.valAccuracy = sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_double(s, 3);
      out.record(r);
    }
  }
  Statement s(*m_db,
              "SELECT rowid, rank, step, name, value FROM scalars WHERE run_id = ?1 AND rowid > ?2 ORDER BY rowid");
  sqlite3_bind_int64(s, 1, m_run.id);
  sqlite3_bind_int64(s, 2, m_scalarRow);
  Record r;
  r.kind = Record::Kind::Scalar;
  while (sqlite3_step(s) == SQLITE_ROW) {
    m_scalarRow = sqlite3_column_int64(s, 0);
    r.step.rank = sqlite3_column_int(s, 1);
    r.step.step = sqlite3_column_int64(s, 2);
    if (r.step.step < m_options.fromStep) continue;
    r.setName(StoreDatabase::text(s, 3));
    r.value = sqlite3_column_type(s, 4) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, 4);
    out.record(r);
  }
}

// The nodes a SLURM job gave the ranks, which the supervisor writes into the run folder when
// it learns them (Note [SLURM ranks]): an observer learns them only from the run. Until then a
// poll looks once for the file; a file that does not load is looked for again.
void RunFollower::readHosts(FollowStream& out) {
  if (m_hostsSent) return;
  const std::string path = m_run.dir + "/profile.nodes.json";
  if (::access(path.c_str(), R_OK) != 0) return;
  try {
    out.hosts(rankHosts(loadProfile(path)));
    m_hostsSent = true;
  } catch (const Error&) {  // being written: the next poll reads it whole
  }
}

// Each rankN.log of the run folder, from where the last poll stopped; a line is written
// once its newline is there, and the last one without a newline when the run has ended.
bool RunFollower::readLogs(FollowStream& out, bool ended) {
  if (DIR* d = ::opendir(m_run.dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      int rank = 0;
      if (!rankLogName(e->d_name, rank) || m_logs.count(rank)) continue;
      const int fd = ::open((m_run.dir + "/" + e->d_name).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      if (fd >= 0) m_logs[rank].fd = fd;
    }
    ::closedir(d);
  }
  std::vector<char> buf(kLogReadBytes);
  bool more = false;
  for (auto& [rank, log] : m_logs) {
    const ssize_t got = ::pread(log.fd, buf.data(), buf.size(), log.offset);
    if (got > 0) {
      log.offset += got;
      for (ssize_t i = 0; i < got; ++i) {
        if (buf[static_cast<std::size_t>(i)] != '\n') {
          log.partial += buf[static_cast<std::size_t>(i)];
          if (log.partial.size() < kMaxLogLine) continue;
        }
        out.log(rank, log.partial);
        log.partial.clear();
      }
    }
    // A file read in part this time (a flood) is read on before its last line is cut.
    const bool full = got == static_cast<ssize_t>(buf.size());
    more = more || full;
    if (ended && !full && !log.partial.empty()) {
      out.log(rank, log.partial);
      log.partial.clear();
    }
  }
  return more;
}

}  // namespace ptw::core
