// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/run_controller.h"

#include <pthread.h>

#include <QMetaObject>
#include <QStringList>

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "launch/run_session.h"

namespace ptw::ui {

class RunController::Observer : public core::LaunchObserver {
 public:
  explicit Observer(RunController* c) : m_c(c) {}
  void onStarted(int port, const std::vector<int>&) override {
    QMetaObject::invokeMethod(
        m_c, [c = m_c, port] { emit c->started(port); }, Qt::QueuedConnection);
  }
  void onRecords(std::vector<core::Record>& batch) override {
    std::vector<core::Record> spare;
    std::lock_guard<std::mutex> lock(m_c->m_mutex);
    if (!m_c->m_spare.empty()) {
      // The largest: a chunk that carried only a heartbeat would be grown again, from
      // fresh pages, by the next rank's batch.
      auto largest = std::max_element(m_c->m_spare.begin(), m_c->m_spare.end(),
                                      [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
      std::iter_swap(largest, m_c->m_spare.end() - 1);
      spare = std::move(m_c->m_spare.back());
      m_c->m_spare.pop_back();
    }
    m_c->m_pending.records += batch.size();
    m_c->m_pending.chunks.push_back(std::move(batch));
    batch = std::move(spare);
  }
  void onLog(int rank, const std::string& line) override {
    std::lock_guard<std::mutex> lock(m_c->m_mutex);
    m_c->m_pending.logs.emplace_back(rank, line);
  }
  void onRestart(int, std::int64_t step) override {
    Event restart;
    restart.restart = true;
    restart.step = step;
    add(std::move(restart));
  }
  void onRankExit(const core::RankExit& e) override {
    Event exit;
    exit.rank = e.rank;
    exit.how = QString::fromStdString(e.describe());
    // A rank ptw stopped did what it was told, whatever its code.
    exit.failed = e.failed() && !e.stoppedByPtw;
    exit.stopped = e.stoppedByPtw;
    add(std::move(exit));
  }

 private:
  using Event = RunController::Event;
  void add(Event e) {
    std::lock_guard<std::mutex> lock(m_c->m_mutex);
    e.index = m_c->m_pending.records;
    m_c->m_pending.events.push_back(std::move(e));
  }

  RunController* m_c;
};

RunController::RunController(QObject* parent) : QObject(parent), m_observer(std::make_unique<Observer>(this)) {}

RunController::~RunController() {
  if (m_session) m_session->requestStop();
  if (m_thread.joinable()) m_thread.join();
}

bool RunController::start(const core::Profile& profile, const QString& runsDir, QString* error) {
  if (m_running) {
    if (error) *error = tr("A run is already in progress.");
    return false;
  }
  if (m_thread.joinable()) m_thread.join();
  auto lastShown = std::chrono::steady_clock::time_point{};
  auto progress = [this, lastShown](std::int64_t done, std::int64_t total) mutable {
    const auto now = std::chrono::steady_clock::now();
    if (done != 0 && done != total && now - lastShown < std::chrono::milliseconds(100)) return;
    lastShown = now;
    QMetaObject::invokeMethod(
        this, [this, done, total] { emit storing(done, total); }, Qt::QueuedConnection);
  };
  auto session =
      std::make_unique<core::RunSession>(core::RunSessionOptions(profile)
                                             .setRunsDir(runsDir.toStdString())
                                             .setWorkerArgs(m_workerArgs)
                                             .setStoreOptions(core::RunStoreOptions().setSizeLimitKib(m_storeLimitKib))
                                             .setPackProgress(progress));
  try {
    session->begin();
  } catch (const Error& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
  m_session = std::move(session);
  m_runDir = QString::fromStdString(m_session->runDir());
  m_stacksFile.clear();
  m_runId = m_session->runId();
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_pending = Batch{};
  }
  m_running = true;
  // The supervisor's thread lives until every worker is reaped (Note [Worker lifetime]).
  m_thread = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "ptw-supervisor");  // as top -H and /proc name it
    const core::RunResult r = m_session->run(*m_observer);     // Note [One run lifecycle]
    const QString status = core::statusName(r.report.status);
    QString message = QString::fromStdString(r.report.message);
    // A run that diverged and went on (run.on_nan "warn") says so where it ends, too.
    if (r.report.divergedRank >= 0 && r.report.status != core::RunReport::Status::Failed)
      message += QStringLiteral("; ") + QString::fromStdString(core::divergedMessage(r.report));
    const int failedRank = r.report.failedRank;
    const QString stacks = QString::fromStdString(r.report.stacksFile);
    QStringList lastLines;
    for (const auto& l : r.report.lastLines) lastLines << QString::fromStdString(l);
    QMetaObject::invokeMethod(
        this,
        [this, status, message, failedRank, lastLines, stacks] {
          m_running = false;
          m_stacksFile = stacks;
          emit finished(status, message, failedRank, lastLines);
        },
        Qt::QueuedConnection);
  });
  return true;
}

void RunController::stop() {
  if (m_session && m_running) m_session->requestStop();
}

bool RunController::requestStacks() {
  if (!m_session || !m_running) return false;
  m_session->requestStacks();
  return true;
}

void RunController::take(Batch& batch) {
  for (auto& chunk : batch.chunks) chunk.clear();
  batch.records = 0;
  batch.events.clear();
  batch.logs.clear();
  std::lock_guard<std::mutex> lock(m_mutex);
  // The launcher hands over a chunk every pass over the pipes that read records (each
  // rank's batch, each heartbeat), and the window takes them about once a second, so how
  // many are out at once varies. Spares are kept up to a size, not a count: a chunk that
  // is not there when the launcher needs one is grown from nothing, every 4 KiB of it a
  // page fault.
  constexpr std::size_t kMaxSpareBytes = std::size_t(64) << 20;
  std::size_t spareBytes = 0;
  for (const auto& chunk : m_spare) spareBytes += chunk.capacity() * sizeof(core::Record);
  for (auto& chunk : batch.chunks) {
    spareBytes += chunk.capacity() * sizeof(core::Record);
    if (spareBytes > kMaxSpareBytes) break;
    m_spare.push_back(std::move(chunk));
  }
  batch.chunks.clear();
  std::swap(batch, m_pending);
}

}  // namespace ptw::ui
