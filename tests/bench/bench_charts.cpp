// SPDX-License-Identifier: GPL-3.0-or-later
// Chart benchmark: 8 ranks × 4 series at 2,000 records/s each, ingested the way the window
// does (a batch every 40 ms), up to the equivalent of a one-hour run (7.2M records per
// series). Prints records/s ingested, frames/s redrawn at the end, points drawn and the
// display memory, next to a baseline measured in the same run: QCustomPlot handed every
// record (100k points per graph, far short of an hour).
//
//   QT_QPA_PLATFORM=offscreen build/bin/bench_charts [seconds of run, default 3600] [smoothing, default 0.6]
#include <qcustomplot.h>
#include <QApplication>
#include <QElapsedTimer>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ui/metric_chart.h"

namespace {

constexpr int kRanks = 8, kSeriesPerRank = 4, kSeries = kRanks * kSeriesPerRank;
constexpr int kRate = 2000;  // records per second per series
constexpr int kFrameMs = 40;

double value(int series, long step) { return std::exp(-step * 1e-6) + 0.05 * std::sin(step * 0.01 + series); }

// `frame` draws one frame completely (layers and widget).
double framesPerSecond(const std::function<void()>& frame, int frames) {
  QElapsedTimer t;
  t.start();
  for (int i = 0; i < frames; ++i) frame();
  return frames * 1000.0 / std::max<qint64>(1, t.elapsed());
}

}  // namespace

int main(int argc, char** argv) {
  if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  const long seconds = argc > 1 ? std::atol(argv[1]) : 3600;
  const long steps = seconds * kRate;

  ptw::ui::MetricChart chart("loss");
  chart.resize(1600, 900);
  chart.show();
  for (int s = 0; s < kSeries; ++s) chart.addSeries(QString("s%1").arg(s), QColor::fromHsv(s * 11 % 360, 200, 200));
  chart.setSmoothing(argc > 2 ? std::atof(argv[2]) : 0.6);
  chart.setIgnoreOutliers(true);  // as the window's live charts
  const std::size_t memoryBefore = chart.memoryBytes();

  // Ingest as the window does: each 40 ms frame brings 80 records per series; the chart is
  // redrawn once a second of simulated time here (the window redraws every frame; the
  // frame rate is measured separately below).
  const long perFrame = kRate * kFrameMs / 1000;
  qint64 ingestNs = 0;
  long step = 0;
  std::size_t memoryAtMinute = 0;
  std::vector<double> values(static_cast<std::size_t>(perFrame * kSeries));
  for (long frame = 0; step < steps; ++frame) {
    if (memoryAtMinute == 0 && step >= 60L * kRate) memoryAtMinute = chart.memoryBytes();
    // The frame's records are made before the clock starts: `exp` and `sin` cost more than
    // taking a record.
    const long first = step, n = std::min(perFrame, steps - step);
    for (long k = 0; k < n; ++k)
      for (int s = 0; s < kSeries; ++s) values[static_cast<std::size_t>(k * kSeries + s)] = value(s, first + k);
    QElapsedTimer t;
    t.start();
    for (long k = 0; k < n; ++k, ++step)
      for (int s = 0; s < kSeries; ++s)
        chart.append(s, static_cast<double>(step + 1), values[static_cast<std::size_t>(k * kSeries + s)]);
    ingestNs += t.nsecsElapsed();
    if (frame % 25 == 0) chart.refresh();
  }
  const double ingestS = ingestNs / 1e9;
  const double records = static_cast<double>(steps) * kSeries;

  // Frames at the end of the run, with live data still arriving (80 records per series a frame).
  const auto liveFrame = [&] {
    for (long k = 0; k < perFrame; ++k, ++step)
      for (int s = 0; s < kSeries; ++s) chart.append(s, static_cast<double>(step + 1), value(s, step));
    chart.refresh();          // summaries to graph data, layers drawn
    chart.plot()->repaint();  // and onto the widget, as the baseline's immediate refresh does
  };
  const double fps = framesPerSecond(liveFrame, 60);  // y fitted to all but outliers, as the window draws
  chart.setIgnoreOutliers(false);
  const double fpsAll = framesPerSecond(liveFrame, 60);
  chart.setIgnoreOutliers(true);
  int drawn = 0;
  for (int s = 0; s < kSeries; ++s) drawn += chart.drawnPoints(s);

  // Baseline: every record handed to QCustomPlot (adaptive sampling on, antialiasing off).
  QCustomPlot raw;
  raw.resize(1600, 900);
  raw.setNotAntialiasedElements(QCP::aeAll);
  const int basePoints = 100'000;
  for (int s = 0; s < kSeries; ++s) {
    QVector<double> x(basePoints), y(basePoints);
    for (int i = 0; i < basePoints; ++i) {
      x[i] = i + 1;
      y[i] = value(s, i);
    }
    raw.addGraph()->setData(x, y, true);
  }
  raw.rescaleAxes();
  const double baseFps = framesPerSecond([&] { raw.replot(QCustomPlot::rpImmediateRefresh); }, 10);

  std::printf(
      "chart benchmark: %d series (%d ranks x %d), %d records/s each, %ld s of run (%.1fM records per series)\n",
      kSeries, kRanks, kSeriesPerRank, kRate, seconds, steps / 1e6);
  std::printf("  ingest:          %.1fM records/s (%.2f s for %.0fM records; the run produces %.0f records/s)\n",
              records / ingestS / 1e6, ingestS, records / 1e6, static_cast<double>(kSeries) * kRate);
  std::printf("  replot at end:   %.1f frames/s with live data arriving (target >= 30); %d points drawn\n", fps, drawn);
  std::printf("                   %.1f frames/s with the y axis fitted to every point, not all but outliers (%.2fx)\n",
              fpsAll, fps / fpsAll);
  std::printf("  display memory:  %.2f MB empty, %.2f MB after 1 minute of run, %.2f MB at the end\n",
              memoryBefore / 1e6, memoryAtMinute / 1e6, chart.memoryBytes() / 1e6);
  std::printf("  baseline:        QCustomPlot with every record, %dk points per graph: %.1f frames/s\n",
              basePoints / 1000, baseFps);
  std::printf("  ratio:           %.1fx the baseline's frame rate at %.0fx its data\n", fps / baseFps,
              static_cast<double>(steps) / basePoints);
  return 0;
}
