// SPDX-License-Identifier: GPL-3.0-or-later
// What the window does at many ranks: RANKS synthetic ranks (Note [Synthetic ranks]) stepping
// RATE times a second for SECONDS, watched live in a 1600×1000 window. Prints one line of
// JSON: the frames the window painted a second while the run went on (the window is asked
// for one every 16 ms, a 60 Hz screen's), the same with no run first in the same process
// (the baseline) and their ratio; the live view's redraws a second, their mean cost, and
// the share of the redraw budget they used (Note [Redraw budget]: the redraws' time over
// the time the budget allows them), the same of the window thread's CPU time in them (what
// the redraws took from the ranks, less the time the thread waited for a core), the longest
// redraw, each part of the live view's milliseconds, and the new run's charts' first layout
// (reset_ms, outside the redraws).
// tests/bench/bench_scale.sh runs it as its window mode.
//
//   QT_QPA_PLATFORM=offscreen build/bin/bench_window RANKS RATE SECONDS RUNS_DIR
#include <qcustomplot.h>
#include <QApplication>
#include <QElapsedTimer>
#include <QTimer>

#include <cstdio>
#include <string>

#include "common/profile.h"
#include "ui/main_window.h"
#include "ui/metric_chart.h"
#include "ui/run_controller.h"

using namespace ptw;

namespace {

// Counts the paint events of the window itself: one a frame, whatever of it changed.
class FrameCounter : public QObject {
 public:
  long frames = 0;
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (event->type() == QEvent::Paint) ++frames;
    return QObject::eventFilter(watched, event);
  }
};

// Frames painted a second over `ms` of the event loop, the window asked for one every 16 ms.
double framesPerSecond(ui::MainWindow& w, FrameCounter& counter, int ms, const std::function<bool()>& until) {
  QTimer ask;
  QObject::connect(&ask, &QTimer::timeout, &w, [&w] { w.update(); });
  ask.start(16);
  const long before = counter.frames;
  QElapsedTimer clock;
  clock.start();
  while (clock.elapsed() < ms && !until()) QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
  return 1000.0 * static_cast<double>(counter.frames - before) /
         static_cast<double>(std::max<qint64>(1, clock.elapsed()));
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  if (argc != 5) {
    std::fprintf(stderr, "usage: bench_window RANKS RATE SECONDS RUNS_DIR\n");
    return 2;
  }
  const int ranks = std::atoi(argv[1]);
  const double rate = std::atof(argv[2]);
  const int seconds = std::atoi(argv[3]);
  ui::MainWindow w;
  w.setConfirmations(false);
  w.setRunsDirectory(QString::fromLocal8Bit(argv[4]));
  w.resize(1600, 1000);
  w.show();
  FrameCounter counter;
  w.installEventFilter(&counter);
  const double idleFps = framesPerSecond(w, counter, 2000, [] { return false; });
  const auto steps = static_cast<long long>(rate * seconds + 0.5);
  w.setProfile(
      core::applyOverrides(core::defaultProfile(),
                           {"strategy.kind=synthetic", "strategy.ranks=" + std::to_string(ranks), "strategy.device=cpu",
                            "hyper.max_steps=" + std::to_string(steps), "run.timeout_s=900"}));
  w.controller()->setWorkerArgs({"--synthetic-rate=" + std::string(argv[2])});
  w.startRun();
  if (!w.controller()->isRunning()) {
    std::fprintf(stderr, "bench_window: the run did not start: %s\n", qPrintable(w.blockingReason()));
    return 1;
  }
  const std::int64_t redraws0 = w.redrawCount();
  const double redrawMs0 = w.redrawMsTotal();
  const double redrawCpuMs0 = w.redrawCpuMsTotal();
  QElapsedTimer clock;
  clock.start();
  const double liveFps =
      framesPerSecond(w, counter, (seconds + 600) * 1000, [&w] { return !w.controller()->isRunning(); });
  const double wallS = static_cast<double>(clock.elapsed()) / 1000.0;
  const double redraws = static_cast<double>(w.redrawCount() - redraws0);
  const double redrawMs = w.redrawMsTotal() - redrawMs0;
  const double redrawCpuMs = w.redrawCpuMsTotal() - redrawCpuMs0;
  // Where the redraws' time went: each part's milliseconds over the whole run.
  auto byPart = [&w](bool cpu) {
    QString parts;
    for (const auto& [name, ms] : w.redrawMsByPart(cpu))
      parts += QStringLiteral("%1\"%2\": %3").arg(parts.isEmpty() ? "" : ", ", name).arg(ms, 0, 'f', 1);
    return parts;
  };
  std::printf(
      "{\"window_fps\": %.1f, \"idle_fps\": %.1f, \"fps_ratio\": %.3f, \"redraws_per_s\": %.2f, "
      "\"redraw_ms_mean\": %.2f, \"redraw_ms_max\": %.2f, \"redraw_ms_by_part\": {%s}, \"redraw_budget_use\": %.3f, "
      "\"redraw_cpu_ms_mean\": %.2f, \"redraw_budget_use_cpu\": %.3f, "
      "\"redraw_cpu_ms_by_part\": {%s}, \"reset_ms\": %.1f, \"window_wall_s\": %.1f, "
      "\"status\": \"%s\"}\n",
      liveFps, idleFps, idleFps > 0 ? liveFps / idleFps : 0.0, redraws / wallS, redraws > 0 ? redrawMs / redraws : 0.0,
      w.redrawMsMax(), qPrintable(byPart(false)), redrawMs / (wallS * 1000.0 * w.redrawShare()),
      redraws > 0 ? redrawCpuMs / redraws : 0.0, redrawCpuMs / (wallS * 1000.0 * w.redrawShare()),
      qPrintable(byPart(true)), w.resetMs(), wallS, qPrintable(w.lastStatus()));
  return w.lastStatus() == "finished" ? 0 : 1;
}
