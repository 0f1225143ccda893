// SPDX-License-Identifier: GPL-3.0-or-later
// Attach benchmark (tests/bench/bench_attach.sh runs it): what the window shows of a run it
// follows (MainWindow::attachRun), measured in the window itself.
//
//   bench_attach latency RUNS_DIR TIMES_DIR [SSH_PROFILE]
//     Attaches to the running run of RUNS_DIR (a folder, or HOST:DIR through ssh) and, every
//     2 ms, reads the last step of each rank's loss series, and the last step drawn of it. A
//     step's latency is when it is first there minus when its rank wrote it
//     (TIMES_DIR/times.RANK: "step unix_seconds" a line, written by the script right after
//     the record); its drawn latency, when it is first drawn (the chart's last redraw holds
//     it). Steps written before the first point showed are history, not counted. Prints one
//     JSON object: p50, p99 and the count of steps, and drawn_p50, drawn_p99, once the run
//     ends.
//   bench_attach own PROFILE TIMES_DIR RUNS_DIR
//     The baseline: the same, for a run the window starts itself (its live view as it was
//     before attaching existed).
//   bench_attach history RUNS_DIR RUN_ID POINTS_PER_RANK
//     Attaches to an ended run and prints the seconds until every rank's series holds
//     POINTS_PER_RANK points (its whole history drawn).
#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QTimer>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "common/profile.h"
#include "launch/follow_source.h"
#include "ui/main_window.h"
#include "ui/metric_chart.h"
#include "ui/run_controller.h"
#include "ui/series_summary.h"

