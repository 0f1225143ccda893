#include "launch/run_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>
#include <tuple>

#include "common/error.h"

namespace ptw::core {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY,
  dir TEXT NOT NULL,
  name TEXT NOT NULL,
  strategy TEXT NOT NULL,
  world INTEGER NOT NULL,
  status TEXT NOT NULL,
  started_at TEXT NOT NULL,
  ended_at TEXT,
  message TEXT,
  final_loss REAL,
  samples_per_s REAL,
  attempts INTEGER NOT NULL DEFAULT 1,
  pid INTEGER NOT NULL,
  host TEXT NOT NULL,
  profile TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  loss REAL,
  samples_per_s REAL,
  step_ms REAL,
  data_ms REAL,
  compute_ms REAL,
  comm_ms REAL,
  opt_ms REAL,
  lr REAL,
  mem_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps (run_id, rank, step);
CREATE TABLE IF NOT EXISTS step_blocks (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  count INTEGER NOT NULL,
  records BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS step_blocks_by_run ON step_blocks (run_id, rank, first_step);
CREATE TABLE IF NOT EXISTS validation (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  val_loss REAL,
  val_accuracy REAL
);
)sql";

// A step record in a block: step, epoch (i64), loss, samples_per_s, step_ms, data_ms,
// compute_ms, comm_ms, opt_ms, lr (f64), mem_bytes (i64); little-endian, no padding.
constexpr std::size_t kBlockRecordBytes = 88;
// Records per block at most: a rank stepping every 30 µs fills ~8,000 in 250 ms.
constexpr std::int64_t kBlockRecords = 8192;

constexpr bool kLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

template <class T>
void putLe(char* at, T v) {
  static_assert(sizeof(T) == 8);
  std::uint64_t u;
  std::memcpy(&u, &v, 8);
  if constexpr (!kLittleEndian) u = __builtin_bswap64(u);
  std::memcpy(at, &u, 8);
}
template <class T>
T getLe(const unsigned char* at) {
  std::uint64_t u;
  std::memcpy(&u, at, 8);
  if constexpr (!kLittleEndian) u = __builtin_bswap64(u);
  T v;
  std::memcpy(&v, &u, 8);
  return v;
}

void packStep(const StepRecord& r, std::string& out) {
  char f[kBlockRecordBytes];
  putLe<std::int64_t>(f, r.step);
  putLe<std::int64_t>(f + 8, r.epoch);
  const double v[8] = {r.loss, r.samplesPerS, r.stepMs, r.dataMs, r.computeMs, r.commMs, r.optMs, r.lr};
  for (int i = 0; i < 8; ++i) putLe(f + 16 + 8 * i, v[i]);
  putLe<std::int64_t>(f + 80, r.memBytes);
  out.append(f, sizeof f);
}

StepRecord unpackStep(const unsigned char* f, int rank) {
  StepRecord r;
  r.rank = rank;
  r.step = getLe<std::int64_t>(f);
  r.epoch = getLe<std::int64_t>(f + 8);
  double* v[8] = {&r.loss, &r.samplesPerS, &r.stepMs, &r.dataMs, &r.computeMs, &r.commMs, &r.optMs, &r.lr};
  for (int i = 0; i < 8; ++i) *v[i] = getLe<double>(f + 16 + 8 * i);
  r.memBytes = getLe<std::int64_t>(f + 80);
  return r;
}

// The records of a block: `count` of them, or as many as its bytes hold if fewer.
template <class F>
void forEachPacked(const unsigned char* bytes, std::size_t size, std::int64_t count, int rank, F&& f) {
  const auto n = std::min<std::int64_t>(count, static_cast<std::int64_t>(size / kBlockRecordBytes));
  for (std::int64_t i = 0; i < n; ++i) f(unpackStep(bytes + static_cast<std::size_t>(i) * kBlockRecordBytes, rank));
}

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hostName() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    PTW_CHECK(sqlite3_prepare_v2(db, sql, -1, &m_stmt, nullptr) == SQLITE_OK, "run store: ", sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(m_stmt); }
  operator sqlite3_stmt*() const { return m_stmt; }

 private:
  sqlite3_stmt* m_stmt = nullptr;
};

std::string text(sqlite3_stmt* s, int col) {
  auto p = sqlite3_column_text(s, col);
  return p ? reinterpret_cast<const char*>(p) : "";
}

}  // namespace

