// SPDX-License-Identifier: GPL-3.0-or-later
// StacksPane: where every rank of a run is, from its stacks file (docs/stacks.md): a row per
// rank, the one that is behind first and marked, each with its threads' frames; the outermost
// frames that every rank shares are folded into one row (Note [Shared frames] in
// launch/stacks_file.h), so that the frames where the ranks differ are what is shown. A
// filter box, copying (Ctrl+C the selected rows, Copy the whole file), and the file itself.
// Esc closes it.
#pragma once

#include <QDockWidget>
#include <QString>

#include "launch/stacks_file.h"

class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTreeWidget;
class QTreeWidgetItem;

namespace ptw::ui {

class StacksPane : public QDockWidget {
  Q_OBJECT
 public:
  /// What a row of the tree is, in its kRowRole data.
  enum class Row { Rank, Thread, Frame, Shared, Note };
  static constexpr int kRowRole = Qt::UserRole;       ///< a Row, as int
  static constexpr int kRankRole = Qt::UserRole + 1;  ///< the rank the row belongs to

  explicit StacksPane(QWidget* parent = nullptr);

  /// Shows the stacks file at `path`. False when it cannot be read; the pane then says why.
  bool showFile(const QString& path);
  /// While stacks are being taken: `text` and a busy bar in place of the frames.
  void showWaiting(const QString& text);
  /// `text` (why there are no stacks to show) in place of the frames.
  void showMessage(const QString& text);

  QString path() const { return m_path; }
  QTreeWidget* tree() const { return m_tree; }
  /// The line above the frames: the file's title, or what the pane waits for or says.
  QString headline() const;
  bool isWaiting() const;
  /// The rank the file names as behind; -1 when none.
  int behindRank() const { return m_file.behind; }
  /// The selected rows, one a line, indented by their depth: what Ctrl+C copies.
  QString selectedText() const;
  /// Shows only the frames that hold `text` (any case), and the ranks with any; "" shows all.
  void setFilter(const QString& text);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void fill();
  void addRank(const core::StackSection& s);
  void addThread(QTreeWidgetItem* parent, const core::StackThread& t, int rank);
  void copySelection() const;

  core::StacksFile m_file;
  QString m_path;
  QString m_text;  ///< the file as it was read
  QLabel* m_headline = nullptr;
  QProgressBar* m_busy = nullptr;
  QLineEdit* m_filter = nullptr;
  QPushButton* m_copy = nullptr;
  QPushButton* m_open = nullptr;
  QTreeWidget* m_tree = nullptr;
};

}  // namespace ptw::ui
