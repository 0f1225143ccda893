#include "launch/run_store.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
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
#include <type_traits>

#include "common/error.h"
#include "common/step_block.h"
#include "common/strategies.h"
#include "common/version.h"
#include "launch/step_chunk.h"

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
  profile TEXT NOT NULL,
  ptw_version TEXT
);
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
CREATE TABLE IF NOT EXISTS step_chunks (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  count INTEGER NOT NULL,
  codec INTEGER NOT NULL,
  records BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS step_chunks_by_run ON step_chunks (run_id, rank, first_step);
CREATE TABLE IF NOT EXISTS step_files (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id),
  unpacked_bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS validation (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  val_loss REAL,
  val_accuracy REAL
);
CREATE TABLE IF NOT EXISTS scalars (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL
);
CREATE INDEX IF NOT EXISTS scalars_by_run ON scalars (run_id, name, rank, step);
)sql";

// The `steps` table, a row a record: what stores of earlier builds hold, read and never
// written (Note [Step blocks]). Its columns follow Note [Step fields]; a field added since
// a store was made is read from its table as 0 (stepsColumns()).
std::string stepsTableSql() {
  std::string sql =
      "CREATE TABLE IF NOT EXISTS steps (\n  run_id INTEGER NOT NULL REFERENCES runs(id),\n  attempt INTEGER NOT "
      "NULL,\n  rank INTEGER NOT NULL";
  StepRecord::forEachField([&](const char* name, auto m) {
    bool key = false;  // the step and the epoch are never NULL
    if constexpr (std::is_same_v<StepFieldType<decltype(m)>, std::int64_t>)
      key = m == &StepRecord::step || m == &StepRecord::epoch;
    const bool integer = std::is_same_v<StepFieldType<decltype(m)>, std::int64_t>;
    sql += std::string(",\n  ") + name + (integer ? " INTEGER" : " REAL") + (key ? " NOT NULL" : "");
  });
  return sql + "\n);\nCREATE INDEX IF NOT EXISTS steps_by_run ON steps (run_id, rank, step);\n";
}

// The records of a block: `count` of them of `fields` fields, or as many as its bytes hold if fewer.
template <class F>
void forEachPacked(const unsigned char* bytes, std::size_t size, std::int64_t count, int rank, std::size_t fields,
                   F&& f) {
  const std::size_t recordBytes = 8 * fields;
  const auto n = std::min<std::int64_t>(count, static_cast<std::int64_t>(size / recordBytes));
  for (std::int64_t i = 0; i < n; ++i) f(unpackStep(bytes + static_cast<std::size_t>(i) * recordBytes, rank, fields));
}

using FileBlock = BlockHeader;

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

// The header of the block at `at`, if one starts there and its header is whole.
bool blockAt(int fd, long long at, long long size, FileBlock& b) {
  unsigned char h[kBlockHeaderBytes];
  return at + static_cast<long long>(kBlockHeaderBytes) <= size && preadAll(fd, h, sizeof h, at) &&
         parseBlockHeader(h, at, b);
}

// The first block whose header starts in [from, size), or false.
bool nextBlockAfter(int fd, long long from, long long size, FileBlock& b) {
  static const char magic[4] = {'P', 'T', 'W', 'B'};  // kBlockMagic, little-endian
  std::vector<char> chunk(64 * 1024);
  for (long long at = from; at + static_cast<long long>(kBlockHeaderBytes) <= size;) {
    const auto n = static_cast<std::size_t>(std::min<long long>(static_cast<long long>(chunk.size()), size - at));
    if (!preadAll(fd, chunk.data(), n, at)) return false;
    for (std::size_t i = 0; i + sizeof magic <= n; ++i) {
      const void* hit = std::memchr(chunk.data() + i, magic[0], n - sizeof magic + 1 - i);
      if (!hit) break;
      i = static_cast<std::size_t>(static_cast<const char*>(hit) - chunk.data());
      if (std::memcmp(chunk.data() + i, magic, sizeof magic) == 0 &&
          blockAt(fd, at + static_cast<long long>(i), size, b))
        return true;
    }
    if (n < chunk.size()) return false;
    at += static_cast<long long>(n - sizeof magic + 1);  // a magic across the chunks' border is seen in the next
  }
  return false;
}

// Calls `each(block)` for the blocks of a step file from byte `from` on, while it returns
// true. Every block is one write: the store's own, or a rank's (Note [Ranks write their
// steps]), several ranks appending to one file. A write cut short (its rank killed in the
// middle, or a crash) leaves a block shorter than its header says, and a later write starts
// right after its last byte. So a block whose end is not the file's end nor the start of
// another block is followed by a search for the next header from its records on; a block
// whose records pass the end of the file is one being written, or cut short and then passed
// over when a header follows it. Readers check each block's records against its checksum
// (readFileBlock) and pass over those that differ.
template <class F>
void forEachFileBlock(int fd, long long from, F&& each) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;
  const long long size = st.st_size;
  FileBlock b, next;
  if (!blockAt(fd, from, size, b) && !nextBlockAfter(fd, from, size, b)) return;
  for (;;) {
    if (b.end() > size) {  // being written, or cut short
      if (!nextBlockAfter(fd, b.records, size, b)) return;
      continue;
    }
    if (!each(b)) return;
    if (b.end() == size) return;
    if (blockAt(fd, b.end(), size, next))
      b = next;
    else if (!nextBlockAfter(fd, b.records, size, b))
      return;
  }
}