RunStore::RunStore(const std::string& runsDir) : m_path(runsDir + "/runs.sqlite") {
  std::error_code ec;
  std::filesystem::create_directories(runsDir, ec);
  PTW_CHECK(!ec, "runs directory ", runsDir, ": cannot create (", ec.message(),
            "); choose another with --runs-dir or PTW_RUNS_DIR");
  // One thread at a time uses a store (run_store.h), so SQLite's own per-call locking
  // (taken ~20 times a stored record) is left out.
  if (sqlite3_open_v2(m_path.c_str(), &m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string why = m_db ? sqlite3_errmsg(m_db) : "out of memory";
    sqlite3_close(m_db);
    m_db = nullptr;
    PTW_FAIL("run store ", m_path, ": cannot open (", why, "); choose a writable runs directory with --runs-dir");
  }
  sqlite3_busy_timeout(m_db, 5000);  // another ptw writing its own run: wait, don't fail
  try {
    // Large pages: a block is written in 64 KiB writes rather than 4 KiB ones (a new
    // database only; an existing one keeps its page size).
    exec("PRAGMA page_size=65536");
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    // Fault-injection hook for the disk-full tests: cap the database size, in KiB.
    if (const char* cap = std::getenv("PTW_STORE_MAX_KIB")) {
      Statement size(m_db, "PRAGMA page_size");
      const long long page = sqlite3_step(size) == SQLITE_ROW ? sqlite3_column_int64(size, 0) : 4096;
      exec(("PRAGMA max_page_count=" + std::to_string(std::max(1LL, std::atoll(cap) * 1024 / page))).c_str());
    }
    exec(kSchema);
    // Runs left `running` by a supervisor that is gone: interrupted.
    Statement stale(m_db, "SELECT id, pid, host FROM runs WHERE status = 'running'");
    std::vector<std::int64_t> gone;
    const std::string host = hostName();
    while (sqlite3_step(stale) == SQLITE_ROW) {
      auto pid = static_cast<pid_t>(sqlite3_column_int64(stale, 1));
      bool alive = text(stale, 2) == host && (::kill(pid, 0) == 0 || errno == EPERM);
      if (!alive) gone.push_back(sqlite3_column_int64(stale, 0));
    }
    for (auto id : gone)
      exec(("UPDATE runs SET status = 'interrupted', message = 'the supervisor ended without closing the run "
            "(killed, crashed, or the machine stopped); metrics up to the last second before are kept' "
            "WHERE id = " + std::to_string(id)).c_str());
    PTW_CHECK(sqlite3_prepare_v2(m_db,
                                 "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", -1,
                                 &m_insertStep, nullptr) == SQLITE_OK,
              "run store: ", sqlite3_errmsg(m_db));
    PTW_CHECK(sqlite3_prepare_v2(m_db, "INSERT INTO validation VALUES (?, ?, ?, ?, ?)", -1, &m_insertValidation,
                                 nullptr) == SQLITE_OK,
              "run store: ", sqlite3_errmsg(m_db));
    PTW_CHECK(sqlite3_prepare_v2(m_db, "INSERT INTO step_blocks VALUES (?, ?, ?, ?, ?, ?, ?)", -1, &m_insertBlock,
                                 nullptr) == SQLITE_OK,
              "run store: ", sqlite3_errmsg(m_db));
  } catch (...) {
    sqlite3_finalize(m_insertStep);
    sqlite3_finalize(m_insertBlock);
    sqlite3_finalize(m_insertValidation);
    sqlite3_close(m_db);
    throw;
  }
}

void RunStore::unpackEndedRuns() {
  std::vector<std::int64_t> packed;
  {
    Statement q(m_db,
                "SELECT DISTINCT run_id FROM step_blocks WHERE run_id NOT IN (SELECT id FROM runs WHERE status = "
                "'running')");
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) packed.push_back(sqlite3_column_int64(q, 0));
    PTW_CHECK(rc == SQLITE_DONE, "run store ", m_path, ": cannot list step blocks (", sqlite3_errmsg(m_db), ")");
  }
  for (auto id : packed) unpackBlocks(id);
}

RunStore::~RunStore() {
  try {
    flush();
  } catch (...) {
  }
  stopCheckpointer();
  sqlite3_finalize(m_insertStep);
  sqlite3_finalize(m_insertBlock);
  sqlite3_finalize(m_insertValidation);
  sqlite3_close(m_db);
}

