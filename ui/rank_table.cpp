// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/rank_table.h"

#include <cmath>

#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QResizeEvent>
#include <QScrollBar>
#include <QVBoxLayout>

#include <algorithm>
#include <chrono>

#include "ui/chart_format.h"
#include "ui/palette.h"

namespace ptw::ui {
namespace {

enum RankColumn {
  kRank,
  kStatus,
  kStep,
  kLoss,
  kThroughput,
  kParams,
  kMemory,
  kMessage,
  kExit,
  kHost,
  kMark,
  kColumns
};
constexpr int kMinMessageWidth = 240;  ///< what reads as a line of a log

// A cell that sorts by its number where it has one (Qt::UserRole), else by its text: "1,148"
// after "987", "rank 10" after "rank 9".
class SortedItem : public QTableWidgetItem {
 public:
  bool operator<(const QTableWidgetItem& other) const override {
    const QVariant a = data(Qt::UserRole), b = other.data(Qt::UserRole);
    if (a.isValid() && b.isValid()) return a.toDouble() < b.toDouble();
    if (a.isValid() != b.isValid()) return a.isValid();  // numbers before what has none
    return QTableWidgetItem::operator<(other);
  }
};

// A rank's memory for the table: "312 MiB"; "–" where the rank does not measure it.
QString readableBytes(std::int64_t bytes) {
  return bytes > 0 ? QLocale(QLocale::English).formattedDataSize(bytes, 1) : QStringLiteral("–");
}

}  // namespace

QString RankTable::statusText(Status status) {
  switch (status) {
    case Status::Starting: return tr("starting");
    case Status::Running: return tr("running");
    case Status::Restarting: return tr("restarting");
    case Status::Exited: return tr("exited");
    case Status::Failed: return tr("failed");
    case Status::Finished: return tr("finished");
    case Status::Stopped: return tr("stopped");
  }
  return QString();
}

RankTable::RankTable(QWidget* parent) : QTableWidget(0, kColumns, parent) {
  setHorizontalHeaderLabels({tr("rank"), tr("status"), tr("step"), tr("loss"), tr("samples/s"), tr("params"),
                             tr("memory"), tr("last message"), tr("exit"), tr("host"), tr("stands out")});
  setSelectionBehavior(QAbstractItemView::SelectRows);
  setSelectionMode(QAbstractItemView::SingleSelection);
  setEditTriggers(QAbstractItemView::NoEditTriggers);
  verticalHeader()->setVisible(false);
  setWordWrap(false);  // one line a rank; a long message is elided, its full text in the log
  // The columns fit the table's width: the message takes what the figures leave
  // (fitMessageColumn), the exit column only once a rank has exited.
  auto* header = horizontalHeader();
  const int widths[kColumns] = {44, 72, 60, 76, 76, 60, 80, kMinMessageWidth, 84, 110, 120};
  for (int c = 0; c < kColumns; ++c) header->resizeSection(c, widths[c]);
  header->setStretchLastSection(false);
  setColumnHidden(kHost, true);  // shown for a run across hosts (reset)
  setColumnHidden(kExit, true);
  setColumnHidden(kMark, true);    // shown once a rank stands out
  setColumnHidden(kParams, true);  // shown once a rank's model size is known
  setSortingEnabled(true);
  sortByColumn(kRank, Qt::AscendingOrder);
  m_hint = new QLabel(tr("Each rank's state, step, loss, samples/s, model size, memory and last message appear "
                         "here during a run."),
                      viewport());
  m_hint->setObjectName("rankTableHint");
  m_hint->setWordWrap(true);
  m_hint->setAlignment(Qt::AlignCenter);
  m_hint->setStyleSheet("color: palette(dark)");
  (new QVBoxLayout(viewport()))->addWidget(m_hint);
}

void RankTable::setHosts(const QStringList& rankHosts) {
  setSortingEnabled(false);  // rows stay where they are while their cells change
  for (int r = 0; r < std::min(m_ranks, static_cast<int>(rankHosts.size())); ++r) setCell(r, kHost, rankHosts[r]);
  setSortingEnabled(true);
  setColumnHidden(kHost, rankHosts.isEmpty());
  setGroupedByHost(m_grouped);
}

void RankTable::reset(const LiveRun& run) {
  m_ranks = run.ranks;
  m_hint->hide();
  // DataParallel's replicas report as ranks of one process, whose heartbeat speaks for them all.
  m_oneProcess = core::processCount(run.profile) == 1;
  m_latest.assign(static_cast<std::size_t>(m_ranks), Latest{});
  m_status.assign(static_cast<std::size_t>(m_ranks), Status::Starting);
  m_straggler.assign(static_cast<std::size_t>(m_ranks), QString());
  m_outliers.clear();
  setSortingEnabled(false);  // rows in rank order while they are made
  setRowCount(0);
  setRowCount(m_ranks);
  m_items.assign(static_cast<std::size_t>(m_ranks), {});
  // Each rank's host, for a run across hosts (profile section hosts); hidden for a local run.
  std::vector<std::string> hosts;
  try {
    hosts = core::rankHosts(run.profile);
  } catch (const std::exception&) {  // an invalid hosts list: the profile editor says so
  }
  setColumnHidden(kHost, hosts.empty());
  setColumnHidden(kExit, true);
  setColumnHidden(kMark, true);
  setColumnHidden(kParams, true);
  for (int r = 0; r < m_ranks; ++r) {
    for (int c = 0; c < kColumns; ++c) {
      auto* cell = new SortedItem;
      setItem(r, c, cell);
      m_items[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)] = cell;
    }
    setCell(r, kRank, QString::number(r), r);
    setCell(r, kStatus, statusText(m_status[static_cast<std::size_t>(r)]));
    if (static_cast<std::size_t>(r) < hosts.size()) setCell(r, kHost, QString::fromStdString(hosts[std::size_t(r)]));
  }
  setSortingEnabled(true);
  setGroupedByHost(m_grouped);
  applyFilter();
  fitMessageColumn();
}

