// MainWindow: configure a profile, start and stop a run, watch per-rank loss live.
#pragma once

#include <QMainWindow>
#include <QString>

#include "common/profile.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTimer;

namespace ptw::ui {

class LossChart;
class RunController;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);

  /// The profile the fields describe now.
  core::Profile profile() const { return m_profile; }
  void setProfile(const core::Profile& profile);

  /// Loads a profile file into the fields; on failure nothing changes and `error` says why.
  bool openProfile(const QString& path, QString* error = nullptr);
  bool saveProfile(const QString& path, QString* error = nullptr);
  void setRunsDirectory(const QString& dir) { m_runsDir = dir; }

  /// Why Start is disabled, or empty when the profile can run.
  QString blockingReason() const { return m_blockingReason; }
  RunController* controller() const { return m_controller; }
  LossChart* lossChart() const { return m_chart; }
  QString lastStatus() const { return m_lastStatus; }

 public slots:
  void startRun();
  void stopRun();

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildUi();
  void buildMenus();
  void fieldsToProfile();
  void profileToFields();
  void revalidate();
  void drainRun();
  void onFinished(const QString& status, const QString& message, int failedRank, const QStringList& lastLines);

  core::Profile m_profile;
  QString m_path;
  QString m_runsDir;
  QString m_blockingReason;
  QString m_lastStatus;
  bool m_updatingFields = false;

  QComboBox* m_strategy = nullptr;
  QSpinBox* m_ranks = nullptr;
  QComboBox* m_optimizer = nullptr;
  QDoubleSpinBox* m_lr = nullptr;
  QDoubleSpinBox* m_momentum = nullptr;
  QSpinBox* m_batch = nullptr;
  QSpinBox* m_steps = nullptr;
  QPushButton* m_start = nullptr;
  QPushButton* m_stop = nullptr;
  QLabel* m_status = nullptr;
  QPlainTextEdit* m_log = nullptr;
  LossChart* m_chart = nullptr;
  RunController* m_controller = nullptr;
  QTimer* m_drainTimer = nullptr;
};

}  // namespace ptw::ui