void RunStore::exec(const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(m_db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string why = msg ? msg : sqlite3_errmsg(m_db);
    sqlite3_free(msg);
    PTW_FAIL("run store ", m_path, ": ", why);
  }
}

// Note [Background checkpoints]
void RunStore::startCheckpointer() {
  if (m_checkpoints.thread.joinable()) return;
  sqlite3* db = nullptr;
  // A connection checkpoints only once it has read the database and so found it in WAL mode.
  if (sqlite3_open_v2(m_path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK ||
      sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return;  // the writer keeps checkpointing itself
  }
  {
    Statement size(m_db, "PRAGMA page_size");
    if (sqlite3_step(size) == SQLITE_ROW) m_checkpoints.pageBytes = sqlite3_column_int64(size, 0);
  }
  auto& c = m_checkpoints;
  try {
    c.thread = std::thread([&c, db] {
      std::unique_lock<std::mutex> lock(c.mutex);
      int lastLog = -1, lastCopied = -1;
      for (;;) {
        c.wake.wait(lock, [&c] { return c.wanted || c.stop; });
        if (c.stop) break;
        c.wanted = false;
        lock.unlock();
        // PASSIVE: copies what no reader still needs and never blocks the writer; what it
        // leaves is copied next time. `log` and `copied` are the WAL's frames and how many
        // of them are in the database now, counted since the WAL was last started over.
        int log = 0, copied = 0;
        const int rc = sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
        lock.lock();
        if (rc == SQLITE_OK && copied > 0 && (copied != lastCopied || log != lastLog)) ++c.done;
        lastLog = log;
        lastCopied = copied;
      }
      lock.unlock();
      sqlite3_close(db);
    });
  } catch (const std::system_error&) {
    sqlite3_close(db);
    return;
  }
  // Replaces SQLite's own checkpointing on this connection (a WAL hook of its own). The WAL
  // starts over only at a commit that finds it all copied; should the thread fall behind
  // (a disk slower than the run), the writer checkpoints itself past 64 MiB, as SQLite
  // would, so the WAL stays bounded.
  sqlite3_wal_hook(
      m_db,
      [](void* arg, sqlite3* db, const char* name, int pages) {
        auto& c = *static_cast<Checkpointer*>(arg);
        const long long bytes = static_cast<long long>(pages) * c.pageBytes;
        if (bytes >= (64LL << 20)) {
          sqlite3_wal_checkpoint(db, name);
        } else if (bytes >= (16LL << 20)) {
          std::lock_guard<std::mutex> lock(c.mutex);
          c.wanted = true;
          c.wake.notify_one();
        }
        return SQLITE_OK;
      },
      &m_checkpoints);
}

void RunStore::stopCheckpointer() {
  auto& c = m_checkpoints;
  if (!c.thread.joinable()) return;
  sqlite3_wal_autocheckpoint(m_db, 1000);  // SQLite's own again, for this connection's last writes
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stop = true;
  }
  c.wake.notify_one();
  c.thread.join();
}

int RunStore::backgroundCheckpoints() {
  std::lock_guard<std::mutex> lock(m_checkpoints.mutex);
  return m_checkpoints.done;
}

std::int64_t RunStore::beginRun(const std::string& dir, const Profile& p) {
  startCheckpointer();
  Statement s(m_db,
              "INSERT INTO runs (dir, name, strategy, world, status, started_at, pid, host, profile) "
              "VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?)");
  const std::string now = utcNow(), host = hostName(), json = toJson(p);
  std::string strategy = p.strategy.kind == "pool" ? "pool/" + p.strategy.poolMode : p.strategy.kind;
  sqlite3_bind_text(s, 1, dir.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, p.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, strategy.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 4, reportingRanks(p));
  sqlite3_bind_text(s, 5, now.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 6, ::getpid());
  sqlite3_bind_text(s, 7, host.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 8, json.c_str(), -1, SQLITE_TRANSIENT);
  PTW_CHECK(sqlite3_step(s) == SQLITE_DONE, "run store ", m_path, ": cannot record the run (", sqlite3_errmsg(m_db),
            ")");
  return sqlite3_last_insert_rowid(m_db);
}

