// SPDX-License-Identifier: GPL-3.0-or-later
// RunHistory: the runs in the run store (status, start time, strategy, world size, final
// loss, throughput). Selecting several overlays their loss curves and shows their
// profiles side by side with the differing fields highlighted.
#pragma once

#include <QString>
#include <QWidget>

#include <map>
#include <memory>
#include <vector>

#include "launch/run_store.h"

class QLabel;
class QTimer;
class QStackedWidget;
class QTableWidget;

namespace ptw::core {
class RunProgress;
}  // namespace ptw::core

namespace ptw::ui {

class MetricChart;

class RunHistory : public QWidget {
  Q_OBJECT
 public:
  explicit RunHistory(QWidget* parent = nullptr);
  ~RunHistory() override;
  void setRunsDirectory(const QString& dir);
  /// Re-reads the runs (after a run ends).
  void reload();
  /// Selects the runs with these ids (as a user's multi-selection would).
  void selectRuns(const std::vector<qint64>& ids);
  std::vector<qint64> selectedRuns() const;
  /// Field paths whose values differ between the selected runs.
  QStringList differingFields() const { return m_differing; }
  QTableWidget* table() const { return m_table; }
  QTableWidget* diff() const { return m_diff; }
  MetricChart* overlay() const { return m_overlay; }
  /// Real points of one overlaid run (for zooming into old parts of the live chart too).
  std::vector<core::StepRecord> steps(qint64 runId);

 signals:
  void openProfileRequested(const QString& profileJson);
  /// A running run was double-clicked: the window follows it (MainWindow::attachRun).
  void attachRequested(const core::RunRow& run);

 private:
  void showSelection();
  /// The running runs' status cells: their live step and rate (core::RunProgress).
  void showLive();
  QString m_dir;
  std::map<qint64, std::unique_ptr<core::RunProgress>> m_live;
  QTimer* m_liveTimer = nullptr;
  std::unique_ptr<core::RunStore> m_store;
  std::vector<core::RunRow> m_runs;
  QTableWidget* m_table;
  MetricChart* m_overlay;
  QStackedWidget* m_overlayStack = nullptr;  ///< the hint until a run is selected, then the overlay
  QLabel* m_overlayHint = nullptr;
  QTableWidget* m_diff;
  QStringList m_differing;
};

}  // namespace ptw::ui