namespace {

using namespace ptw;

double nowS() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// When each step of each rank became visible, in the chart's series and drawn: a poll of the
// loss chart every 2 ms.
struct Seen {
  std::map<std::pair<int, long>, double> at, drawnAt;
  std::vector<double> last, lastDrawn;
  double firstPoint = 0;  ///< when the first point showed: steps written before are history
  static void note(std::map<std::pair<int, long>, double>& when, double& last, int rank, double upTo, double t) {
    for (long step = static_cast<long>(last) + 1; step <= static_cast<long>(upTo); ++step)
      when.emplace(std::make_pair(rank, step), t);
    last = std::max(last, upTo);
  }
  void poll(ui::MetricChart* chart, int ranks) {
    last.resize(static_cast<std::size_t>(ranks), -1);
    lastDrawn.resize(static_cast<std::size_t>(ranks), -1);
    const double t = nowS();
    for (int r = 0; r < ranks; ++r) {
      const auto* s = chart->summary(r);
      if (!s || s->empty()) continue;
      if (firstPoint == 0) firstPoint = t;
      note(at, last[static_cast<std::size_t>(r)], r, s->xLast(), t);
      const double drawn = chart->drawnLast(r);
      if (!std::isnan(drawn)) note(drawnAt, lastDrawn[static_cast<std::size_t>(r)], r, drawn, t);
    }
  }
};

// p50 and p99 of `ms`, sorted here.
std::pair<double, double> quantiles(std::vector<double>& ms) {
  std::sort(ms.begin(), ms.end());
  const auto at = [&](double q) { return ms[std::min(ms.size() - 1, static_cast<std::size_t>(q * ms.size()))]; };
  return {at(0.5), at(0.99)};
}

int report(const Seen& seen, const QString& timesDir, int ranks, const char* what, const ui::MainWindow& w) {
  std::vector<double> ms, drawnMs;
  for (int r = 0; r < ranks; ++r) {
    QFile f(QStringLiteral("%1/times.%2").arg(timesDir).arg(r));
    if (!f.open(QIODevice::ReadOnly)) continue;
    for (const QByteArray& line : f.readAll().split('\n')) {
      const auto parts = line.split(' ');
      if (parts.size() != 2) continue;
      if (parts[1].toDouble() <= seen.firstPoint) continue;  // history, drawn at once: not a latency
      const auto it = seen.at.find({r, parts[0].toLong()});
      if (it != seen.at.end()) ms.push_back(1000 * (it->second - parts[1].toDouble()));
      const auto drawn = seen.drawnAt.find({r, parts[0].toLong()});
      if (drawn != seen.drawnAt.end()) drawnMs.push_back(1000 * (drawn->second - parts[1].toDouble()));
    }
  }
  if (ms.empty() || drawnMs.empty()) {
    std::printf("{\"what\": \"%s\", \"steps\": 0}\n", what);
    return 1;
  }
  const auto [p50, p99] = quantiles(ms);
  const auto [drawnP50, drawnP99] = quantiles(drawnMs);
  std::printf(
      "{\"what\": \"%s\", \"steps\": %zu, \"p50_ms\": %.1f, \"p99_ms\": %.1f, \"max_ms\": %.1f, \"drawn_p50_ms\": "
      "%.1f, \"drawn_p99_ms\": %.1f, \"redraws\": %lld, \"redraw_ms_mean\": %.2f}\n",
      what, ms.size(), p50, p99, ms.back(), drawnP50, drawnP99, static_cast<long long>(w.redrawCount()),
      w.redrawMsTotal() / static_cast<double>(std::max<std::int64_t>(1, w.redrawCount())));
  return 0;
}

// Polls until the window says the run is over (bounded: 10 minutes).
void pollUntilEnded(QApplication& app, ui::MainWindow& w, Seen& seen, int ranks) {
  QTimer poll;
  QObject::connect(&poll, &QTimer::timeout, [&] { seen.poll(w.lossChart(), ranks); });
  poll.start(2);
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < 600000) {
    app.processEvents(QEventLoop::AllEvents, 2);
    const QString s = w.lastStatus();
    if (s != "running" && !s.isEmpty() && !w.controller()->isRunning()) break;
  }
  seen.poll(w.lossChart(), ranks);
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  const QStringList args = app.arguments();
  const QString mode = args.value(1);
  ui::MainWindow w;
  w.setConfirmations(false);
  w.show();
  if (mode == "latency" && args.size() >= 4) {
    core::HostsSpec hosts;
    if (args.size() >= 5) hosts = core::loadProfile(args[4].toStdString()).hosts;
    core::Profile p = core::defaultProfile();
    p.hosts = hosts;
    w.setProfile(p);
    const auto rows = core::listRuns(args[2].toStdString(), hosts, true);
    if (rows.empty()) return std::fprintf(stderr, "bench_attach: no running run in %s\n", qPrintable(args[2])), 2;
    const int ranks = rows.back().world;
    w.attachRun(args[2], rows.back());
    Seen seen;
    pollUntilEnded(app, w, seen, ranks);
    return report(seen, args[3], ranks, "attached", w);
  }
  if (mode == "own" && args.size() >= 5) {
    const core::Profile p = core::loadProfile(args[2].toStdString());
    w.setProfile(p);
    w.setRunsDirectory(args[4]);
    w.startRun();
    Seen seen;
    pollUntilEnded(app, w, seen, p.strategy.ranks);
    return report(seen, args[3], p.strategy.ranks, "own", w);
  }
  if (mode == "history" && args.size() >= 5) {
    core::RunRow row;
    for (auto& r : core::listRuns(args[2].toStdString(), {}, false))
      if (r.id == args[3].toLongLong()) row = r;
    const std::size_t points = args[4].toULongLong();
    QElapsedTimer t;
    t.start();
    w.attachRun(args[2], row);
    bool all = false;
    while (!all && t.elapsed() < 120000) {
      app.processEvents(QEventLoop::AllEvents, 2);
      all = row.world > 0;
      for (int r = 0; r < row.world; ++r) all = all && w.lossChart()->pointCount(r) >= points;
    }
    std::printf("{\"what\": \"history\", \"points_per_rank\": %zu, \"ranks\": %d, \"seconds\": %.3f, \"drawn\": %s}\n",
                points, row.world, t.elapsed() / 1000.0, all ? "true" : "false");
    return all ? 0 : 1;
  }
  std::fprintf(stderr,
               "usage: bench_attach latency RUNS_DIR TIMES_DIR [SSH_PROFILE] | own PROFILE TIMES_DIR RUNS_DIR | "
               "history RUNS_DIR RUN_ID POINTS_PER_RANK\n");
  return 2;
}