void RunStore::append(std::int64_t runId, int attempt, const std::vector<Record>& batch) {
  if (!m_error.empty()) return;
  Block* block = nullptr;
  for (const auto& r : batch) {
    if (r.kind == Record::Kind::Validation) {
      m_validation.push_back({runId, attempt, r});
      continue;
    }
    if (r.kind != Record::Kind::Step) continue;
    const StepRecord& s = r.step;
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
        block->bytes.reserve(kBlockRecords * kBlockRecordBytes);
      }
    }
    packStep(s, block->bytes);
    block->firstStep = std::min(block->firstStep, s.step);
    block->lastStep = std::max(block->lastStep, s.step);
    ++block->count;
  }
  if (std::chrono::steady_clock::now() - m_lastCommit > std::chrono::milliseconds(250)) commitBuffer();
}

void RunStore::flush() { commitBuffer(); }

void RunStore::commitBuffer() {
  m_lastCommit = std::chrono::steady_clock::now();
  if ((m_blocks.empty() && m_validation.empty()) || !m_error.empty()) return;
  auto fail = [&](const char* what) {
    const int code = sqlite3_errcode(m_db);
    m_error = std::string("run store ") + m_path + ": " + what + " failed (" + sqlite3_errmsg(m_db) + ")" +
              (code == SQLITE_FULL ? "; the disk (or the store's size limit) is full: free space and resume the run "
                                     "from its last checkpoint (run.resume_from)"
                                   : "");
    sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
  };
  if (sqlite3_exec(m_db, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("BEGIN");
  for (const auto& b : m_blocks) {
    sqlite3_stmt* s = m_insertBlock;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, b.runId);
    sqlite3_bind_int(s, 2, b.attempt);
    sqlite3_bind_int(s, 3, b.rank);
    sqlite3_bind_int64(s, 4, b.firstStep);
    sqlite3_bind_int64(s, 5, b.lastStep);
    sqlite3_bind_int64(s, 6, b.count);
    sqlite3_bind_blob64(s, 7, b.bytes.data(), b.bytes.size(), SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) return fail("writing metrics");
  }
  sqlite3_reset(m_insertBlock);
  sqlite3_clear_bindings(m_insertBlock);  // the blob's buffer is reused
  for (const auto& v : m_validation) {
    sqlite3_stmt* s = m_insertValidation;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, v.runId);
    sqlite3_bind_int(s, 2, v.attempt);
    sqlite3_bind_int64(s, 3, v.record.step.step);
    sqlite3_bind_double(s, 4, v.record.valLoss);
    if (v.record.valAccuracy >= 0) sqlite3_bind_double(s, 5, v.record.valAccuracy);
    else sqlite3_bind_null(s, 5);
    if (sqlite3_step(s) != SQLITE_DONE) return fail("writing metrics");
  }
  if (sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("COMMIT");
  for (auto& b : m_blocks) {
    b.bytes.clear();
    if (m_spare.size() < 2 * m_blocks.size()) m_spare.push_back(std::move(b.bytes));
  }
  m_blocks.clear();
  m_validation.clear();
}

// One block a transaction: the write lock is held for ~20 ms at a time (another run writing
// to the same store is never kept waiting long), and a reader sees each block either packed
// or as rows, never neither nor both.
void RunStore::unpackBlocks(std::int64_t runId, const UnpackProgress& progress) {
  auto fail = [&](bool inTransaction) {
    std::string why = sqlite3_errmsg(m_db);
    if (inTransaction) sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
    PTW_FAIL("run store ", m_path, ": cannot unpack run ", runId, "'s step blocks into rows (", why,
             "); they are kept and still read");
  };
  std::vector<std::pair<std::int64_t, std::int64_t>> blocks;  // rowid, records
  std::int64_t total = 0, done = 0;
  {
    Statement q(m_db, "SELECT rowid, count FROM step_blocks WHERE run_id = ? ORDER BY rowid");
    sqlite3_bind_int64(q, 1, runId);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
      blocks.emplace_back(sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1));
      total += blocks.back().second;
    }
    if (rc != SQLITE_DONE) fail(false);
  }
  if (progress && !blocks.empty()) progress(0, total);
  Statement read(m_db, "SELECT attempt, rank, count, records FROM step_blocks WHERE rowid = ?");
  Statement drop(m_db, "DELETE FROM step_blocks WHERE rowid = ?");
  for (const auto& [block, records] : blocks) {
    if (sqlite3_exec(m_db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) fail(false);
    sqlite3_reset(read);
    sqlite3_bind_int64(read, 1, block);
    const int rc = sqlite3_step(read);
    if (rc == SQLITE_ROW) {
      const int attempt = sqlite3_column_int(read, 0), rank = sqlite3_column_int(read, 1);
      // A copy: the inserts below must not be able to move what the blob points at.
      const auto* blob = static_cast<const unsigned char*>(sqlite3_column_blob(read, 3));
      const std::basic_string<unsigned char> bytes(blob, blob + sqlite3_column_bytes(read, 3));
      const std::int64_t count = sqlite3_column_int64(read, 2);
      sqlite3_reset(read);
      forEachPacked(bytes.data(), bytes.size(), count, rank, [&](const StepRecord& r) {
        sqlite3_stmt* s = m_insertStep;
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, runId);
        sqlite3_bind_int(s, 2, attempt);
        sqlite3_bind_int(s, 3, r.rank);
        sqlite3_bind_int64(s, 4, r.step);
        sqlite3_bind_int64(s, 5, r.epoch);
        sqlite3_bind_double(s, 6, r.loss);
        sqlite3_bind_double(s, 7, r.samplesPerS);
        sqlite3_bind_double(s, 8, r.stepMs);
        sqlite3_bind_double(s, 9, r.dataMs);
        sqlite3_bind_double(s, 10, r.computeMs);
        sqlite3_bind_double(s, 11, r.commMs);
        sqlite3_bind_double(s, 12, r.optMs);
        sqlite3_bind_double(s, 13, r.lr);
        sqlite3_bind_int64(s, 14, r.memBytes);
        if (sqlite3_step(s) != SQLITE_DONE) fail(true);
      });
    } else if (rc != SQLITE_DONE) {  // SQLITE_DONE: already unpacked by another connection
      fail(true);
    }
    sqlite3_reset(drop);
    sqlite3_bind_int64(drop, 1, block);
    if (sqlite3_step(drop) != SQLITE_DONE) fail(true);
    if (sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) fail(true);
    done += records;
    if (progress) progress(done, total);
  }
}