// A block's records into `out`; false when they are not what its header says. Throws
// ptw::Error when the file cannot be read (the records may be whole: nothing is passed over).
bool readFileBlock(int fd, const FileBlock& b, std::vector<unsigned char>& out) {
  out.resize(static_cast<std::size_t>(b.count * b.recordBytes()));
  PTW_CHECK(preadAll(fd, out.data(), out.size(), b.records), "run store: cannot read a step file (",
            std::strerror(errno), ")");
  return blockIsWhole(out.data(), out.size(), b.sum);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

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

// One read transaction, where the caller is in none: a block being unpacked by another
// connection is seen in one form. A run's step file is opened before it begins (Note [Step
// blocks]): a file unpacked and removed after that is still there to read, and one removed
// before is all rows in it.
class Snapshot {
 public:
  explicit Snapshot(sqlite3* db)
      : m_db(db),
        m_on(sqlite3_get_autocommit(db) && sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr) == SQLITE_OK) {}
  ~Snapshot() {
    if (m_on) sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr);
  }
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

 private:
  sqlite3* m_db;
  bool m_on;
};

// How much of a run's step file is rows already, or -1 when the run has none to read.
long long unpackedBytes(sqlite3* db, std::int64_t runId) {
  Statement s(db, "SELECT unpacked_bytes FROM step_files WHERE run_id = ?");
  sqlite3_bind_int64(s, 1, runId);
  const int rc = sqlite3_step(s);
  PTW_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, "run store: cannot read step_files (", sqlite3_errmsg(db), ")");
  return rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
}

// What collect() selects from `steps` after attempt and rank: its columns in the order of
// Note [Step fields], 0 for one that a store of an earlier build has not.
std::string stepsColumns(sqlite3* db) {
  Statement info(db, "PRAGMA table_info(steps)");
  std::vector<std::string> has;
  while (sqlite3_step(info) == SQLITE_ROW)
    has.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(info, 1)));
  std::string out = "attempt, rank";
  StepRecord::forEachField([&](const char* name, auto) {
    out += std::string(", ") + (std::find(has.begin(), has.end(), name) != has.end() ? name : "0");
  });
  return out;
}

bool hasColumn(sqlite3* db, const char* table, const char* column) {
  Statement info(db, (std::string("PRAGMA table_info(") + table + ")").c_str());
  while (sqlite3_step(info) == SQLITE_ROW)
    if (std::strcmp(reinterpret_cast<const char*>(sqlite3_column_text(info, 1)), column) == 0) return true;
  return false;
}

// Brings a store made by an earlier build up to this schema, in place, keeping its runs:
// columns added since are added empty (NULL), and every reader here treats NULL as "not
// recorded". Older builds still open a store migrated so (they name the columns they write).
void migrateSchema(sqlite3* db, const std::function<void(const char*)>& exec) {
  if (!hasColumn(db, "runs", "ptw_version")) exec("ALTER TABLE runs ADD COLUMN ptw_version TEXT");
}

std::string text(sqlite3_stmt* s, int col) {
  auto p = sqlite3_column_text(s, col);
  return p ? reinterpret_cast<const char*>(p) : "";
}

}  // namespace

RunStore::RunStore(const std::string& runsDir, const RunStoreOptions& options)
    : m_path(runsDir + "/runs.sqlite"), m_blocksDir(runsDir + "/runs.blocks") {
  std::error_code ec;
  std::filesystem::create_directories(runsDir, ec);
  PTW_CHECK(!ec, "runs directory ", runsDir, ": cannot create (", ec.message(),
            "); choose another with --runs-dir or PTW_RUNS_DIR");
  // One thread at a time uses a store (run_store.h), so SQLite's own per-call locking
  // (taken many times a stored record) is left out.
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
    // The disk-full tests' cap on the database's size.
    PTW_CHECK(options.sizeLimitKib >= 0, "run store: the size limit must be >= 0 KiB, got ", options.sizeLimitKib);
    if (options.sizeLimitKib > 0) {
      Statement size(m_db, "PRAGMA page_size");
      const long long page = sqlite3_step(size) == SQLITE_ROW ? sqlite3_column_int64(size, 0) : 4096;
      exec(("PRAGMA max_page_count=" + std::to_string(std::max(1LL, options.sizeLimitKib * 1024 / page))).c_str());
      m_maxStepFileBytes = options.sizeLimitKib * 1024;
    }
    exec(kSchema);
    migrateSchema(m_db, [this](const char* sql) { exec(sql); });
    exec(stepsTableSql().c_str());
    m_stepsColumns = stepsColumns(m_db);
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
            "WHERE id = " +
            std::to_string(id))
               .c_str());
    PTW_CHECK(sqlite3_prepare_v2(m_db, "INSERT INTO validation VALUES (?, ?, ?, ?, ?)", -1, &m_insertValidation,
                                 nullptr) == SQLITE_OK,
              "run store: ", sqlite3_errmsg(m_db));
    PTW_CHECK(sqlite3_prepare_v2(m_db, "INSERT INTO scalars VALUES (?, ?, ?, ?, ?, ?)", -1, &m_insertScalar, nullptr) ==
                  SQLITE_OK,
              "run store: ", sqlite3_errmsg(m_db));
  } catch (...) {
    sqlite3_finalize(m_insertScalar);
    sqlite3_finalize(m_insertValidation);
    sqlite3_close(m_db);
    throw;
  }
}

void RunStore::packEndedRuns(const RunPackProgress& progress) {
  std::vector<std::int64_t> packed;
  {
    Statement q(m_db,
                "SELECT run_id FROM step_blocks UNION SELECT run_id FROM step_files EXCEPT SELECT id FROM runs WHERE "
                "status = 'running'");
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) packed.push_back(sqlite3_column_int64(q, 0));
    PTW_CHECK(rc == SQLITE_DONE, "run store ", m_path, ": cannot list step blocks (", sqlite3_errmsg(m_db), ")");
  }
  for (auto id : packed) {
    if (!progress)
      packSteps(id);
    else
      packSteps(id, [&](std::int64_t done, std::int64_t total) { progress(id, done, total); });
  }
}

