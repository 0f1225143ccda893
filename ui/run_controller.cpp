#include "ui/run_controller.h"

#include <QMetaObject>
#include <QStringList>

#include "common/error.h"
#include "launch/run_directory.h"

namespace ptw::ui {

class RunController::Observer : public core::LaunchObserver {
 public:
  explicit Observer(RunController* c) : m_c(c) {}
  void onStarted(int port, const std::vector<int>&) override {
    QMetaObject::invokeMethod(m_c, [c = m_c, port] { emit c->started(port); }, Qt::QueuedConnection);
  }
  void onRecords(const std::vector<core::Record>& batch) override {
    std::lock_guard<std::mutex> lock(m_c->m_mutex);
    m_c->m_records.insert(m_c->m_records.end(), batch.begin(), batch.end());
  }
  void onLog(int rank, const std::string& line) override {
    std::lock_guard<std::mutex> lock(m_c->m_mutex);
    m_c->m_logs.emplace_back(rank, line);
  }
  void onRankExit(const core::RankExit& e) override {
    QString how = QString::fromStdString(e.describe());
    bool failed = e.failed();
    int rank = e.rank;
    QMetaObject::invokeMethod(m_c, [c = m_c, rank, how, failed] { emit c->rankExited(rank, how, failed); },
                              Qt::QueuedConnection);
  }

 private:
  RunController* m_c;
};

RunController::RunController(QObject* parent) : QObject(parent), m_observer(std::make_unique<Observer>(this)) {}

RunController::~RunController() {
  if (m_launcher) m_launcher->requestStop();
  if (m_thread.joinable()) m_thread.join();
}

bool RunController::start(const core::Profile& profile, const QString& runsDir, QString* error) {
  if (m_running) {
    if (error) *error = tr("A run is already in progress.");
    return false;
  }
  if (m_thread.joinable()) m_thread.join();
  std::string dir;
  try {
    dir = core::createRunDirectory(runsDir.isEmpty() ? core::defaultRunsDirectory() : runsDir.toStdString(), profile);
  } catch (const Error& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
  m_runDir = QString::fromStdString(dir);
  core::LaunchOptions lo(core::Launcher::defaultWorkerPath(), dir + "/profile.json", core::processCount(profile));
  lo.setOutDir(dir).setPort(profile.run.port).setStallTimeoutS(profile.run.timeoutS);
  m_launcher = std::make_unique<core::Launcher>(lo);
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_records.clear();
    m_logs.clear();
  }
  m_running = true;
  // The launcher thread lives until every worker is reaped (Note [Worker lifetime]).
  m_thread = std::thread([this] {
    QString status, message;
    int failedRank = -1;
    QStringList lastLines;
    try {
      core::RunReport r = m_launcher->run(*m_observer);
      status = core::statusName(r.status);
      message = QString::fromStdString(r.message);
      failedRank = r.failedRank;
      for (const auto& l : r.lastLines) lastLines << QString::fromStdString(l);
    } catch (const std::exception& e) {
      status = QStringLiteral("failed");
      message = QString::fromStdString(e.what());
    }
    QMetaObject::invokeMethod(
        this,
        [this, status, message, failedRank, lastLines] {
          m_running = false;
          emit finished(status, message, failedRank, lastLines);
        },
        Qt::QueuedConnection);
  });
  return true;
}

void RunController::stop() {
  if (m_launcher && m_running) m_launcher->requestStop();
}

std::vector<core::Record> RunController::takeRecords() {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<core::Record> out;
  out.swap(m_records);
  return out;
}

std::vector<std::pair<int, std::string>> RunController::takeLogs() {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::vector<std::pair<int, std::string>> out;
  out.swap(m_logs);
  return out;
}

}  // namespace ptw::ui
