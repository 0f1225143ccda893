// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/run_controller.h"

#include <pthread.h>

#include <QMetaObject>
#include <QStringList>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "common/error.h"
#include "launch/control_channel.h"
#include "launch/follow_source.h"
#include "launch/run_program.h"
#include "launch/run_session.h"
#include "ui/step_folder.h"

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
  void onHosts(const std::vector<std::string>& rankHosts) override {
    QStringList hosts;
    for (const auto& h : rankHosts) hosts << QString::fromStdString(h);
    QMetaObject::invokeMethod(
        m_c, [c = m_c, hosts] { emit c->hosts(hosts); }, Qt::QueuedConnection);
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

// An attached run's source: its records and logs go where a run's own go (Observer), what
// it says of the connection to the window.
class RunController::Follower : public core::FollowSource::Listener {
 public:
  explicit Follower(RunController* c) : m_c(c) {}
  void onRecords(std::vector<core::Record>& batch) override {
    m_folder.fold(batch);  // Note [Attached history in groups]
    m_c->m_observer->onRecords(batch);
    // Note [Attached records drawn as they come]: one signal until the window takes them.
    bool tell = false;
    {
      std::lock_guard<std::mutex> lock(m_c->m_mutex);
      tell = !std::exchange(m_c->m_arrivalTold, true);
    }
    if (tell)
      QMetaObject::invokeMethod(
          m_c, [c = m_c] { emit c->recordsArrived(); }, Qt::QueuedConnection);
  }
  void onLog(int rank, const std::string& line) override { m_c->m_observer->onLog(rank, line); }
  void onHosts(const std::vector<std::string>& rankHosts) override { m_c->m_observer->onHosts(rankHosts); }
  void onState(core::FollowSource::State state, const std::string& message) override {
    using State = core::FollowSource::State;
    const QString text = QString::fromStdString(message);
    if (state == State::Ended) {
      m_status = text.section('\t', 0, 0);
      m_message = text.section('\t', 1);
      return;
    }
    const QString name = state == State::Attached ? QStringLiteral("attached") : QStringLiteral("detached");
    const qint64 id = m_c->m_source->runId();
    QMetaObject::invokeMethod(
        m_c,
        [c = m_c, name, text, id] {
          c->m_runId = id;
          emit c->connection(name, text);
        },
        Qt::QueuedConnection);
  }
  QString m_status, m_message;
  StepFolder m_folder;

 private:
  RunController* m_c;
};

RunController::RunController(QObject* parent)
    : QObject(parent), m_observer(std::make_unique<Observer>(this)), m_follower(std::make_unique<Follower>(this)) {}

RunController::~RunController() {
  if (m_session) m_session->requestStop();
  if (m_source) m_source->stop();  // the run goes on: only the following ends
  if (m_thread.joinable()) m_thread.join();
  if (m_stopThread.joinable()) m_stopThread.join();
}

void RunController::attach(const core::FollowSourceOptions& options) {
  if (m_running) return;
  if (m_thread.joinable()) m_thread.join();
  m_session.reset();
  try {
    m_source = std::make_unique<core::FollowSource>(options);
  } catch (const Error& e) {
    emit attachFailed(QString::fromStdString(e.what()));
    return;
  }
  m_sshHosts = options.hosts;
  m_runDir = QString::fromStdString(options.runsDir);
  m_runId = 0;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_pending = Batch{};
  }
  m_follower->m_status.clear();
  m_follower->m_folder.reset();
  m_running = true;
  m_thread = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "ptw-follow");
    QString failed, status, message;
    try {
      const int code = m_source->follow(*m_follower);
      status = code < 0 ? QStringLiteral("detached") : m_follower->m_status;
      message = code < 0 ? tr("no longer followed; the run goes on") : m_follower->m_message;
    } catch (const std::exception& e) {
      failed = QString::fromStdString(e.what());
    }
    QMetaObject::invokeMethod(
        this,
        [this, failed, status, message] {
          m_running = false;
          if (!failed.isEmpty())
            emit attachFailed(failed);
          else
            emit finished(status, message, -1, {});
        },
        Qt::QueuedConnection);
  });
}

void RunController::detach() {
  if (m_source) m_source->stop();
}

bool RunController::start(const core::Profile& profile, const QString& runsDir, QString* error) {
  if (m_running) {
    if (error) *error = tr("A run is already in progress.");
    return false;
  }
  if (m_thread.joinable()) m_thread.join();
  m_source.reset();
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
  if (!m_running) return;
  if (m_session) {
    m_session->requestStop();
    return;
  }
  if (!m_source || m_source->runId() <= 0) return;
  // As `ptw stop` asks (Note [Control channel]); over ssh that may take seconds, off this thread.
  const std::string id = std::to_string(m_source->runId()), host = m_source->host(), dir = m_source->dir();
  const core::HostsSpec hosts = m_sshHosts;
  if (m_stopThread.joinable()) m_stopThread.join();
  m_stopThread = std::thread([this, id, host, dir, hosts] {
    QString error;
    try {
      std::string output;
      if (host.empty())
        core::requestRunStop(dir, id);
      else if (core::runRemotePtw(hosts, host, {"stop", id, "--runs-dir", dir}, output) != 0)
        error = QString::fromStdString(core::lastLine(output));
    } catch (const std::exception& e) {
      error = QString::fromStdString(e.what());
    }
    if (!error.isEmpty())
      QMetaObject::invokeMethod(
          this, [this, error] { emit stopFailed(error); }, Qt::QueuedConnection);
  });
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
  m_arrivalTold = false;
}

}  // namespace ptw::ui
