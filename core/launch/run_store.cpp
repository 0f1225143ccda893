#include "launch/run_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

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
CREATE TABLE IF NOT EXISTS validation (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  val_loss REAL,
  val_accuracy REAL
);
)sql";

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
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    // Fault-injection hook for the disk-full tests: cap the database size (pages of 4 KiB).
    if (const char* cap = std::getenv("PTW_STORE_MAX_PAGES"))
      exec(("PRAGMA max_page_count=" + std::to_string(std::atoll(cap))).c_str());
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
  } catch (...) {
    sqlite3_finalize(m_insertStep);
    sqlite3_finalize(m_insertValidation);
    sqlite3_close(m_db);
    throw;
  }
}

RunStore::~RunStore() {
  try {
    flush();
  } catch (...) {
  }
  sqlite3_finalize(m_insertStep);
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

std::int64_t RunStore::beginRun(const std::string& dir, const Profile& p) {
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
  for (const auto& r : batch)
    if (r.kind == Record::Kind::Step || r.kind == Record::Kind::Validation) m_buffer.push_back({runId, attempt, r});
  if (std::chrono::steady_clock::now() - m_lastCommit > std::chrono::milliseconds(250)) commitBuffer();
}

void RunStore::flush() { commitBuffer(); }

void RunStore::commitBuffer() {
  m_lastCommit = std::chrono::steady_clock::now();
  if (m_buffer.empty() || !m_error.empty()) return;
  auto fail = [&](const char* what) {
    const int code = sqlite3_errcode(m_db);
    m_error = std::string("run store ") + m_path + ": " + what + " failed (" + sqlite3_errmsg(m_db) + ")" +
              (code == SQLITE_FULL ? "; the disk (or the store's size limit) is full: free space and resume the run "
                                     "from its last checkpoint (run.resume_from)"
                                   : "");
    sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
  };
  if (sqlite3_exec(m_db, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("BEGIN");
  for (const auto& p : m_buffer) {
    sqlite3_stmt* s = p.record.kind == Record::Kind::Step ? m_insertStep : m_insertValidation;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, p.runId);
    sqlite3_bind_int(s, 2, p.attempt);
    const auto& r = p.record.step;
    if (p.record.kind == Record::Kind::Step) {
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
    } else {
      sqlite3_bind_int64(s, 3, r.step);
      sqlite3_bind_double(s, 4, p.record.valLoss);
      if (p.record.valAccuracy >= 0) sqlite3_bind_double(s, 5, p.record.valAccuracy);
      else sqlite3_bind_null(s, 5);
    }
    if (sqlite3_step(s) != SQLITE_DONE) return fail("writing metrics");
  }
  if (sqlite3_exec(m_db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("COMMIT");
  m_buffer.clear();
}

void RunStore::endRun(std::int64_t runId, const std::string& status, const std::string& message, double finalLoss,
                      double samplesPerS, int attempts) {
  commitBuffer();
  if (!std::isfinite(finalLoss) || !std::isfinite(samplesPerS)) {
    // Not given (the window's runs): from the stored records, last step's mean loss and the
    // sum over ranks of their mean throughput.
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

std::vector<RunRow> RunStore::runs() {
  Statement s(m_db,
              "SELECT id, dir, name, strategy, world, status, started_at, ifnull(ended_at, ''), ifnull(message, ''), "
              "ifnull(final_loss, 'nan'), ifnull(samples_per_s, 'nan'), attempts, profile FROM runs ORDER BY id");
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

RunRow RunStore::run(std::int64_t id) {
  for (auto& r : runs())
    if (r.id == id) return r;
  PTW_FAIL("run store ", m_path, ": no run with id ", id, " (list them with `ptw runs`)");
}

std::vector<StepRecord> RunStore::steps(std::int64_t runId) {
  // Where a restart replayed steps, the later attempt's record wins.
  Statement s(m_db,
              "SELECT rank, step, epoch, loss, samples_per_s, step_ms, data_ms, compute_ms, comm_ms, opt_ms, lr, "
              "mem_bytes FROM steps AS a WHERE run_id = ?1 AND attempt = (SELECT max(attempt) FROM steps AS b "
              "WHERE b.run_id = ?1 AND b.rank = a.rank AND b.step = a.step) ORDER BY rank, step");
  sqlite3_bind_int64(s, 1, runId);
  std::vector<StepRecord> out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    StepRecord r;
    r.rank = sqlite3_column_int(s, 0);
    r.step = sqlite3_column_int64(s, 1);
    r.epoch = sqlite3_column_int64(s, 2);
    r.loss = sqlite3_column_double(s, 3);
    r.samplesPerS = sqlite3_column_double(s, 4);
    r.stepMs = sqlite3_column_double(s, 5);
    r.dataMs = sqlite3_column_double(s, 6);
    r.computeMs = sqlite3_column_double(s, 7);
    r.commMs = sqlite3_column_double(s, 8);
    r.optMs = sqlite3_column_double(s, 9);
    r.lr = sqlite3_column_double(s, 10);
    r.memBytes = sqlite3_column_int64(s, 11);
    out.push_back(r);
  }
  return out;
}

std::int64_t RunStore::stepCount(std::int64_t runId) {
  Statement s(m_db, "SELECT count(*) FROM steps WHERE run_id = ?");
  sqlite3_bind_int64(s, 1, runId);
  return sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
}

std::vector<std::pair<double, double>> RunStore::series(std::int64_t runId, int rank, const std::string& column,
                                                       double x0, double x1) {
  PTW_CHECK(column == "loss" || column == "samples_per_s" || column == "step_ms", "run store: no series \"", column,
            "\"");
  const std::string sql = "SELECT step, " + column +
                          " FROM steps WHERE run_id = ?1 AND rank = ?2 AND step BETWEEN ?3 AND ?4 "
                          "ORDER BY step, attempt";
  Statement s(m_db, sql.c_str());
  sqlite3_bind_int64(s, 1, runId);
  sqlite3_bind_int(s, 2, rank);
  sqlite3_bind_double(s, 3, std::floor(x0));
  sqlite3_bind_double(s, 4, std::ceil(x1));
  std::vector<std::pair<double, double>> out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    const double step = sqlite3_column_double(s, 0), v = sqlite3_column_double(s, 1);
    if (!out.empty() && out.back().first == step) out.back().second = v;  // a later attempt replayed it
    else out.emplace_back(step, v);
  }
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
