// SPDX-License-Identifier: GPL-3.0-or-later
#include "ui/rank_table.h"

#include <cmath>

#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QVBoxLayout>

#include <algorithm>

#include "ui/chart_format.h"
#include "ui/palette.h"

namespace ptw::ui {
namespace {

enum RankColumn { kRank, kStatus, kStep, kLoss, kThroughput, kParams, kMemory, kMessage, kExit, kHost, kColumns };

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
                             tr("memory"), tr("last message"), tr("exit"), tr("host")});
  setSelectionBehavior(QAbstractItemView::SelectRows);
  setSelectionMode(QAbstractItemView::SingleSelection);
  setEditTriggers(QAbstractItemView::NoEditTriggers);
  verticalHeader()->setVisible(false);
  setWordWrap(false);  // one line a rank; a long message is elided, its full text in the log
  // The columns fit the table's width: the message takes what the figures leave.
  auto* header = horizontalHeader();
  const int widths[kColumns] = {44, 72, 60, 76, 76, 60, 80, 0, 84, 110};
  for (int c = 0; c < kColumns; ++c)
    if (c != kMessage) header->resizeSection(c, widths[c]);
  header->setSectionResizeMode(kMessage, QHeaderView::Stretch);
  setColumnHidden(kHost, true);  // shown for a run across hosts (reset)
  m_hint = new QLabel(tr("Each rank's state, step, loss, samples/s, model size, memory and last message appear "
                         "here during a run."),
                      viewport());
  m_hint->setObjectName("rankTableHint");
  m_hint->setWordWrap(true);
  m_hint->setAlignment(Qt::AlignCenter);
  m_hint->setStyleSheet("color: palette(dark)");
  (new QVBoxLayout(viewport()))->addWidget(m_hint);
}

void RankTable::reset(const LiveRun& run) {
  m_ranks = run.ranks;
  m_hint->hide();
  // DataParallel's replicas report as ranks of one process, whose heartbeat speaks for them all.
  m_oneProcess = core::processCount(run.profile) == 1;
  m_latest.assign(static_cast<std::size_t>(m_ranks), Latest{});
  m_status.assign(static_cast<std::size_t>(m_ranks), Status::Starting);
  setRowCount(m_ranks);
  // Each rank's host, for a run across hosts (profile section hosts); hidden for a local run.
  std::vector<std::string> hosts;
  try {
    hosts = core::rankHosts(run.profile);
  } catch (const std::exception&) {  // an invalid hosts list: the profile editor says so
  }
  setColumnHidden(kHost, hosts.empty());
  for (int r = 0; r < m_ranks; ++r) {
    for (int c = 0; c < kColumns; ++c) setItem(r, c, new QTableWidgetItem);
    setCell(r, kRank, QString::number(r));
    setCell(r, kStatus, statusText(m_status[static_cast<std::size_t>(r)]));
    if (static_cast<std::size_t>(r) < hosts.size()) setCell(r, kHost, QString::fromStdString(hosts[std::size_t(r)]));
  }
}

void RankTable::add(RecordSpan records) {
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
    latest.samplesPerS = s.samplesPerS;
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

void RankTable::refresh() {
  for (int r = 0; r < m_ranks; ++r) {
    const Latest& latest = m_latest[static_cast<std::size_t>(r)];
    if (latest.step < 0) continue;
    setCell(r, kThroughput, readableNumber(latest.samplesPerS));
    // A step is named, as in the log, not measured; a script's own counter, where it is not
    // ptw's step, beside it.
    setCell(r, kStep,
            latest.ownStep == latest.step ? QString::number(latest.step)
                                          : tr("%1 (its %2)").arg(latest.step).arg(latest.ownStep));
    // A loss that is NaN or infinite was reported so (a diverged run); "–" is for none reported.
    setCell(r, kLoss,
            core::isNotReported(latest.loss) || std::isfinite(latest.loss) ? readableNumber(latest.loss)
            : std::isnan(latest.loss)                                      ? QStringLiteral("NaN")
            : latest.loss > 0                                              ? QStringLiteral("inf")
                                                                           : QStringLiteral("-inf"));
    setCell(r, kMemory, readableBytes(latest.memBytes));
  }
}

void RankTable::rankExited(int rank, const QString& how, bool failed, bool stopped) {
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
  for (int c = 0; c < kColumns; ++c)
    if (auto* cell = item(failedRank, c)) cell->setForeground(failureColor());
}

bool RankTable::allReported() const {
  return std::all_of(m_latest.begin(), m_latest.end(), [](const Latest& l) { return l.step >= 0; });
}

std::int64_t RankTable::lowestStep() const {
  const auto lowest = std::min_element(m_latest.begin(), m_latest.end(),
                                       [](const Latest& a, const Latest& b) { return a.step < b.step; });
  return lowest == m_latest.end() ? -1 : lowest->step;
}

void RankTable::setCell(int rank, int column, const QString& text) {
  if (rank < 0 || rank >= rowCount()) return;
  if (auto* cell = item(rank, column)) cell->setText(text);
}

void RankTable::setStatus(int rank, Status status) {
  m_status[static_cast<std::size_t>(rank)] = status;
  setCell(rank, kStatus, statusText(status));
}

void RankTable::showParameters(int rank, std::int64_t parameters) {
  const QString text = readableNumber(static_cast<double>(parameters), 3);
  const QString tip = tr("%1 parameters").arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(parameters)));
  for (int r = m_oneProcess ? 0 : rank; r <= (m_oneProcess ? m_ranks - 1 : rank); ++r) {
    if (r < 0 || r >= rowCount()) continue;
    if (auto* cell = item(r, kParams); cell && cell->toolTip() != tip) {
      cell->setText(text);
      cell->setToolTip(tip);
    }
  }
}

}  // namespace ptw::ui