void RunStore::endRun(std::int64_t runId, const std::string& status, const std::string& message, double finalLoss,
                      double samplesPerS, int attempts, const UnpackProgress& progress) {
  commitBuffer();
  try {
    unpackBlocks(runId, progress);
    unpackEndedRuns();  // an interrupted run's, or one whose unpacking failed before
  } catch (const Error&) {
    // Nothing is lost (the blocks are kept and read), so the run is not failed for it; the
    // next run to end, `ptw runs` or `ptw export` tries again.
  }
  if (!std::isfinite(finalLoss) || !std::isfinite(samplesPerS)) {
    // Not given (the window gives no final loss, and no throughput when it saw no step): from
    // the stored records, the last step's mean loss and the sum over ranks of their mean rate.
    Statement q(m_db,
                "SELECT (SELECT avg(loss) FROM steps WHERE run_id = ?1 AND step = (SELECT max(step) FROM steps "
                "WHERE run_id = ?1)), (SELECT sum(t) FROM (SELECT avg(samples_per_s) AS t FROM steps WHERE "
                "run_id = ?1 GROUP BY rank))");
    sqlite3_bind_int64(q, 1, runId);
    if (sqlite3_step(q) == SQLITE_ROW) {
      if (!std::isfinite(finalLoss) && sqlite3_column_type(q, 0) != SQLITE_NULL) finalLoss = sqlite3_column_double(q, 0);
      if (!std::isfinite(samplesPerS) && sqlite3_column_type(q, 1) != SQLITE_NULL)
        samplesPerS = sqlite3_column_double(q, 1);
    }
  }
  Statement s(m_db,
              "UPDATE runs SET status = ?, ended_at = ?, message = ?, final_loss = ?, samples_per_s = ?, "
              "attempts = ? WHERE id = ?");
  const std::string now = utcNow();
  sqlite3_bind_text(s, 1, status.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, now.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, message.c_str(), -1, SQLITE_TRANSIENT);
  if (std::isfinite(finalLoss)) sqlite3_bind_double(s, 4, finalLoss);
  else sqlite3_bind_null(s, 4);
  if (std::isfinite(samplesPerS)) sqlite3_bind_double(s, 5, samplesPerS);
  else sqlite3_bind_null(s, 5);
  sqlite3_bind_int(s, 6, attempts);
  sqlite3_bind_int64(s, 7, runId);
  if (sqlite3_step(s) != SQLITE_DONE && m_error.empty())
    m_error = "run store " + m_path + ": cannot close the run (" + sqlite3_errmsg(m_db) + ")";
}

