// SPDX-License-Identifier: GPL-3.0-or-later
// MainWindow: configure a profile, start and stop a run, watch every rank live (loss,
// throughput, step-time split, rank table, logs), and compare past runs.
#pragma once

#include <QMainWindow>
#include <QMessageBox>
#include <QString>

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/profile.h"
#include "launch/run_catalog.h"
#include "launch/stacks_file.h"
#include "ui/live_panel.h"
#include "ui/run_controller.h"

class QAction;
class QSettings;
class QCheckBox;
class QComboBox;
class QGridLayout;
class QLabel;
class QMenu;
class QPlainTextEdit;
class QPushButton;
class QScrollArea;
class QSlider;
class QStackedWidget;
class QTabWidget;
class QTableWidget;
class QTimer;
class QToolButton;

namespace ptw::core {
class RunStore;
}

namespace ptw::ui {

class AccuracyPanel;
class LossPanel;
class LrPanel;
class MetricChart;
class ProfileEditor;
class RankTable;
class ScalarCharts;
class RunController;
class RunHistory;
class StepHeatmap;
class StepSplitChart;
class StacksPane;
class SweepPanel;
class ThroughputPanel;

class MainWindow : public QMainWindow, private LiveStore {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// The profile the editor describes now.
  core::Profile profile() const;
  void setProfile(const core::Profile& profile);

  /// Loads a profile file into the editor; on failure nothing changes and `error` says why.
  bool openProfile(const QString& path, QString* error = nullptr);
  bool saveProfile(const QString& path, QString* error = nullptr);
  void setRunsDirectory(const QString& dir);
  /// Questions before changes are discarded (unsaved profile, active run); off in tests.
  void setConfirmations(bool on) { m_confirm = on; }
  /// How the window asks the user and tells them of an error: a message box, or a test's
  /// answer. `buttons` are the choices (Ok alone for an error).
  using Asker = std::function<QMessageBox::StandardButton(QMessageBox::Icon icon, const QString& title,
                                                          const QString& text, QMessageBox::StandardButtons buttons)>;
  void setAsker(Asker asker) { m_ask = std::move(asker); }

  /// Shows `line`, an error that stopped what the user asked (a profile that cannot be
  /// opened, a run that cannot start), under Start and above the log until the next run.
  void showProblem(const QString& line);

  /// Why Start is disabled, or empty when the profile can run.
  QString blockingReason() const { return m_blockingReason; }
  RunController* controller() const { return m_controller; }
  ProfileEditor* editor() const { return m_editor; }
  MetricChart* lossChart() const;
  MetricChart* throughputChart() const;
  StepSplitChart* splitChart() const { return m_split; }
  /// Step time by rank and step, shown above kAggregateAbove ranks (Note [Rank spread]).
  StepHeatmap* heatmap() const { return m_heatmap; }
  /// The stragglers named during the run (Note [Stragglers]); hidden while there is none.
  QLabel* stragglerBanner() const { return m_stragglerBanner; }
  /// Validation accuracy in percent (rank 0's, which every rank's parameters equal); for a
  /// run with no accuracy, a note takes its place (accuracyNote()).
  MetricChart* accuracyChart() const;
  QLabel* accuracyNote() const;
  /// The learning rate of each step (rank 0's: the schedule is the same on every rank).
  MetricChart* lrChart() const;
  /// The named scalars' charts (tab Scalars, shown once a run reports one).
  ScalarCharts* scalarCharts() const { return m_scalars; }
  QTableWidget* rankTable() const;
  RunHistory* history() const { return m_history; }
  SweepPanel* sweep() const { return m_sweep; }
  /// Every rank's frames (View > Show Stacks, the rank table's context menu); hidden until shown.
  StacksPane* stacksPane() const { return m_stacksPane; }
  QString lastStatus() const { return m_lastStatus; }
  /// Live charts paused (View > Pause Live Charts, Ctrl+Shift+P): the run goes on and every
  /// record is stored, but the charts, the rank table and the log take nothing new until
  /// they resume (or the run ends), and the window's thread sleeps meanwhile. Pausing first
  /// draws what has come; resuming draws what came since. Only while a run trains.
  void setChartsPaused(bool paused);
  bool chartsPaused() const { return m_chartsPaused; }
  QStringList recentFiles() const;
  /// Redraws of the live view since the window opened, and the milliseconds they took
  /// (Note [Redraw budget]; the window benchmark reads them).
  std::int64_t redrawCount() const { return m_redraws; }
  double redrawMsTotal() const { return m_redrawMsTotal; }
  /// The same milliseconds by part of the live view (each panel's class, and "outliers"),
  /// or with `cpu` the window thread's CPU milliseconds in each, and the longest single
  /// redraw: where a redraw's time goes.
  std::map<QString, double> redrawMsByPart(bool cpu = false) const;
  double redrawMsMax() const { return m_redrawMsMax; }
  /// The window thread's CPU milliseconds in those redraws: their time less the time the
  /// thread waited for a core, which the ranks had meanwhile.
  double redrawCpuMsTotal() const { return m_redrawCpuMsTotal; }
  /// The milliseconds the last run's empty charts took to lay out and draw when it started.
  double resetMs() const { return m_resetMs; }
  /// The share of the time since its start a run's redraws may take (Note [Redraw budget]).
  double redrawShare() const { return m_redrawShare; }

