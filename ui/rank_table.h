// SPDX-License-Identifier: GPL-3.0-or-later
// RankTable: the live table of the run's reporting ranks, a row each: its status, latest
// step, loss and samples/s, the model's size, its memory, its last message, how it exited,
// and its host for a run across hosts, and whether it stands out (a straggler, a rank named on
// a chart). A rank's status is a RankTable::Status, put into words only in its cell. Rows sort
// by any column (numbers as numbers), group by host, and filter; at thousands of ranks a
// redraw sorts once, not once a cell.
#pragma once

#include <QString>
#include <QTableWidget>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "launch/rate_window.h"

#include "ui/live_panel.h"

class QLabel;

namespace ptw::ui {

class RankTable : public QTableWidget, public LivePanel {
  Q_OBJECT
 public:
  enum class Status { Starting, Running, Restarting, Exited, Failed, Finished, Stopped };
  /// The words for `status` in the table.
  static QString statusText(Status status);

  explicit RankTable(QWidget* parent = nullptr);

  void reset(const LiveRun& run) override;
  void add(RecordSpan records) override;
  /// Every rank starts over with the new attempt: restarting, its last exit the attempt's,
  /// its latest step whatever it reports next.
  void truncateAfter(std::int64_t step) override;
  /// Shows each rank's latest record; a changed cell repaints the table, so it changes with
  /// the charts.
  void refresh() override;

  /// `rank`'s process ended: `how` ("exit code 3"), whether that is a failure, and whether ptw
  /// had stopped it (a stop, a stall, another rank's failure).
  void rankExited(int rank, const QString& how, bool failed, bool stopped = false);
  /// `line`, the latest of `rank`'s log, in its row.
  void showMessage(int rank, const QString& line);
  /// The run ended as `end` (Finished, Stopped or Failed): every rank that has not failed is
  /// finished or stopped with it, or as it was when the run failed. `failedRank` (-1: none)
  /// failed with `message`, its row in the failure colour.
  void runEnded(Status end, int failedRank, const QString& message);

  /// The rank shown in `row` (rows sort); -1 for none.
  int rankAt(int row) const;
  /// The row that shows `rank`; -1 for none.
  int rowOf(int rank) const;
  /// Shows only the ranks whose rank number is `text`, or whose status, host, mark or last
  /// message holds it (any case); all for an empty text.
  void setFilter(const QString& text);
  /// Sorts by host, ranks in order within each; off: by rank.
  void setGroupedByHost(bool on);
  /// Each rank's host where the profile names none (a SLURM job's nodes): shows the host column.
  void setHosts(const QStringList& rankHosts);
  /// Marks `rank` a straggler (Note [Stragglers]), `message` in its tooltip.
  void markStraggler(int rank, const QString& message);
  /// The ranks a chart names for standing out (Note [Rank spread]), with what: "loss".
  void setOutliers(const std::map<int, QString>& outliers);
  /// The rank's mark ("straggler", "outlier: samples/s"), empty for none.
  QString markOf(int rank) const;

  /// Whether every rank has reported a step since the run or its last restart started.
  bool allReported() const;
  /// The lowest of the ranks' latest steps; -1 while a rank has reported none.
  std::int64_t lowestStep() const;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 signals:
  /// `rank` reported its first step since the run or its last restart started.
  void firstStep(int rank);

 private:
  struct Latest {
    std::int64_t step = -1;  ///< the highest step seen (-1: none yet), and its loss
    double loss = 0;
    core::RateWindow rate =
        core::RateWindow(3.0);  ///< samples/s over the last seconds, as the headless progress shows it
    std::int64_t memBytes = 0;  ///< of the highest step
    std::int64_t ownStep = -1;  ///< a script's own counter at it (Note [Stretches of steps])
  };
  void setCell(int rank, int column, const QString& text, double sortKey = 0);
  /// Shows `rank`'s marks: its row's background and its mark cell.
  void showMark(int rank);
  void applyFilter();
  /// Writes `rank`'s latest record into its row.
  void showLatest(int rank);
  /// The last message takes what the other columns leave, but never less than a readable width.
  void fitMessageColumn();
  void setStatus(int rank, Status status);
  /// The model's parameter count from a rank's heartbeat, in its row (every row where one
  /// process reports for several series).
  void showParameters(int rank, std::int64_t parameters);

  QLabel* m_hint;  ///< what the table will hold, until a run starts
  int m_ranks = 0;
  bool m_oneProcess = false;  ///< the run's series all come from one process (DataParallel, single)
  std::vector<Latest> m_latest;
  std::vector<Status> m_status;
  std::vector<std::array<QTableWidgetItem*, 11>> m_items;  ///< each rank's cells, wherever sorted
  std::vector<QString> m_straggler;                        ///< each rank's straggler message, or empty
  std::map<int, QString> m_outliers;
  QString m_filter;
  bool m_grouped = false;
  std::chrono::steady_clock::time_point m_wroteAll{};  ///< when refresh last wrote every row
};

}  // namespace ptw::ui