void RankTable::add(RecordSpan records) {
  const double nowS = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  for (const core::Record& rec : records) {
    const auto& s = rec.step;
    if (rec.kind == core::Record::Kind::Heartbeat) {
      if (rec.parameters > 0) showParameters(s.rank, rec.parameters);
      continue;
    }
    if (!core::holdsSteps(rec) || s.rank < 0 || s.rank >= m_ranks) continue;
    auto& latest = m_latest[static_cast<std::size_t>(s.rank)];
    if (latest.step < 0) {
      if (const Status st = m_status[static_cast<std::size_t>(s.rank)];
          st == Status::Starting || st == Status::Restarting)
        setStatus(s.rank, Status::Running);
      emit firstStep(s.rank);
    }
    // Smoothed over the last seconds as the headless progress line is: a single record's
    // rate jumps with the group it closes (Note [Step groups]).
    const core::StepGroup g = core::asGroup(rec);
    if (std::isfinite(g.samples) && std::isfinite(g.stepMs)) latest.rate.add(nowS, g.samples, g.stepMs / 1000.0);
    if (s.step >= latest.step)
      latest.step = s.step, latest.loss = s.loss, latest.memBytes = s.memBytes, latest.ownStep = s.ownStep();
  }
}

void RankTable::truncateAfter(std::int64_t) {
  for (int r = 0; r < m_ranks; ++r) {
    m_latest[static_cast<std::size_t>(r)] = Latest{};
    setStatus(r, Status::Restarting);
    setCell(r, kExit, QString());
  }
}

// Up to kEveryRowUpTo ranks every redraw writes every row; past them, the rows in view, and,
// while the table is sorted by a figure that changes (step, loss, samples/s, memory), every
// row once every kEveryRowS (the rows out of view sort by values that old): writing tens of
// thousands of cells at each redraw would take the redraw budget (Note [Redraw budget]) alone.
void RankTable::refresh() {
  constexpr int kEveryRowUpTo = 256;
  constexpr auto kEveryRowS = std::chrono::seconds(2);
  const auto now = std::chrono::steady_clock::now();
  const int sorted = horizontalHeader()->sortIndicatorSection();
  const bool byFigure = sorted == kStep || sorted == kLoss || sorted == kThroughput || sorted == kMemory;
  if (m_ranks <= kEveryRowUpTo || (byFigure && now - m_wroteAll >= kEveryRowS)) {
    m_wroteAll = now;
    // One sort for the redraw, not one for each cell that changes in the sorted column.
    setSortingEnabled(false);
    for (int r = 0; r < m_ranks; ++r) showLatest(r);
    setSortingEnabled(true);
  } else {
    // A few rows: each moves to its place as its sorted cell changes.
    const int first = std::max(0, rowAt(0));
    int last = rowAt(viewport()->height() - 1);
    if (last < 0) last = rowCount() - 1;
    std::vector<int> ranks;
    for (int row = first; row <= last; ++row) ranks.push_back(rankAt(row));
    for (int r : ranks) showLatest(r);
  }
  if (!m_filter.isEmpty()) applyFilter();
}

