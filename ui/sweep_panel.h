// SPDX-License-Identifier: GPL-3.0-or-later
// SweepPanel: the scaling sweep in the window. Pick strategies, worker counts and steps;
// the current profile runs under each (core::Sweep, off the GUI thread), and throughput
// and scaling efficiency are drawn against workers, one line per strategy, the fastest
// configuration highlighted and one click away from being the current profile. A command
// profile's sweep offers its process counts alone (Note [Sweeping a command]).
#pragma once

#include <QWidget>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/profile.h"
#include "launch/sweep.h"

class QCheckBox;
class QCustomPlot;
class QFormLayout;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace ptw::ui {

class SweepPanel : public QWidget {
  Q_OBJECT
 public:
  explicit SweepPanel(QWidget* parent = nullptr);
  ~SweepPanel() override;

  /// Where the base profile comes from (the editor) and where runs go.
  void setProfileSource(std::function<core::Profile()> source) { m_source = std::move(source); }
  void setRunsDirectory(const QString& dir) { m_runsDir = dir; }
  bool isRunning() const { return m_running; }
  /// Why a sweep cannot start now (a run in the window), or empty; asked by start().
  void setBusyReason(std::function<QString()> reason) { m_busyReason = std::move(reason); }
  const std::vector<core::SweepPoint>& points() const { return m_points; }
  QTableWidget* table() const { return m_table; }
  QCustomPlot* throughputPlot() const { return m_throughput; }
  /// Offers what a sweep of `profile` varies: strategies and worker counts, or for a command
  /// profile its numbers of processes alone. start() does the same with the profile it sweeps.
  void showProfile(const core::Profile& profile);

 public slots:
  /// Starts the sweep; returns false (with the reason shown) when the inputs are invalid.
  bool start();
  void stop();
  /// Emits openProfile with the fastest configuration's profile.
  void openFastest();

 signals:
  void openProfile(const core::Profile& profile);
  void started();
  void finished();

 private:
  void addPoint(const core::SweepPoint& p, int done, int total);
  void redraw();
  /// Whether the finished points have steps/s alone: a program that reports no samples.
  bool stepsOnly() const;

  std::function<core::Profile()> m_source;
  std::function<QString()> m_busyReason;
  QString m_runsDir;
  std::vector<QCheckBox*> m_strategies;
  QFormLayout* m_form;
  QWidget* m_strategyRow;  ///< the strategies' boxes, hidden for a command profile
  bool m_command = false;  ///< the profile shown runs a command
  QLineEdit* m_workers;
  QSpinBox* m_steps;
  QPushButton* m_run;
  QPushButton* m_stop;
  QPushButton* m_open;
  QLabel* m_status;
  QCustomPlot* m_throughput;
  QCustomPlot* m_efficiency;
  QTableWidget* m_table;
  std::vector<core::SweepPoint> m_points;
  core::Profile m_base;
  std::unique_ptr<core::Sweep> m_sweep;
  std::thread m_thread;
  bool m_running = false;
};

}  // namespace ptw::ui
