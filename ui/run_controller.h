// RunController: runs the launcher off the GUI thread and hands its records to the
// window in batches. The launcher's thread fills a mutex-guarded buffer; the window
// drains it from a timer, so the GUI never sees one signal per record.
#pragma once

#include <QObject>
#include <QString>

#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/profile.h"
#include "common/record.h"
#include "launch/launcher.h"

namespace ptw::ui {

class RunController : public QObject {
  Q_OBJECT
 public:
  explicit RunController(QObject* parent = nullptr);
  ~RunController() override;

  /// Creates the run folder and starts the ranks. Returns false with `error` set when
  /// nothing could be started; the run is then not running.
  bool start(const core::Profile& profile, const QString& runsDir, QString* error);
  void stop();
  bool isRunning() const { return m_running; }
  QString runDirectory() const { return m_runDir; }

  /// Records received since the last call, in arrival order.
  std::vector<core::Record> takeRecords();
  /// Log lines received since the last call, as (rank, line).
  std::vector<std::pair<int, std::string>> takeLogs();

 signals:
  void started(int port);
  void rankExited(int rank, const QString& how, bool failed);
  /// The run ended; `status` is finished, failed or stopped.
  void finished(const QString& status, const QString& message, int failedRank, const QStringList& lastLines);

 private:
  class Observer;
  std::unique_ptr<core::Launcher> m_launcher;
  std::unique_ptr<Observer> m_observer;
  std::thread m_thread;
  std::mutex m_mutex;
  std::vector<core::Record> m_records;
  std::vector<std::pair<int, std::string>> m_logs;
  bool m_running = false;
  QString m_runDir;
};

}  // namespace ptw::ui