 public slots:
  /// Follows run `run` of `runsDir` (a folder here, or HOST:DIR through ssh with the profile's
  /// hosts.ssh_* options) in the Live tab: its history drawn at once, then live. The run goes
  /// on whatever the window does; Stop asks its supervisor to stop it.
  void attachRun(const QString& runsDir, const core::RunRow& run);
  /// File > Attach to Run...: lists the running runs of a runs directory, and attaches to one.
  void showAttachDialog();
  /// Run > Submit to SLURM (a profile of hosts.launcher "slurm"): `ptw submit`, then attached.
  void submitRun();
  void startRun();
  void stopRun();
  void newProfile();
  /// View > Show Stacks: for a running run, asks it for every rank's stacks and shows them
  /// once written (the pane says it waits, for at most kStacksWaitS); for an ended run, shows
  /// the stacks its last attempt wrote, or says there are none.
  void showStacks();
  /// Help > About: the version (project()'s), the Qt it runs on and the home page, in a box
  /// named "aboutBox" that closes itself.
  void showAbout();

 protected:
  void closeEvent(QCloseEvent* event) override;
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void buildUi();
  void buildProfileDock();
  /// Widens the profile panel to its fields, so that it never scrolls sideways.
  void fitProfileWidth();
  QWidget* buildLiveTab(QWidget* parent);
  QWidget* buildLossBox(QWidget* charts);
  /// Joins `panel` to the live view's list (Note [Live panels]).
  template <class Panel>
  Panel* addPanel(Panel* panel) {
    m_panels.push_back(panel);
    panel->readStoreFrom(*this);
    return panel;
  }
  /// The charts the smoothing and outlier options apply to (the named scalars' have their own calls).
  std::array<MetricChart*, 2> optionCharts() const;
  void buildLogPane(QWidget* parent);
  QWidget* buildRankPane(QWidget* parent);
  /// Marks in the rank table the ranks the charts name (Note [Rank spread]).
  void markOutliers();
  // LiveStore: the current run's stored records, read on this thread for zoomed-in ranges.
  std::vector<std::pair<double, double>> series(int series, const std::string& column, double x0, double x1) override;
  std::vector<core::ValidationRow> validation() override;
  /// The read connection to the store of the current run; null when there is none.
  core::RunStore* reader();
  void buildHistoryTabs(QTabWidget* tabs);
  void buildMenus();
  void revalidate();
  void saveView(QSettings& settings) const;
  void restoreView(const QSettings& settings);
  QMessageBox::StandardButton ask(QMessageBox::Icon icon, const QString& title, const QString& text,
                                  QMessageBox::StandardButtons buttons);
  void warn(const QString& title, const QString& text) { ask(QMessageBox::Warning, title, text, QMessageBox::Ok); }
  /// True when the profile has no unsaved changes, or the user lets them go.
  bool changesMayBeDiscarded();
  /// Puts `p`, which has no file (a run's, the sweep's fastest), in the editor once unsaved
  /// changes may go; `message` goes to the status bar. False when the user kept them.
  bool replaceProfile(const core::Profile& p, const QString& message);
  void drainRun();
  void applyEvent(const RunController::Event& e);
  void redrawIfDue();
  /// How long a redraw waits after the last (Note [Redraw budget]).
  double redrawPeriodMs() const;
  /// Note [Attached records drawn as they come].
  void takeArrived();
  void resetLive(int ranks);
  void resetLive(const core::Profile& p, int ranks);
  void onConnection(const QString& state, const QString& message);
  /// `again`: a line already taken, shown anew after the log's filter changed.
  void appendLog(int rank, const QString& line, bool again = false);
  void refilterLog();
  /// Looks for the stacks file asked for by showStacks(); gives up after kStacksWaitS.
  void pollStacks();
  void openStacks(const QString& path);
  /// Shows a straggler the supervisor named in `line` (its own log line) in the banner and table.
  void showStraggler(const QString& line);
  void onFinished(const QString& status, const QString& message, int failedRank, const QStringList& lastLines);
  void markSaved(const QString& path);
  void addRecent(const QString& path);
  void setRecentFiles(const QStringList& recent);
  void updateRecentMenu();
  void updateTitle();