RunStore::~RunStore() {
  try {
    flush();
  } catch (...) {
  }
  closeStepFile();
  sqlite3_finalize(m_insertScalar);
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

std::string RunStore::stepFilePath(std::int64_t runId) const { return m_blocksDir + "/" + std::to_string(runId); }

void RunStore::closeStepFile() {
  if (m_stepFile.fd >= 0) ::close(m_stepFile.fd);
  m_stepFile = StepFile{};
}

std::int64_t RunStore::beginRun(const std::string& dir, const Profile& p) {
  Statement s(m_db,
              "INSERT INTO runs (dir, name, strategy, world, status, started_at, pid, host, profile, ptw_version) "
              "VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)");
  const std::string now = utcNow(), host = hostName(), json = toJson(p);
  const std::string strategy = storedStrategyName(p);
  sqlite3_bind_text(s, 1, dir.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, p.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, strategy.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 4, reportingRanks(p));
  sqlite3_bind_text(s, 5, now.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 6, ::getpid());
  sqlite3_bind_text(s, 7, host.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 8, json.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 9, kVersion, -1, SQLITE_STATIC);
  PTW_CHECK(sqlite3_step(s) == SQLITE_DONE, "run store ", m_path, ": cannot record the run (", sqlite3_errmsg(m_db),
            ")");
  const std::int64_t id = sqlite3_last_insert_rowid(m_db);
  m_keep[id] = p.run;
  ::unlink(stepFilePath(id).c_str());  // a step file by this id is left from a database removed since
  return id;
}

void RunStore::append(std::int64_t runId, int attempt, const std::vector<Record>& batch) {
  if (!m_error.empty()) return;
  const auto keep = m_keep.find(runId);
  Block* block = nullptr;
  for (const auto& r : batch) {
    if (r.kind == Record::Kind::Validation || r.kind == Record::Kind::Scalar) {
      (r.kind == Record::Kind::Validation ? m_validation : m_scalars).push_back({runId, attempt, r});
      continue;
    }
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
  if (std::chrono::steady_clock::now() - m_lastCommit > std::chrono::milliseconds(250)) commitBuffer();
}

void RunStore::flush() { commitBuffer(); }

std::string RunStore::stepFileForRanks(std::int64_t runId) {
  std::string why;  // unused: the ranks then send their records, and append() stores them
  return registerStepFile(runId, why) ? stepFilePath(runId) : "";
}

// The run's row in step_files before anything is in its file: a reader reads a file only
// while its run has one, from the unpacked length it holds (0 for a new file).
bool RunStore::registerStepFile(std::int64_t runId, std::string& why) {
  const std::string file = stepFilePath(runId);
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
  if (sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    why = metricsWriteError(m_path, sqlite3_errmsg(m_db), sqlite3_errcode(m_db) == SQLITE_FULL ? ENOSPC : 0);
    return false;
  }
  return true;
}

void RunStore::commitBuffer() {
  m_lastCommit = std::chrono::steady_clock::now();
  if ((m_blocks.empty() && m_validation.empty() && m_scalars.empty()) || !m_error.empty()) return;
  if (!m_blocks.empty() && !writeBlocks()) return;
  if (!m_validation.empty() || !m_scalars.empty()) {
    auto fail = [&](const char* what) {
      const int code = sqlite3_errcode(m_db);
      m_error = std::string("run store ") + m_path + ": " + what + " failed (" + sqlite3_errmsg(m_db) + ")" +
                (code == SQLITE_FULL ? storeFullAdvice(m_path) : "");
      sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
    };
    if (sqlite3_exec(m_db, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("BEGIN");
    for (const auto& v : m_validation) {
      sqlite3_stmt* s = m_insertValidation;
      sqlite3_reset(s);
      sqlite3_bind_int64(s, 1, v.runId);
      sqlite3_bind_int(s, 2, v.attempt);
      sqlite3_bind_int64(s, 3, v.record.step.step);
      sqlite3_bind_double(s, 4, v.record.valLoss);
      if (v.record.valAccuracy >= 0)
        sqlite3_bind_double(s, 5, v.record.valAccuracy);
      else
        sqlite3_bind_null(s, 5);
      if (sqlite3_step(s) != SQLITE_DONE) return fail("writing metrics");
    }
    for (const auto& v : m_scalars) {
      sqlite3_stmt* s = m_insertScalar;
      sqlite3_reset(s);
      sqlite3_bind_int64(s, 1, v.runId);
      sqlite3_bind_int(s, 2, v.attempt);
      sqlite3_bind_int(s, 3, v.record.step.rank);
      sqlite3_bind_int64(s, 4, v.record.step.step);
      const std::string_view name = v.record.scalarName();
      sqlite3_bind_text(s, 5, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
      sqlite3_bind_double(s, 6, v.record.value);  // NaN is stored as NULL and read back as NaN
      if (sqlite3_step(s) != SQLITE_DONE) return fail("writing metrics");
    }
    if (sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("COMMIT");
    m_validation.clear();
    m_scalars.clear();
  }
  for (auto& b : m_blocks) {
    b.bytes.clear();
    if (m_spare.size() < 2 * m_blocks.size()) m_spare.push_back(std::move(b.bytes));
  }
  m_blocks.clear();
}

// Note [Step blocks]
bool RunStore::writeBlocks() {
  std::string file;
  auto fail = [&](const std::string& why, int err) {
    m_error = metricsWriteError(file, why, err);
    return false;
  };
  std::vector<std::int64_t> runIds;
  for (const auto& b : m_blocks)
    if (std::find(runIds.begin(), runIds.end(), b.runId) == runIds.end()) runIds.push_back(b.runId);
  for (const std::int64_t runId : runIds) {
    file = stepFilePath(runId);
    // A file unpacked and removed under this writer (by a store that took the run for an
    // interrupted one: another host's ptw on a shared runs directory) is started again, not
    // written where no one reads.
    struct stat st {};
    if (m_stepFile.runId == runId && m_stepFile.fd >= 0 && ::fstat(m_stepFile.fd, &st) == 0 && st.st_nlink == 0)
      closeStepFile();
    if (m_stepFile.runId != runId || m_stepFile.fd < 0) {
      closeStepFile();
      if (std::string why; !registerStepFile(runId, why)) {
        m_error = why;
        return false;
      }
      const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0 || ::fstat(fd, &st) != 0) {
        const int err = errno;
        if (fd >= 0) ::close(fd);
        return fail(std::strerror(err), err);
      }
      m_stepFile = {runId, fd, static_cast<long long>(st.st_size)};
    }
    std::vector<iovec> parts;
    long long total = 0;
    for (auto& b : m_blocks) {
      if (b.runId != runId) continue;
      finishBlock(b.bytes, b.count, b.rank, b.attempt, b.firstStep, b.lastStep);
      parts.push_back({b.bytes.data(), b.bytes.size()});
      total += static_cast<long long>(b.bytes.size());
    }
    if (m_maxStepFileBytes > 0 && m_stepFile.bytes + total > m_maxStepFileBytes)
      return fail(std::strerror(ENOSPC), ENOSPC);
    // One write a commit; a short one (a full disk) is continued, an error ends the run's recording.
    std::size_t next = 0;
    while (next < parts.size()) {
      const auto count = static_cast<int>(std::min<std::size_t>(parts.size() - next, IOV_MAX));
      const ssize_t n = ::writev(m_stepFile.fd, parts.data() + next, count);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(std::strerror(errno), errno);
      if (n == 0) return fail(std::strerror(ENOSPC), ENOSPC);
      m_stepFile.bytes += n;
      for (auto left = static_cast<std::size_t>(n); left > 0 && next < parts.size();) {
        const std::size_t used = std::min(left, parts[next].iov_len);
        parts[next].iov_base = static_cast<char*>(parts[next].iov_base) + used;
        parts[next].iov_len -= used;
        left -= used;
        if (parts[next].iov_len == 0) ++next;
      }
    }
  }
  return true;
}

// Records of the step file (or of an old database's step_blocks row) on their way into chunks.
struct RunStore::PendingBlock {
  int attempt = 0, rank = 0;
  long long end = 0;  ///< where the block ends in the step file
  std::vector<StepRecord> records;
};

// The records of `blocks` that end past `after`, as one chunk per attempt and rank, inserted
// in the transaction the caller holds. False when an insert fails.
bool RunStore::insertChunks(std::int64_t runId, const std::vector<PendingBlock>& blocks, long long after) {
  Statement insert(m_db, "INSERT INTO step_chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  std::vector<bool> done(blocks.size(), false);
  std::vector<StepRecord> records;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (done[i] || blocks[i].end <= after) continue;
    records.clear();
    for (std::size_t j = i; j < blocks.size(); ++j) {
      const PendingBlock& b = blocks[j];
      if (done[j] || b.end <= after || b.attempt != blocks[i].attempt || b.rank != blocks[i].rank) continue;
      records.insert(records.end(), b.records.begin(), b.records.end());
      done[j] = true;
    }
    if (records.empty()) continue;
    std::int64_t first = records.front().step, last = first;
    for (const auto& r : records) first = std::min(first, r.step), last = std::max(last, r.step);
    const std::string blob = packChunk(records);
    sqlite3_bind_int64(insert, 1, runId);
    sqlite3_bind_int(insert, 2, blocks[i].attempt);
    sqlite3_bind_int(insert, 3, blocks[i].rank);
    sqlite3_bind_int64(insert, 4, first);
    sqlite3_bind_int64(insert, 5, last);
    sqlite3_bind_int64(insert, 6, static_cast<std::int64_t>(records.size()));
    sqlite3_bind_int(insert, 7, kChunkCodec);
    sqlite3_bind_blob(insert, 8, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
    if (sqlite3_step(insert) != SQLITE_DONE) return false;
    sqlite3_reset(insert);
  }
  return true;
}

// Rows of an old database's step_blocks (Note [Step blocks]) into chunks, a row a
// transaction; their records are added to `done` as they are.
void RunStore::packBlockRows(std::int64_t runId, const std::vector<std::pair<std::int64_t, std::int64_t>>& rows,
                             std::int64_t& done, std::int64_t total, const PackProgress& progress) {
  auto fail = [&](bool inTransaction) {
    std::string why = sqlite3_errmsg(m_db);
    if (inTransaction) sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
    PTW_FAIL("run store ", m_path, ": cannot pack run ", runId, "'s step blocks into chunks (", why,
             "); they are kept and still read");
  };
  Statement read(m_db, "SELECT attempt, rank, count, records FROM step_blocks WHERE rowid = ?");
  Statement drop(m_db, "DELETE FROM step_blocks WHERE rowid = ?");
  for (const auto& [block, records] : rows) {
    if (sqlite3_exec(m_db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) fail(false);
    sqlite3_reset(read);
    sqlite3_bind_int64(read, 1, block);
    const int rc = sqlite3_step(read);
    if (rc == SQLITE_ROW) {
      std::vector<PendingBlock> one(1);
      one[0].attempt = sqlite3_column_int(read, 0);
      one[0].rank = sqlite3_column_int(read, 1);
      forEachPacked(static_cast<const unsigned char*>(sqlite3_column_blob(read, 3)),
                    static_cast<std::size_t>(sqlite3_column_bytes(read, 3)), sqlite3_column_int64(read, 2), one[0].rank,
                    kFirstBlockFields, [&](const StepRecord& r) { one[0].records.push_back(r); });
      sqlite3_reset(read);
      if (!insertChunks(runId, one, -1)) fail(true);
    } else if (rc != SQLITE_DONE) {  // SQLITE_DONE: already packed by another connection
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

// A transaction packs the records of a few blocks, at most kChunkRecords over the ranks,
// into one chunk per rank (fewer and larger chunks compress better), and moves the file's
// unpacked length past them: the write lock is held for a few tens of milliseconds at a
// time (another run writing to the same store is never kept waiting long), and a reader
// sees each block either in the file or in a chunk, never neither nor both.
void RunStore::packSteps(std::int64_t runId, const PackProgress& progress) {
  constexpr std::int64_t kChunkRecords = 2 * kBlockRecords;
  auto fail = [&](bool inTransaction) {
    std::string why = sqlite3_errmsg(m_db);
    if (inTransaction) sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
    PTW_FAIL("run store ", m_path, ": cannot pack run ", runId, "'s step blocks into chunks (", why,
             "); they are kept and still read");
  };
  if (m_stepFile.runId == runId) {  // this store's own run: what it buffered, and no more appending to this file
    commitBuffer();
    closeStepFile();
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> rows;  // an old database's step_blocks: rowid, records
  std::int64_t total = 0, done = 0;
  {
    Statement q(m_db, "SELECT rowid, count FROM step_blocks WHERE run_id = ? ORDER BY rowid");
    sqlite3_bind_int64(q, 1, runId);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
      rows.emplace_back(sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1));
      total += rows.back().second;
    }
    if (rc != SQLITE_DONE) fail(false);
  }
  // The step file's blocks past what is chunks already, from their headers: each block's
  // records are read once, below. Progress counts a block passed over as done.
  const std::string file = stepFilePath(runId);
  Fd fd{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  const long long from = unpackedBytes(m_db, runId);
  std::vector<FileBlock> fileBlocks;
  if (fd.fd >= 0 && from >= 0)
    forEachFileBlock(fd.fd, from, [&](const FileBlock& b) {
      fileBlocks.push_back(b);
      total += b.count;
      return true;
    });
  if (progress && total > 0) progress(0, total);
  packBlockRows(runId, rows, done, total, progress);

  Statement advance(m_db, "UPDATE step_files SET unpacked_bytes = ? WHERE run_id = ?");
  std::vector<PendingBlock> pending;
  std::int64_t pendingRecords = 0;
  std::vector<unsigned char> bytes;
  for (std::size_t i = 0; i < fileBlocks.size(); ++i) {
    const FileBlock& b = fileBlocks[i];
    // A block whose records are not what was written (the pages a crash left) is passed over, as readers do.
    PendingBlock& p = pending.emplace_back();
    p.attempt = b.attempt, p.rank = b.rank, p.end = b.end();
    if (readFileBlock(fd.fd, b, bytes))
      forEachPacked(bytes.data(), bytes.size(), b.count, b.rank, b.fields,
                    [&](const StepRecord& r) { p.records.push_back(r); });
    pendingRecords += b.count;
    done += b.count;
    if (pendingRecords < kChunkRecords && i + 1 < fileBlocks.size()) {
      if (progress) progress(done, total);
      continue;
    }
    if (sqlite3_exec(m_db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) fail(false);
    // Another connection may have packed these blocks meanwhile, or all of the file (its
    // row gone): then there is nothing left to do here.
    long long now = 0;
    try {
      now = unpackedBytes(m_db, runId);
    } catch (const Error&) {
      fail(true);
    }
    if (now < 0) {
      if (sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) fail(true);
      break;
    }
    if (now < p.end) {
      if (!insertChunks(runId, pending, now)) fail(true);
      sqlite3_reset(advance);
      sqlite3_bind_int64(advance, 1, p.end);
      sqlite3_bind_int64(advance, 2, runId);
      if (sqlite3_step(advance) != SQLITE_DONE) fail(true);
    }
    if (sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) fail(true);
    pending.clear();
    pendingRecords = 0;
    if (progress) progress(done, total);
  }
  // All of the file that can be read is chunks now. The file goes first: a crash between the
  // two leaves a row whose file is gone, which readers skip and the next unpacking drops.
  if (from >= 0) {
    if (::unlink(file.c_str()) != 0 && errno != ENOENT)
      PTW_FAIL("run store ", m_path, ": cannot remove ", file, " (", std::strerror(errno), ") after unpacking it");
    Statement forget(m_db, "DELETE FROM step_files WHERE run_id = ?");
    sqlite3_bind_int64(forget, 1, runId);
    if (sqlite3_step(forget) != SQLITE_DONE) fail(false);
  }
}

void RunStore::endRun(std::int64_t runId, const std::string& status, const std::string& message, double finalLoss,
                      double samplesPerS, int attempts, const PackProgress& progress) {
  commitBuffer();
  try {
    packSteps(runId, progress);
    packEndedRuns();  // an interrupted run's, or one whose unpacking failed before
  } catch (const Error&) {
    // Nothing is lost (the blocks are kept and read), so the run is not failed for it; the
    // next run to end, `ptw runs` or `ptw export` tries again.
  }
  if (!std::isfinite(finalLoss)) {
    // Not given (the window gives none): the mean over ranks of the last step's loss, from the
    // stored records. Throughput is the caller's (the supervisor's meter); none when it
    // counted no step.
    Statement q(m_db,
                "SELECT max(s) FROM (SELECT max(step) AS s FROM steps WHERE run_id = ?1 UNION ALL SELECT "
                "max(last_step) FROM step_chunks WHERE run_id = ?1 UNION ALL SELECT max(last_step) FROM step_blocks "
                "WHERE run_id = ?1)");
    sqlite3_bind_int64(q, 1, runId);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL) {
      const std::int64_t last = sqlite3_column_int64(q, 0);
      sqlite3_reset(q);
      try {
        const auto at = collect(runId, -1, last, last);
        double sum = 0;
        for (const auto& r : at) sum += r.loss;
        if (!at.empty()) finalLoss = sum / static_cast<double>(at.size());
      } catch (const Error&) {
        // Unreadable records leave the final loss empty; the run's status is not theirs to change.
      }
    }
  }
  Statement s(m_db,
              "UPDATE runs SET status = ?, ended_at = ?, message = ?, final_loss = ?, samples_per_s = ?, "
              "attempts = ? WHERE id = ?");
  const std::string now = utcNow();
  sqlite3_bind_text(s, 1, status.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, now.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, message.c_str(), -1, SQLITE_TRANSIENT);
  if (std::isfinite(finalLoss))
    sqlite3_bind_double(s, 4, finalLoss);
  else
    sqlite3_bind_null(s, 4);
  if (std::isfinite(samplesPerS))
    sqlite3_bind_double(s, 5, samplesPerS);
  else
    sqlite3_bind_null(s, 5);
  sqlite3_bind_int(s, 6, attempts);
  sqlite3_bind_int64(s, 7, runId);
  if (sqlite3_step(s) != SQLITE_DONE && m_error.empty())
    m_error = "run store " + m_path + ": cannot close the run (" + sqlite3_errmsg(m_db) + ")";
}

// The runs `where` selects (bound to `id` when it has a parameter), oldest first.
std::vector<RunRow> RunStore::selectRuns(const char* where, std::int64_t id) {
  const std::string sql = std::string(
                              "SELECT id, dir, name, strategy, world, status, started_at, ifnull(ended_at, ''), "
                              "ifnull(message, ''), ifnull(final_loss, 'nan'), ifnull(samples_per_s, 'nan'), "
                              "attempts, profile, ifnull(ptw_version, '') FROM runs ") +
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
    r.ptwVersion = text(s, 13);
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
  const Fd file{::open(stepFilePath(runId).c_str(), O_RDONLY | O_CLOEXEC)};
  const Snapshot snapshot(m_db);
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
    PTW_CHECK(rc == SQLITE_DONE, "run store ", m_path, ": cannot read run ", runId, "'s steps (", sqlite3_errmsg(m_db),
              ")");
  };
  {
    const std::string sql =
        "SELECT " + m_stepsColumns + " FROM steps WHERE run_id = ?1" + byRank + " AND step BETWEEN ?3 AND ?4";
    Statement s(m_db, sql.c_str());
    bindRange(s);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      Found f{sqlite3_column_int(s, 0), {}};
      f.r.rank = sqlite3_column_int(s, 1);
      int column = 2;
      StepRecord::forEachField([&](const char*, auto m) {
        if constexpr (std::is_same_v<StepFieldType<decltype(m)>, double>)
          f.r.*m = sqlite3_column_double(s, column++);
        else
          f.r.*m = sqlite3_column_int64(s, column++);
      });
      found.push_back(f);
    }
    done(rc);
  }
  {
    const std::string sql =
        std::string("SELECT attempt, rank, count, codec, records FROM step_chunks WHERE run_id = ?1") + byRank +
        " AND last_step >= ?3 AND first_step <= ?4";
    Statement s(m_db, sql.c_str());
    bindRange(s);
    std::vector<StepRecord> chunk;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      const int attempt = sqlite3_column_int(s, 0), codec = sqlite3_column_int(s, 3);
      PTW_CHECK(codec == kChunkCodec, "run store ", m_path, ": run ", runId, " has step chunks of codec ", codec,
                ", this build reads ", kChunkCodec, " (written by a newer ptw?)");
      chunk.clear();
      unpackChunk(static_cast<const unsigned char*>(sqlite3_column_blob(s, 4)),
                  static_cast<std::size_t>(sqlite3_column_bytes(s, 4)), sqlite3_column_int64(s, 2),
                  sqlite3_column_int(s, 1), chunk);
      for (const auto& r : chunk)
        if (r.step >= x0 && r.step <= x1) found.push_back({attempt, r});
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
                    kFirstBlockFields, [&](const StepRecord& r) {
                      if (r.step >= x0 && r.step <= x1) found.push_back({attempt, r});
                    });
    }
    done(rc);
  }
  if (const long long from = unpackedBytes(m_db, runId); file.fd >= 0 && from >= 0) {
    std::vector<unsigned char> bytes;
    forEachFileBlock(file.fd, from, [&](const FileBlock& b) {
      if ((rank >= 0 && b.rank != rank) || b.lastStep < x0 || b.firstStep > x1 || !readFileBlock(file.fd, b, bytes))
        return true;
      forEachPacked(bytes.data(), bytes.size(), b.count, b.rank, b.fields, [&](const StepRecord& r) {
        if (r.step >= x0 && r.step <= x1) found.push_back({b.attempt, r});
      });
      return true;
    });
  }
  // Where a restart replayed steps, the later attempt's record wins.
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.r.rank, a.r.step, a.attempt) < std::tie(b.r.rank, b.r.step, b.attempt);
  });
  std::vector<StepRecord> out;
  out.reserve(found.size());
  for (const auto& f : found) {
    if (!out.empty() && out.back().rank == f.r.rank && out.back().step == f.r.step)
      out.back() = f.r;
    else
      out.push_back(f.r);
  }
  return out;
}

std::vector<StepRecord> RunStore::steps(std::int64_t runId) {
  return collect(runId, -1, 0, std::numeric_limits<std::int64_t>::max());
}

std::map<int, std::pair<std::int64_t, std::int64_t>> RunStore::stepExtents(std::int64_t runId) {
  std::map<int, std::pair<std::int64_t, std::int64_t>> out;
  auto widen = [&out](int rank, std::int64_t first, std::int64_t last) {
    const auto [at, fresh] = out.try_emplace(rank, first, last);
    if (fresh) return;
    at->second.first = std::min(at->second.first, first);
    at->second.second = std::max(at->second.second, last);
  };
  const Fd file{::open(stepFilePath(runId).c_str(), O_RDONLY | O_CLOEXEC)};
  const Snapshot snapshot(m_db);
  Statement s(m_db,
              "SELECT rank, min(step), max(step) FROM steps WHERE run_id = ?1 GROUP BY rank UNION ALL "
              "SELECT rank, min(first_step), max(last_step) FROM step_chunks WHERE run_id = ?1 GROUP BY rank UNION ALL "
              "SELECT rank, min(first_step), max(last_step) FROM step_blocks WHERE run_id = ?1 GROUP BY rank");
  sqlite3_bind_int64(s, 1, runId);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW)
    widen(sqlite3_column_int(s, 0), sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2));
  PTW_CHECK(rc == SQLITE_DONE, "run store ", m_path, ": cannot read run ", runId, "'s steps (", sqlite3_errmsg(m_db),
            ")");
  if (const long long from = unpackedBytes(m_db, runId); file.fd >= 0 && from >= 0) {
    forEachFileBlock(file.fd, from, [&](const FileBlock& b) {
      widen(b.rank, b.firstStep, b.lastStep);
      return true;
    });
  }
  return out;
}

void RunStore::forEachStep(std::int64_t runId, const std::function<void(const StepRecord&)>& f) {
  // A window at a time, so that memory does not grow with the run: each read decodes only
  // the chunks and blocks that overlap the window (a chunk on its edge twice).
  for (const auto& [rank, extent] : stepExtents(runId)) {
    for (std::int64_t x0 = extent.first; x0 <= extent.second;) {
      const std::int64_t x1 = x0 > extent.second - (kStepWindow - 1) ? extent.second : x0 + (kStepWindow - 1);
      for (const auto& r : collect(runId, rank, x0, x1)) f(r);
      if (x1 == extent.second) break;
      x0 = x1 + 1;
    }
  }
}

std::vector<ValidationRow> RunStore::validation(std::int64_t runId) {
  // The latest attempt's record of each step (an attempt after a restart validates again).
  Statement s(m_db,
              "SELECT step, val_loss, val_accuracy FROM validation v WHERE run_id = ?1 AND attempt = (SELECT "
              "max(attempt) FROM validation w WHERE w.run_id = ?1 AND w.step = v.step) ORDER BY step, rowid");
  sqlite3_bind_int64(s, 1, runId);
  std::vector<ValidationRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    ValidationRow v;
    v.step = sqlite3_column_int64(s, 0);
    v.valLoss = sqlite3_column_type(s, 1) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, 1);
    v.valAccuracy = sqlite3_column_type(s, 2) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, 2);
    if (!out.empty() && out.back().step == v.step)
      out.back() = v;  // the same attempt validated this step twice: the later one
    else
      out.push_back(v);
  }
  PTW_CHECK(rc == SQLITE_DONE, "run store ", m_path, ": cannot read run ", runId, "'s validation (",
            sqlite3_errmsg(m_db), ")");
  return out;
}