void RankTable::showLatest(int r) {
  if (r < 0 || r >= m_ranks) return;
  const Latest& latest = m_latest[static_cast<std::size_t>(r)];
  if (latest.step < 0) return;
  const double rate = latest.rate.rate();
  setCell(r, kThroughput, readableNumber(rate), rate);
  // A step is named, as in the log, not measured; a script's own counter, where it is not
  // ptw's step, beside it.
  setCell(r, kStep,
          latest.ownStep == latest.step ? QString::number(latest.step)
                                        : tr("%1 (its %2)").arg(latest.step).arg(latest.ownStep),
          static_cast<double>(latest.step));
  // A loss that is NaN or infinite was reported so (a diverged run); "–" is for none reported.
  setCell(r, kLoss,
          core::isNotReported(latest.loss) || std::isfinite(latest.loss) ? readableNumber(latest.loss)
          : std::isnan(latest.loss)                                      ? QStringLiteral("NaN")
          : latest.loss > 0                                              ? QStringLiteral("inf")
                                                                         : QStringLiteral("-inf"),
          std::isfinite(latest.loss) ? latest.loss : 1e300);
  setCell(r, kMemory, readableBytes(latest.memBytes), static_cast<double>(latest.memBytes));
}

void RankTable::rankExited(int rank, const QString& how, bool failed, bool stopped) {
  setColumnHidden(kExit, false);
  setCell(rank, kExit, how);
  if (rank >= 0 && rank < static_cast<int>(m_status.size()))
    setStatus(rank, failed ? Status::Failed : stopped ? Status::Stopped : Status::Exited);
}

void RankTable::showMessage(int rank, const QString& line) {
  if (rank >= 0 && rank < m_ranks) setCell(rank, kMessage, line);
}

void RankTable::runEnded(Status end, int failedRank, const QString& message) {
  for (int r = 0; r < m_ranks; ++r) {
    const Status st = m_status[static_cast<std::size_t>(r)];
    setStatus(r, st != Status::Failed && end != Status::Failed ? end : st);
  }
  if (failedRank < 0 || failedRank >= m_ranks) return;
  setStatus(failedRank, Status::Failed);
  setCell(failedRank, kMessage, message);
  for (auto* cell : m_items[static_cast<std::size_t>(failedRank)]) cell->setForeground(failureColor());
}

bool RankTable::allReported() const {
  return std::all_of(m_latest.begin(), m_latest.end(), [](const Latest& l) { return l.step >= 0; });
}

std::int64_t RankTable::lowestStep() const {
  const auto lowest = std::min_element(m_latest.begin(), m_latest.end(),
                                       [](const Latest& a, const Latest& b) { return a.step < b.step; });
  return lowest == m_latest.end() ? -1 : lowest->step;
}

void RankTable::setCell(int rank, int column, const QString& text, double sortKey) {
  if (rank < 0 || rank >= static_cast<int>(m_items.size())) return;
  QTableWidgetItem* cell = m_items[static_cast<std::size_t>(rank)][static_cast<std::size_t>(column)];
  cell->setText(text);
  const bool numeric = column == kRank || column == kStep || column == kLoss || column == kThroughput ||
                       column == kMemory || column == kParams;
  if (numeric) cell->setData(Qt::UserRole, sortKey);
}

int RankTable::rankAt(int row) const {
  const QTableWidgetItem* cell = row >= 0 && row < rowCount() ? item(row, kRank) : nullptr;
  return cell ? cell->data(Qt::UserRole).toInt() : -1;
}

int RankTable::rowOf(int rank) const {
  return rank >= 0 && rank < static_cast<int>(m_items.size()) ? m_items[static_cast<std::size_t>(rank)][kRank]->row()
                                                              : -1;
}