  QString m_path;
  QString m_runsDir;
  QString m_blockingReason;
  QString m_lastStatus;
  core::Profile m_savedProfile;
  bool m_confirm = true;
  Asker m_ask;
  bool m_closeAfterRun = false;  ///< the user closed the window while a run or sweep went on
  QAction* m_startAction = nullptr;
  QAction* m_stopAction = nullptr;
  QAction* m_submitAction = nullptr;
  QAction* m_pauseAction = nullptr;
  QAction* m_stacksAction = nullptr;
  bool m_chartsPaused = false;

  ProfileEditor* m_editor = nullptr;
  QScrollArea* m_profileScroll = nullptr;
  QPushButton* m_start = nullptr;
  QPushButton* m_stop = nullptr;
  QLabel* m_status = nullptr;
  QStackedWidget* m_chartStack = nullptr;  ///< the first-run hint, then the charts
  QGridLayout* m_chartGrid = nullptr;
  QLabel* m_firstRunHint = nullptr;
  QPlainTextEdit* m_problems = nullptr;  ///< the ranks' warnings and errors, above the log
  std::vector<LivePanel*> m_panels;      ///< every part of the live view (Note [Live panels])
  LossPanel* m_loss = nullptr;
  ThroughputPanel* m_throughput = nullptr;
  StepSplitChart* m_split = nullptr;
  StepHeatmap* m_heatmap = nullptr;
  QLabel* m_stragglerBanner = nullptr;
  QStringList m_stragglers;             ///< the banner's lines
  AccuracyPanel* m_accuracy = nullptr;  ///< the accuracy chart, or the note that says why there is none
  LrPanel* m_lr = nullptr;
  RankTable* m_rankTable = nullptr;
  QTabWidget* m_tabs = nullptr;
  ScalarCharts* m_scalars = nullptr;  ///< its tab is hidden until a run reports a named scalar
  QSlider* m_smoothing = nullptr;
  QCheckBox* m_logX = nullptr;
  QCheckBox* m_logY = nullptr;
  QToolButton* m_pauseButton = nullptr;  ///< Pause Live Charts beside the chart options
  QPlainTextEdit* m_log = nullptr;
  QComboBox* m_logRank = nullptr;
  QComboBox* m_logLevel = nullptr;
  RunHistory* m_history = nullptr;
  SweepPanel* m_sweep = nullptr;
  StacksPane* m_stacksPane = nullptr;
  QTimer* m_stacksTimer = nullptr;     ///< looks for the stacks asked for, while waiting
  core::StacksFileIds m_stacksBefore;  ///< the run folder's stacks files when they were asked for
  std::chrono::steady_clock::time_point m_stacksUntil{};
  QMenu* m_recentMenu = nullptr;
  RunController* m_controller = nullptr;
  QTimer* m_drainTimer = nullptr;
  QTimer* m_redrawSoon = nullptr;            ///< Note [Attached records drawn as they come]
  std::unique_ptr<core::RunStore> m_reader;  ///< read connection for zoomed-in detail

  // Live run state.
  struct LogLine {
    int rank;
    QString text;
  };
  std::deque<LogLine> m_logLines;
  std::set<QString> m_sharedLines;  ///< rank lines shown once for all ranks
  int m_reportingRanks = 0;
  RunController::Batch m_batch;  ///< the last records taken; kept for its capacity
  std::chrono::steady_clock::time_point m_lastRedraw{};
  std::chrono::steady_clock::time_point m_runStarted{};
  double m_redrawMs = 0;        ///< the last redraw's time
  double m_redrawDebtMs = 0;    ///< CPU time the redraws owe at the last (Note [Redraw budget])
  double m_redrawCostMs = 0;    ///< a redraw's usual CPU time (Note [Redraw budget])
  bool m_runOver = false;       ///< the run has ended: its last redraw is not counted
  double m_redrawShare = 0.02;  ///< of the time drawing may take (Note [Redraw budget])
  bool m_forceRedraw = false;
  bool m_firstStepDrawn = false;  ///< a step of the current run has been drawn
  std::int64_t m_redraws = 0;
  double m_redrawMsTotal = 0;
  double m_redrawMsMax = 0;
  double m_redrawCpuMsTotal = 0;
  double m_resetMs = 0;
  std::vector<double> m_panelMs;     ///< each of m_panels' redraw milliseconds, then markOutliers'
  std::vector<double> m_panelCpuMs;  ///< the same, of the thread's CPU time
};

}  // namespace ptw::ui