// The runs `where` selects (bound to `id` when it has a parameter), oldest first.
std::vector<RunRow> RunStore::selectRuns(const char* where, std::int64_t id) {
  const std::string sql = std::string("SELECT id, dir, name, strategy, world, status, started_at, ifnull(ended_at, ''), "
                                      "ifnull(message, ''), ifnull(final_loss, 'nan'), ifnull(samples_per_s, 'nan'), "
                                      "attempts, profile FROM runs ") +
                          where + " ORDER BY id";
  Statement s(m_db, sql.c_str());
  if (sqlite3_bind_parameter_count(s) > 0) sqlite3_bind_int64(s, 1, id);
  std::vector<RunRow> out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    RunRow r;
    r.id = sqlite3_column_int64(s, 0);
    r.dir = text(s, 1);
    r.name = text(s, 2);
    r.strategy = text(s, 3);
    r.world = sqlite3_column_int(s, 4);
    r.status = text(s, 5);
    r.startedAt = text(s, 6);
    r.endedAt = text(s, 7);
    r.message = text(s, 8);
    r.finalLoss = sqlite3_column_type(s, 9) == SQLITE_TEXT ? std::nan("") : sqlite3_column_double(s, 9);
    r.samplesPerS = sqlite3_column_type(s, 10) == SQLITE_TEXT ? std::nan("") : sqlite3_column_double(s, 10);
    r.attempts = sqlite3_column_int(s, 11);
    r.profileJson = text(s, 12);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<RunRow> RunStore::runs() { return selectRuns("", 0); }

RunRow RunStore::run(std::int64_t id) {
  auto found = selectRuns("WHERE id = ?", id);
  PTW_CHECK(!found.empty(), "run store ", m_path, ": no run with id ", id, " (list them with `ptw runs`)");
  return std::move(found.front());
}

std::vector<StepRecord> RunStore::collect(std::int64_t runId, int rank, std::int64_t x0, std::int64_t x1) {
  struct Found {
    int attempt;
    StepRecord r;
  };
  std::vector<Found> found;
  // One read transaction: a block being unpacked by another connection is seen in one form.
  const bool snapshot =
      sqlite3_get_autocommit(m_db) && sqlite3_exec(m_db, "BEGIN", nullptr, nullptr, nullptr) == SQLITE_OK;
  struct EndRead {
    sqlite3* db;
    bool on;
    ~EndRead() {
      if (on) sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    }
  } endRead{m_db, snapshot};
  auto bindRange = [&](sqlite3_stmt* s) {
    sqlite3_bind_int64(s, 1, runId);
    sqlite3_bind_int(s, 2, rank);
    sqlite3_bind_int64(s, 3, x0);
    sqlite3_bind_int64(s, 4, x1);
  };
  // No rank filter in the text for every rank, so that one rank's range uses the
  // (run_id, rank, step) index rather than an `?2 < 0 OR` that defeats it.
  const char* byRank = rank < 0 ? "" : " AND rank = ?2";
  auto done = [&](int rc) {
    PTW_CHECK(rc == SQLITE_DONE, "run store ", m_path, ": cannot read run ", runId, "'s steps (",
              sqlite3_errmsg(m_db), ")");
  };
  {
    const std::string sql = std::string("SELECT attempt, rank, step, epoch, loss, samples_per_s, step_ms, data_ms, "
                                        "compute_ms, comm_ms, opt_ms, lr, mem_bytes FROM steps WHERE run_id = ?1") +
                            byRank + " AND step BETWEEN ?3 AND ?4";
    Statement s(m_db, sql.c_str());
    bindRange(s);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      Found f{sqlite3_column_int(s, 0), {}};
      StepRecord& r = f.r;
      r.rank = sqlite3_column_int(s, 1);
      r.step = sqlite3_column_int64(s, 2);
      r.epoch = sqlite3_column_int64(s, 3);
      r.loss = sqlite3_column_double(s, 4);
      r.samplesPerS = sqlite3_column_double(s, 5);
      r.stepMs = sqlite3_column_double(s, 6);
      r.dataMs = sqlite3_column_double(s, 7);
      r.computeMs = sqlite3_column_double(s, 8);
      r.commMs = sqlite3_column_double(s, 9);
      r.optMs = sqlite3_column_double(s, 10);
      r.lr = sqlite3_column_double(s, 11);
      r.memBytes = sqlite3_column_int64(s, 12);
      found.push_back(f);
    }
    done(rc);
  }
  {
    const std::string sql = std::string("SELECT attempt, rank, count, records FROM step_blocks WHERE run_id = ?1") +
                            byRank + " AND last_step >= ?3 AND first_step <= ?4";
    Statement s(m_db, sql.c_str());
    bindRange(s);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      const int attempt = sqlite3_column_int(s, 0), blockRank = sqlite3_column_int(s, 1);
      forEachPacked(static_cast<const unsigned char*>(sqlite3_column_blob(s, 3)),
                    static_cast<std::size_t>(sqlite3_column_bytes(s, 3)), sqlite3_column_int64(s, 2), blockRank,
                    [&](const StepRecord& r) {
                      if (r.step >= x0 && r.step <= x1) found.push_back({attempt, r});
                    });
    }
    done(rc);
  }
  // Where a restart replayed steps, the later attempt's record wins.
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.r.rank, a.r.step, a.attempt) < std::tie(b.r.rank, b.r.step, b.attempt);
  });
  std::vector<StepRecord> out;
  out.reserve(found.size());
  for (const auto& f : found) {
    if (!out.empty() && out.back().rank == f.r.rank && out.back().step == f.r.step) out.back() = f.r;
    else out.push_back(f.r);
  }
  return out;
}