void RankTable::setFilter(const QString& text) {
  m_filter = text.trimmed();
  applyFilter();
}

void RankTable::applyFilter() {
  bool isNumber = false;
  const int number = m_filter.toInt(&isNumber);
  for (int r = 0; r < m_ranks; ++r) {
    const auto& cells = m_items[static_cast<std::size_t>(r)];
    bool shown = m_filter.isEmpty() || (isNumber && number == r);
    for (int c : {kStatus, kHost, kMark, kMessage})
      shown =
          shown || (!isNumber && cells[static_cast<std::size_t>(c)]->text().contains(m_filter, Qt::CaseInsensitive));
    setRowHidden(cells[kRank]->row(), !shown);
  }
}

void RankTable::setGroupedByHost(bool on) {
  m_grouped = on;
  // The sort is stable: by rank, then by host, leaves the ranks in order within each host.
  sortByColumn(kRank, Qt::AscendingOrder);
  if (on) sortByColumn(kHost, Qt::AscendingOrder);
}

void RankTable::markStraggler(int rank, const QString& message) {
  if (rank < 0 || rank >= m_ranks) return;
  m_straggler[static_cast<std::size_t>(rank)] = message;
  showMark(rank);
}

void RankTable::setOutliers(const std::map<int, QString>& outliers) {
  if (outliers == m_outliers) return;
  std::map<int, QString> before;
  before.swap(m_outliers);
  m_outliers = outliers;
  for (const auto& [rank, what] : before) showMark(rank);
  for (const auto& [rank, what] : m_outliers) showMark(rank);
}

QString RankTable::markOf(int rank) const {
  if (rank < 0 || rank >= m_ranks) return QString();
  QStringList marks;
  if (!m_straggler[static_cast<std::size_t>(rank)].isEmpty()) marks << tr("straggler");
  if (auto it = m_outliers.find(rank); it != m_outliers.end()) marks << tr("outlier: %1").arg(it->second);
  return marks.join(QStringLiteral("; "));
}

void RankTable::showMark(int rank) {
  if (rank < 0 || rank >= m_ranks) return;
  const QString mark = markOf(rank);
  const QString tip = m_straggler[static_cast<std::size_t>(rank)];
  setColumnHidden(kMark, false);
  for (auto* cell : m_items[static_cast<std::size_t>(rank)]) {
    cell->setBackground(mark.isEmpty() ? QBrush() : QBrush(highlightColor()));
    cell->setToolTip(tip.isEmpty() ? QString() : tr("straggler: %1").arg(tip));
  }
  setCell(rank, kMark, mark);
  fitMessageColumn();
}

void RankTable::resizeEvent(QResizeEvent* event) {
  QTableWidget::resizeEvent(event);
  fitMessageColumn();
}

void RankTable::fitMessageColumn() {
  int others = 0;
  for (int c = 0; c < kColumns; ++c)
    if (c != kMessage && !isColumnHidden(c)) others += columnWidth(c);
  // From the table's own width: its viewport takes its size from it only after resizeEvent.
  const int scrollBar = verticalScrollBar()->isVisible() ? verticalScrollBar()->sizeHint().width() : 0;
  const int inside = width() - 2 * frameWidth() - scrollBar;
  horizontalHeader()->resizeSection(kMessage, std::max(kMinMessageWidth, inside - others));
}

void RankTable::setStatus(int rank, Status status) {
  m_status[static_cast<std::size_t>(rank)] = status;
  setCell(rank, kStatus, statusText(status));
}

void RankTable::showParameters(int rank, std::int64_t parameters) {
  if (isColumnHidden(kParams)) {
    setColumnHidden(kParams, false);
    fitMessageColumn();
  }
  const QString text = readableNumber(static_cast<double>(parameters), 3);
  const QString tip = tr("%1 parameters").arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(parameters)));
  for (int r = m_oneProcess ? 0 : rank; r <= (m_oneProcess ? m_ranks - 1 : rank); ++r) {
    if (r < 0 || r >= static_cast<int>(m_items.size())) continue;
    if (auto* cell = m_items[static_cast<std::size_t>(r)][kParams]; cell->toolTip() != tip) {
      setCell(r, kParams, text, static_cast<double>(parameters));
      cell->setToolTip(tip);
    }
  }
}

}  // namespace ptw::ui