std::int64_t RunStore::stepCount(std::int64_t runId) {
  const Fd file{::open(stepFilePath(runId).c_str(), O_RDONLY | O_CLOEXEC)};
  const Snapshot snapshot(m_db);
  Statement s(m_db,
              "SELECT (SELECT count(*) FROM steps WHERE run_id = ?1) + (SELECT ifnull(sum(count), 0) FROM step_blocks "
              "WHERE run_id = ?1) + (SELECT ifnull(sum(count), 0) FROM step_chunks WHERE run_id = ?1)");
  sqlite3_bind_int64(s, 1, runId);
  std::int64_t n = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
  if (const long long from = unpackedBytes(m_db, runId); file.fd >= 0 && from >= 0) {
    std::vector<unsigned char> bytes;
    forEachFileBlock(file.fd, from, [&](const FileBlock& b) {
      if (readFileBlock(file.fd, b, bytes)) n += b.count;  // what the other readers read
      return true;
    });
  }
  return n;
}

std::vector<std::string> RunStore::scalarNames(std::int64_t runId) {
  std::vector<std::string> names;
  Statement q(m_db, "SELECT DISTINCT name FROM scalars WHERE run_id = ? ORDER BY name");
  sqlite3_bind_int64(q, 1, runId);
  while (sqlite3_step(q) == SQLITE_ROW) names.push_back(text(q, 0));
  return names;
}

