// SPDX-License-Identifier: GPL-3.0-or-later
// AttachDialog: File > Attach to Run... The running runs of a runs directory, here or HOST:DIR
// (core::listRuns, over ssh with the profile's hosts.ssh_* options), one of which the window
// then follows in its Live tab (RunController::attach).
#pragma once

#include <QDialog>

#include <vector>

#include "common/profile.h"
#include "launch/run_catalog.h"

class QLabel;
class QLineEdit;
class QTableWidget;

namespace ptw::ui {

class AttachDialog : public QDialog {
  Q_OBJECT
 public:
  AttachDialog(const QString& runsDir, core::HostsSpec hosts, QWidget* parent = nullptr);
  /// Lists the running runs of the folder typed; a problem (no runs, a host ssh cannot reach)
  /// is said in the dialog, in the line ptw says it in.
  void list();
  QString runsDir() const;
  /// The run chosen; id 0 when none is.
  core::RunRow chosen() const;
  QTableWidget* table() const { return m_table; }
  QString problem() const;

 private:
  core::HostsSpec m_hosts;
  QLineEdit* m_dir;
  QTableWidget* m_table;
  QLabel* m_problem;
  std::vector<core::RunRow> m_rows;
};

}  // namespace ptw::ui
