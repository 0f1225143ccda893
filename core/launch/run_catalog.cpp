// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/run_catalog.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <ctime>

#include "common/error.h"
#include "common/strategies.h"
#include "common/version.h"
#include "launch/store_database.h"

namespace ptw::core {
namespace {

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

void bindOrNull(sqlite3_stmt* s, int at, double v) {
  if (std::isfinite(v))
    sqlite3_bind_double(s, at, v);
  else
    sqlite3_bind_null(s, at);
}

}  // namespace

namespace {

// Note [Control channel]: a supervisor reads its FIFO while its run goes, and a writer's
// non-blocking open fails (ENXIO) when nobody does. This sees a supervisor whose pid this
// process cannot, one in a PID namespace of its own (a SLURM job's can be); a FIFO of another
// user's run cannot be opened (EACCES), and that run is not known to be gone either.
bool controlChannelAnswers(const std::string& runDir) {
  const int fd = ::open((runDir + "/supervisor/control").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  return errno == EACCES;
}

}  // namespace

bool supervisorGone(const RunRow& run) {
  return run.host == hostName() && ::kill(static_cast<pid_t>(run.pid), 0) != 0 && errno == ESRCH &&
         !controlChannelAnswers(run.dir);
}

RunCatalog::RunCatalog(StoreDatabase& db) : m_db(db) {}

void RunCatalog::markInterrupted() {
  StoreDatabase::Statement stale(m_db, "SELECT id, pid, host, dir FROM runs WHERE status = 'running'");
  std::vector<std::int64_t> gone;
  const std::string host = hostName();
  while (sqlite3_step(stale) == SQLITE_ROW) {
    auto pid = static_cast<pid_t>(sqlite3_column_int64(stale, 1));
    // A run of another host is not known to be gone (supervisorGone): with the runs directory
    // on shared storage, its supervisor goes on there (a submitted job's, Note [Submitted runs]).
    const bool alive = StoreDatabase::text(stale, 2) != host || ::kill(pid, 0) == 0 || errno == EPERM ||
                       controlChannelAnswers(StoreDatabase::text(stale, 3));
    if (!alive) gone.push_back(sqlite3_column_int64(stale, 0));
  }
  for (auto id : gone)
    m_db.exec(("UPDATE runs SET status = 'interrupted', message = 'the supervisor ended without closing the run "
               "(killed, crashed, or the machine stopped); metrics up to the last second before are kept' "
               "WHERE id = " +
               std::to_string(id))
                  .c_str());
}

std::int64_t RunCatalog::begin(const std::string& dir, const Profile& p) {
  StoreDatabase::Statement s(
      m_db,
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
  PTW_CHECK(sqlite3_step(s) == SQLITE_DONE, "run store ", m_db.path(), ": cannot record the run (", m_db.error(), ")");
  return sqlite3_last_insert_rowid(m_db.handle());
}

bool RunCatalog::end(std::int64_t runId, const RunVerdict& v, std::string& error) {
  StoreDatabase::Statement s(m_db,
                             "UPDATE runs SET status = ?, ended_at = ?, message = ?, final_loss = ?, "
                             "samples_per_s = ?, attempts = ? WHERE id = ?");
  const std::string now = utcNow();
  sqlite3_bind_text(s, 1, v.status.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, now.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, v.message.c_str(), -1, SQLITE_TRANSIENT);
  bindOrNull(s, 4, v.finalLoss);
  bindOrNull(s, 5, v.samplesPerS);
  sqlite3_bind_int(s, 6, v.attempts);
  sqlite3_bind_int64(s, 7, runId);
  if (sqlite3_step(s) == SQLITE_DONE) return true;
  error = "run store " + m_db.path() + ": cannot close the run (" + m_db.error() + ")";
  return false;
}

// The runs `where` selects (bound to `id` when it has a parameter), oldest first.
std::vector<RunRow> RunCatalog::select(const char* where, std::int64_t id) {
  const std::string sql = std::string(
                              "SELECT id, dir, name, strategy, world, status, started_at, ifnull(ended_at, ''), "
                              "ifnull(message, ''), ifnull(final_loss, 'nan'), ifnull(samples_per_s, 'nan'), "
                              "attempts, profile, ifnull(ptw_version, ''), pid, host FROM runs ") +
                          where + " ORDER BY id";
  StoreDatabase::Statement s(m_db, sql.c_str());
  if (sqlite3_bind_parameter_count(s) > 0) sqlite3_bind_int64(s, 1, id);
  std::vector<RunRow> out;
  const auto text = [&s](int col) { return StoreDatabase::text(s, col); };
  while (sqlite3_step(s) == SQLITE_ROW) {
    RunRow r;
    r.id = sqlite3_column_int64(s, 0);
    r.dir = text(1);
    r.name = text(2);
    r.strategy = text(3);
    r.world = sqlite3_column_int(s, 4);
    r.status = text(5);
    r.startedAt = text(6);
    r.endedAt = text(7);
    r.message = text(8);
    r.finalLoss = sqlite3_column_type(s, 9) == SQLITE_TEXT ? std::nan("") : sqlite3_column_double(s, 9);
    r.samplesPerS = sqlite3_column_type(s, 10) == SQLITE_TEXT ? std::nan("") : sqlite3_column_double(s, 10);
    r.attempts = sqlite3_column_int(s, 11);
    r.profileJson = text(12);
    r.ptwVersion = text(13);
    r.pid = sqlite3_column_int64(s, 14);
    r.host = text(15);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<RunRow> RunCatalog::runs() { return select("", 0); }

RunRow RunCatalog::run(std::int64_t id) {
  auto found = select("WHERE id = ?", id);
  PTW_CHECK(!found.empty(), "run store ", m_db.path(), ": no run with id ", id, " (list them with `ptw runs`)");
  return std::move(found.front());
}

RunRow RunCatalog::named(const std::string& spec) {
  if (spec == "latest") {
    auto newest = select("WHERE id = (SELECT max(id) FROM runs)", 0);
    PTW_CHECK(!newest.empty(), "run store ", m_db.path(), " holds no runs yet; nothing to name with `latest`");
    return std::move(newest.front());
  }
  if (spec.find('/') != std::string::npos) {  // a run folder, as `ptw submit` prints it
    std::string dir = spec;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    for (auto& r : runs())
      if (r.dir == dir) return r;
    PTW_CHECK(false, "RUN: no run of ", m_db.path(), " has the folder ", dir,
              " (a submitted run has one once its job starts; `squeue` shows whether it has)");
  }
  std::size_t used = 0;
  long long id = -1;
  try {
    id = std::stoll(spec, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  PTW_CHECK(used == spec.size() && used > 0 && id > 0,
            "RUN: expected a run id (see `ptw runs`), `latest` or a run folder, got '", spec, "'");
  return run(id);
}

}  // namespace ptw::core