std::vector<ScalarPoint> RunStore::scalars(std::int64_t runId, const std::string& name, int rank, double x0,
                                           double x1) {
  Statement q(m_db,
              "SELECT rank, step, name, value, attempt FROM scalars WHERE run_id = ?1 AND (?2 = '' OR name = ?2) AND "
              "(?3 < 0 OR rank = ?3) AND step BETWEEN ?4 AND ?5 ORDER BY name, rank, step, attempt");
  sqlite3_bind_int64(q, 1, runId);
  sqlite3_bind_text(q, 2, name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(q, 3, rank);
  sqlite3_bind_double(q, 4, x0);
  sqlite3_bind_double(q, 5, x1);
  std::vector<ScalarPoint> out;
  while (sqlite3_step(q) == SQLITE_ROW) {
    ScalarPoint p{sqlite3_column_int(q, 0), sqlite3_column_int64(q, 1), text(q, 2),
                  sqlite3_column_type(q, 3) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(q, 3)};
    // Where a restart repeated steps, the later attempt's value (sorted last) stands.
    if (!out.empty() && out.back().rank == p.rank && out.back().step == p.step && out.back().name == p.name)
      out.back() = std::move(p);
    else
      out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::pair<double, double>> RunStore::series(std::int64_t runId, int rank, const std::string& column,
                                                        double x0, double x1) {
  if (column.rfind("scalar:", 0) == 0) {
    std::vector<std::pair<double, double>> out;
    if (rank < 0 || std::isnan(x0) || std::isnan(x1)) return out;
    for (const auto& p : scalars(runId, column.substr(7), rank, std::floor(x0), std::ceil(x1)))
      out.emplace_back(static_cast<double>(p.step), p.value);
    return out;
  }
  double StepRecord::*field = column == "loss"            ? &StepRecord::loss
                              : column == "samples_per_s" ? &StepRecord::samplesPerS
                              : column == "step_ms"       ? &StepRecord::stepMs
                              : column == "lr"            ? &StepRecord::lr
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
    // Named scalars (a script's) are columns after the step fields, by (rank, step); a
    // step that has scalars and no step record has a row with its step fields empty.
    const std::vector<std::string> names = scalarNames(runId);
    std::map<std::pair<int, std::int64_t>, std::vector<double>> byStep;
    for (std::size_t i = 0; i < names.size(); ++i)
      for (const auto& p : scalars(runId, names[i], -1, 0, 9e18)) {
        auto& row = byStep[{p.rank, p.step}];
        row.resize(names.size(), std::nan(""));
        row[i] = p.value;
      }
    out << "rank";
    StepRecord::forEachField([&](const char* name, auto) { out << ',' << name; });
    for (const auto& n : names) out << ',' << n;
    out << '\n';
    out.precision(std::numeric_limits<double>::max_digits10);  // every value read back exactly
    auto scalarsUpTo = [&](int rank, std::int64_t step) {      // rows of scalars alone, before (rank, step)
      while (!byStep.empty() && byStep.begin()->first < std::make_pair(rank, step)) {
        out << byStep.begin()->first.first;
        bool first = true;
        StepRecord::forEachField([&](const char*, auto) {
          out << ',';
          if (first) out << byStep.begin()->first.second;
          first = false;
        });
        for (double v : byStep.begin()->second) out << ',' << v;
        out << '\n';
        byStep.erase(byStep.begin());
      }
    };
    forEachStep(runId, [&](const StepRecord& r) {  // by rank, then step
      scalarsUpTo(r.rank, r.step);
      out << r.rank;
      StepRecord::forEachField([&](const char*, auto m) { out << ',' << r.*m; });
      const auto it = byStep.find({r.rank, r.step});
      for (std::size_t i = 0; i < names.size(); ++i) {
        out << ',';
        if (it != byStep.end()) out << it->second[i];
      }
      if (it != byStep.end()) byStep.erase(it);
      out << '\n';
    });
    scalarsUpTo(INT_MAX, 0);
    out.flush();
    PTW_CHECK(out.good(), path, ": write failed (", std::strerror(errno), ")");
  }
  PTW_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": cannot replace (", std::strerror(errno), ")");
}

namespace {

// The records a run of `p` stores, over its reporting ranks, or -1 when its length is not
// known. A run of epochs is taken at the steps of single-rank training, an upper bound.
double projectedRecords(const Profile& p) {
  double steps = static_cast<double>(p.hyper.maxSteps);
  if (steps <= 0) {
    if (p.hyper.epochs <= 0 || p.hyper.batchSize <= 0) return -1;
    const double train = std::ceil(static_cast<double>(p.data.samples) * (1.0 - p.data.valFraction));
    steps = static_cast<double>(p.hyper.epochs) * std::ceil(train / static_cast<double>(p.hyper.batchSize));
  }
  const RunOptions& r = p.run;
  double kept = steps;
  if (r.keepEvery > 1 && steps > static_cast<double>(r.keepAllUntil)) {
    const double until = static_cast<double>(r.keepAllUntil), every = static_cast<double>(r.keepEvery);
    kept = until + std::floor(steps / every) - std::floor(until / every);
  }
  return kept * reportingRanks(p);
}

std::string gigabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}

}  // namespace