std::vector<StepRecord> RunStore::steps(std::int64_t runId) {
  return collect(runId, -1, 0, std::numeric_limits<std::int64_t>::max());
}

std::int64_t RunStore::stepCount(std::int64_t runId) {
  Statement s(m_db,
              "SELECT (SELECT count(*) FROM steps WHERE run_id = ?1) + (SELECT ifnull(sum(count), 0) FROM step_blocks "
              "WHERE run_id = ?1)");
  sqlite3_bind_int64(s, 1, runId);
  return sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
}

std::vector<std::pair<double, double>> RunStore::series(std::int64_t runId, int rank, const std::string& column,
                                                       double x0, double x1) {
  double StepRecord::*field = column == "loss"            ? &StepRecord::loss
                              : column == "samples_per_s" ? &StepRecord::samplesPerS
                              : column == "step_ms"       ? &StepRecord::stepMs
                                                          : nullptr;
  PTW_CHECK(field != nullptr, "run store: no series \"", column, "\"");
  if (rank < 0 || std::isnan(x0) || std::isnan(x1)) return {};
  const double lo = std::max(0.0, std::floor(x0)), hi = std::ceil(x1);
  if (!(hi >= lo)) return {};
  const auto clampStep = [](double v) {
    return v >= 9e18 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(v);
  };
  std::vector<std::pair<double, double>> out;
  for (const auto& r : collect(runId, rank, clampStep(lo), clampStep(hi)))
    out.emplace_back(static_cast<double>(r.step), r.*field);
  return out;
}

void RunStore::exportCsv(std::int64_t runId, const std::string& path) {
  run(runId);  // names a missing run
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    PTW_CHECK(out, path, ": cannot write (", std::strerror(errno), "); choose a writable file");
    out << "rank,step,epoch,loss,samples_per_s,step_ms,data_ms,compute_ms,comm_ms,opt_ms,lr,mem_bytes\n";
    out.precision(9);
    for (const auto& r : steps(runId))
      out << r.rank << ',' << r.step << ',' << r.epoch << ',' << r.loss << ',' << r.samplesPerS << ',' << r.stepMs
          << ',' << r.dataMs << ',' << r.computeMs << ',' << r.commMs << ',' << r.optMs << ',' << r.lr << ','
          << r.memBytes << '\n';
    out.flush();
    PTW_CHECK(out.good(), path, ": write failed (", std::strerror(errno), ")");
  }
  PTW_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot replace (", std::strerror(errno), ")");
}

}  // namespace ptw::core