std::string storeSpaceWarning(const Profile& p, const std::string& runsDir, long long freeBytes) {
  const double records = projectedRecords(p);
  if (records <= 0) return "";
  if (freeBytes < 0) {
    std::filesystem::path dir = runsDir.empty() ? "." : runsDir;
    std::error_code ec;
    while (!std::filesystem::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir)
      dir = dir.parent_path();
    struct statvfs vfs {};
    if (::statvfs(dir.c_str(), &vfs) != 0) return "";
    freeBytes = static_cast<long long>(vfs.f_bavail) * static_cast<long long>(vfs.f_frsize);
  }
  const double stored = records * kStoredRecordBytes, peak = records * static_cast<double>(kBlockRecordBytes) + stored;
  if (peak <= static_cast<double>(freeBytes)) return "";
  char count[32];
  std::snprintf(count, sizeof count, "%.0f", records);
  return std::string("run store: this run's ") + count + " step records would take " + gigabytes(peak) +
         " of disk just before it ends (" + gigabytes(stored) + " once stored), and " + runsDir + " has " +
         gigabytes(static_cast<double>(freeBytes)) +
         " free; free space, choose another --runs-dir, or keep fewer records (run.keep_every, "
         "run.keep_all_until)";
}

}  // namespace ptw::core
