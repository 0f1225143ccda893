// SPDX-License-Identifier: GPL-3.0-or-later
// The window at many ranks, offscreen: above eight ranks the charts draw the spread over the
// ranks (Note [Rank spread]), a heatmap shows step time by rank and step, the rank table
// sorts, groups, filters and marks the ranks that stand out; up to eight ranks the charts
// draw a line per rank, as ever. A run of 64 synthetic ranks (Note [Synthetic ranks]) with
// one rank slowed shows that rank as the hot row of the heatmap and names it.
#include <qcustomplot.h>
#include <QCheckBox>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTableWidget>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/profile.h"
#include "common/record.h"
#include "ui/accuracy_panel.h"
#include "ui/loss_panel.h"
#include "ui/main_window.h"
#include "ui/metric_chart.h"
#include "ui/rank_spread.h"
#include "ui/rank_table.h"
#include "ui/run_controller.h"
#include "ui/step_heatmap.h"
#include "ui/step_split_chart.h"
#include "ui/throughput_panel.h"

using namespace ptw;

namespace {

core::Record step(int rank, std::int64_t s, double loss, double samplesPerS, double stepMs) {
  core::Record r;
  r.kind = core::Record::Kind::Step;
  r.step.rank = rank;
  r.step.step = s;
  r.step.loss = loss;
  r.step.samplesPerS = samplesPerS;
  r.step.stepMs = stepMs;
  r.step.computeMs = stepMs;
  return r;
}

ui::LiveRun liveRun(int ranks) {
  ui::LiveRun run{core::defaultProfile(), ranks, {}};
  for (int r = 0; r < ranks; ++r) run.names << QString("rank %1").arg(r);
  return run;
}

// The ranks of `chart`'s graphs that hold points and are named for a rank ("rank 13").
std::set<int> rankLines(const ui::MetricChart* chart) {
  std::set<int> out;
  for (int i = 0; i < chart->plot()->graphCount(); ++i) {
    const QCPGraph* g = chart->plot()->graph(i);
    if (g->dataCount() > 0 && g->name().startsWith("rank ")) out.insert(g->name().mid(5).section(' ', 0, 0).toInt());
  }
  return out;
}

bool hasBand(const ui::MetricChart* chart) {
  for (int i = 0; i < chart->plot()->graphCount(); ++i)
    if (chart->plot()->graph(i)->channelFillGraph() && chart->plot()->graph(i)->dataCount() > 0) return true;
  return false;
}

// The pixel of `chart`'s graph named `name` at its middle point (the last may lie on the
// axis rect's edge).
QPointF pointOf(const ui::MetricChart* chart, const QString& name) {
  for (int i = 0; i < chart->plot()->graphCount(); ++i) {
    const QCPGraph* g = chart->plot()->graph(i);
    if (g->name() != name || g->dataCount() == 0 || !g->visible()) continue;
    const auto middle = g->data()->at(g->dataCount() / 2);
    return {g->keyAxis()->coordToPixel(middle->key), g->valueAxis()->coordToPixel(middle->value)};
  }
  return {-1, -1};
}

}  // namespace

class TestScaleView : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName("ptw-tests");
    QCoreApplication::setApplicationName("test_scale_view");
    QSettings().clear();
  }

  // Each window of steps is summarised once every rank has reported it: the mean, p10, p90,
  // min and max of the ranks' values; a rank that stays far from the others is named.
  void theSpreadSummarisesEachStepOverTheRanks() {
    ui::RankSpread spread;
    spread.reset(10);
    std::vector<ui::RankSpread::Done> done;
    for (std::int64_t s = 1; s <= 20; ++s)
      for (int r = 0; r < 10; ++r) {
        spread.add(r, s, s, r == 9 ? 100.0 : r, 1, done);
        if (r < 9) QCOMPARE(done.size(), std::size_t(s - 1));  // not before the last rank
      }
    QCOMPARE(done.size(), std::size_t(20));
    const auto& d = done.back();
    QCOMPARE(d.first, std::int64_t(20));
    QCOMPARE(d.ranks, 10);
    QCOMPARE(d.mean, (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 100) / 10.0);
    QCOMPARE(d.min, 0.0);
    QCOMPARE(d.max, 100.0);
    QCOMPARE(d.p10, 0.0);  // the nearest rank below: sorted index floor(0.1 × 9)
    QCOMPARE(d.p90, 8.0);  // floor(0.9 × 9) = 8
    QCOMPARE(spread.standouts(3), std::vector<int>{9});
    QCOMPARE(spread.latest(9), 100.0);
    QCOMPARE(spread.recent(9).size(), std::size_t(20));
  }

  // A rank that never reports does not hold every window open: past kMaxOpen the oldest is
  // summarised with the ranks it has, so memory stays the same however long the run.
  void theSpreadsMemoryDoesNotGrowWithTheRun() {
    ui::RankSpread spread(64);
    spread.reset(100);
    std::vector<ui::RankSpread::Done> done;
    std::size_t early = 0;
    for (std::int64_t s = 1; s <= 2000; ++s) {                         // one step a window (Note [Step groups])
      for (int r = 0; r < 99; ++r) spread.add(r, s, s, 1.0, 1, done);  // rank 99 is silent
      QVERIFY(spread.openWindows() <= ui::RankSpread::kMaxOpen + 1);
      if (s == 1200) early = spread.memoryBytes();  // its tails and judged windows full
    }
    QVERIFY2(spread.memoryBytes() == early, qPrintable(QString::number(spread.memoryBytes())));
    QVERIFY(done.size() >= 2000 - ui::RankSpread::kMaxOpen - 1);
    QCOMPARE(done.back().ranks, 99);
    QCOMPARE(done.back().mean, 1.0);
  }

  // The heatmap writes only the columns that took steps since its last redraw: fed in batches
  // with a redraw after each, past two merges of its columns, it holds each column's mean
  // step time, computed here from the steps, and a colour range from the least to the most.
  void theHeatmapWritesColumnsAsTheyFill() {
    constexpr int kRanks = 128;           // a row a rank and a pixel a cell: the map colours new columns only
    constexpr std::int64_t kSteps = 300;  // past 120 and 240 columns of a step: two merges
    auto stepMs = [](int r, std::int64_t s) { return 10.0 + r + static_cast<double>(s % 7); };
    ui::StepHeatmap map;
    map.resize(800, 400);
    map.show();
    QVERIFY(QTest::qWaitForWindowExposed(&map));
    map.reset(liveRun(kRanks));
    std::vector<core::Record> batch;
    for (std::int64_t s = 1; s <= kSteps; ++s) {
      for (int r = 0; r < kRanks; ++r) batch.push_back(step(r, s, 1.0, 100.0, stepMs(r, s)));
      if (s % 13 == 0 || s == kSteps) {  // uneven batches, so a column fills over several
        map.add(ui::RecordSpan(batch.data(), batch.data() + batch.size()));
        batch.clear();
        map.refresh();
      }
    }
    auto* data = map.map()->data();  // its cell() is not const
    const std::int64_t width = 4;    // 300 steps in 120 columns: twice merged
    const int used = static_cast<int>((kSteps + width - 1) / width);
    double low = 1e300, high = -1e300;
    for (int r = 0; r < kRanks; ++r)
      for (int c = 0; c < used; ++c) {
        double sum = 0;
        int n = 0;
        for (std::int64_t s = c * width + 1; s <= std::min(kSteps, (c + 1) * width); ++s) sum += stepMs(r, s), ++n;
        const double want = sum / n;
        low = std::min(low, want), high = std::max(high, want);
        QVERIFY2(std::abs(data->cell(c, r) - want) < 1e-3,
                 qPrintable(QString("rank %1 column %2: %3, not %4").arg(r).arg(c).arg(data->cell(c, r)).arg(want)));
      }
    QVERIFY(std::abs(map.map()->dataRange().lower - low) < 1e-3);
    QVERIFY(std::abs(map.map()->dataRange().upper - high) < 1e-3);
    // The x axis shows the columns that hold steps, no more.
    QCOMPARE(map.plot()->xAxis->range().upper, 0.5 + used * width);
    // Drawn, it is the map of a heatmap that took every step at once and coloured every cell.
    ui::StepHeatmap whole;
    whole.resize(map.size());
    whole.show();
    QVERIFY(QTest::qWaitForWindowExposed(&whole));
    whole.reset(liveRun(kRanks));
    for (std::int64_t s = 1; s <= kSteps; ++s)
      for (int r = 0; r < kRanks; ++r) batch.push_back(step(r, s, 1.0, 100.0, stepMs(r, s)));
    whole.add(ui::RecordSpan(batch.data(), batch.data() + batch.size()));
    whole.refresh();
    QCOMPARE(whole.plot()->size(), map.plot()->size());
    QVERIFY(whole.plot()->toPixmap().toImage() == map.plot()->toPixmap().toImage());
  }

  // 4,096 ranks are more than the map's pixel rows: the grid has a row a pixel, each the
  // hottest of its ranks (Note [Heatmap rows]), so one slow rank among them is drawn in the
  // hottest colour wherever it is, and hovering there names it.
  void aSlowRankAmongThousandsIsNeverLost_data() {
    QTest::addColumn<int>("slow");
    for (int r : {0, 1001, 2050, 3333, 4095}) QTest::newRow(qPrintable(QString("rank %1").arg(r))) << r;
  }
  void aSlowRankAmongThousandsIsNeverLost() {
    QFETCH(int, slow);
    constexpr int kRanks = 4096;
    constexpr std::int64_t kSteps = 10;
    auto stepMs = [slow](int r) { return r == slow ? 50.0 : 10.0 + r % 7; };
    ui::StepHeatmap map;
    map.resize(600, 300);
    map.show();
    QVERIFY(QTest::qWaitForWindowExposed(&map));
    map.reset(liveRun(kRanks));
    map.refresh();  // laid out: the grid's rows follow the axis rect's pixels
    std::vector<core::Record> batch;
    for (std::int64_t s = 1; s <= kSteps; ++s)
      for (int r = 0; r < kRanks; ++r) batch.push_back(step(r, s, 1.0, 100.0, stepMs(r)));
    map.add(ui::RecordSpan(batch.data(), batch.data() + batch.size()));
    map.refresh();
    auto* data = map.map()->data();
    const int rows = data->valueSize();
    QCOMPARE(rows, map.plot()->axisRect()->height() - 1);  // the last under the x axis's line
    QVERIFY2(rows < kRanks / 8, qPrintable(QString::number(rows)));
    // Each row holds the most of the ranks whose centres lie in its span of the rank axis.
    for (int row = 0; row < rows; ++row) {
      double want = -1;
      for (int r = 0; r < kRanks; ++r)
        if (static_cast<int>(std::floor((r + 0.5) * rows / kRanks)) == row) want = std::max(want, stepMs(r));
      for (int c = 0; c < kSteps; ++c)
        QVERIFY2(data->cell(c, row) == want,
                 qPrintable(QString("row %1 column %2: %3, not %4").arg(row).arg(c).arg(data->cell(c, row)).arg(want)));
    }
    // Drawn: the slow rank's pixel row is the gradient's hottest colour (looked for along its
    // steps, as the axis's ticks cover a few pixels at the edges).
    const QImage image = map.plot()->toPixmap().toImage();
    const QRgb hot = map.map()->gradient().color(50.0, map.map()->dataRange());
    const QRect rect = map.plot()->axisRect()->rect();
    const int y = std::clamp(static_cast<int>(map.plot()->yAxis->coordToPixel(slow)), rect.top(), rect.bottom());
    int found = 0;
    for (int x = static_cast<int>(map.plot()->xAxis->coordToPixel(1)); x < map.plot()->xAxis->coordToPixel(10); ++x)
      for (int dy = -1; dy <= 1; ++dy) found += image.pixel(x, std::clamp(y + dy, rect.top(), rect.bottom())) == hot;
    QVERIFY2(found > 0, qPrintable(QString("no pixel of rank %1 near y = %2").arg(slow).arg(y)));
    const QString hover = map.hoverText(QPointF(map.plot()->xAxis->coordToPixel(5), y));
    QVERIFY2(hover.startsWith(QString("rank %1,").arg(slow)), qPrintable(hover));
    // Made shorter, the map has fewer rows, and the slow rank is still drawn hot.
    map.resize(600, 200);
    QCoreApplication::processEvents();  // the resize's refresh, queued
    QCOMPARE(data->valueSize(), map.plot()->axisRect()->height() - 1);
    QVERIFY2(data->valueSize() < rows, qPrintable(QString::number(data->valueSize())));
    const QImage shorter = map.plot()->toPixmap().toImage();
    const QRect area = map.plot()->axisRect()->rect();
    const int at = std::clamp(static_cast<int>(map.plot()->yAxis->coordToPixel(slow)), area.top(), area.bottom());
    found = 0;
    for (int x = static_cast<int>(map.plot()->xAxis->coordToPixel(1)); x < map.plot()->xAxis->coordToPixel(10); ++x)
      for (int dy = -1; dy <= 1; ++dy) found += shorter.pixel(x, std::clamp(at + dy, area.top(), area.bottom())) == hot;
    QVERIFY2(found > 0, qPrintable(QString("no pixel of rank %1 near y = %2 at 200 pixels").arg(slow).arg(at)));
  }

  // A chart redraws only what changed (Note [Redraw budget]): a refresh with no new point
  // draws nothing, though its last redraw laid the chart out; a new point draws once, and a
  // new width draws again.
  void aChartWithNothingNewIsNotRedrawn() {
    ui::MetricChart chart(QStringLiteral("loss"));
    chart.resize(600, 300);
    chart.show();
    QVERIFY(QTest::qWaitForWindowExposed(&chart));
    const int series = chart.addSeries(QStringLiteral("mean"), Qt::black);
    for (int s = 1; s <= 50; ++s) chart.append(series, s, 1.0 / s);
    chart.refresh();
    QCoreApplication::processEvents();  // the show's own refresh, queued
    chart.refresh();                    // the first layout (the legend, the axes' labels) narrowed the axis rect
    QSignalSpy replots(chart.plot(), &QCustomPlot::afterReplot);
    for (int i = 0; i < 3; ++i) chart.refresh();
    QCOMPARE(replots.count(), 0);
    chart.append(series, 51, 0.01);
    chart.refresh();
    chart.refresh();
    QCOMPARE(replots.count(), 1);
    QCOMPARE(chart.drawnPoints(series), 51);
    chart.resize(400, 300);
    QCoreApplication::processEvents();  // the resize's refresh, queued, and its new layout's
    const int resized = replots.count();
    QVERIFY2(resized > 1, qPrintable(QString::number(resized)));
    QCOMPARE(chart.plot()->graph(0)->dataCount(), 51);
    chart.refresh();
    QCOMPARE(replots.count(), resized);
  }

  // Up to 8 ranks the loss and throughput charts keep a line per rank, named in the legend;
  // above, the band, the range and the mean, and no rank's line until one stands out. The
  // legend of 16 ranks holds a few entries, none cut short.
  void upToEightRanksALinePerRankAboveThatTheSpread_data() {
    QTest::addColumn<int>("ranks");
    QTest::newRow("8 ranks") << 8;
    QTest::newRow("16 ranks") << 16;
  }
  void upToEightRanksALinePerRankAboveThatTheSpread() {
    QFETCH(int, ranks);
    ui::LossPanel loss;
    ui::ThroughputPanel throughput;
    for (ui::MetricChart* c : std::initializer_list<ui::MetricChart*>{&loss, &throughput}) {
      c->resize(800, 450);
      c->show();
      QVERIFY(QTest::qWaitForWindowExposed(c));
    }
    const ui::LiveRun run = liveRun(ranks);
    loss.reset(run);
    throughput.reset(run);
    std::vector<core::Record> records;
    for (std::int64_t s = 1; s <= 60; ++s)
      for (int r = 0; r < ranks; ++r) records.push_back(step(r, s, 1.0 / s + 0.01 * r, 1000 + r, 10));
    const ui::RecordSpan span(records.data(), records.data() + records.size());
    loss.add(span);
    throughput.add(span);
    loss.refresh();
    throughput.refresh();
    if (ranks <= ui::kAggregateAbove) {
      std::set<int> all;
      for (int r = 0; r < ranks; ++r) all.insert(r);
      QCOMPARE(rankLines(&loss), all);
      QCOMPARE(rankLines(&throughput), all);
      QVERIFY(!hasBand(&loss));
      QCOMPARE(loss.pointCount(0), std::size_t(60));
    } else {
      QVERIFY(rankLines(&loss).empty());
      QVERIFY(rankLines(&throughput).empty());
      QVERIFY(hasBand(&loss) && hasBand(&throughput));
      QVERIFY(loss.plot()->legend->itemCount() <= 6);
      // Every entry's text is whole, also on a narrow chart: no name cut to "ranl".
      for (int width : {800, 330}) {
        throughput.resize(width, 450);
        QTRY_COMPARE(throughput.plot()->width(), width);
        throughput.fit();
        auto* legend = throughput.plot()->legend;
        for (int i = 0; i < legend->itemCount(); ++i) {
          auto* item = qobject_cast<QCPPlottableLegendItem*>(legend->item(i));
          if (!item) continue;  // an empty cell of the legend's grid
          const int text = QFontMetrics(item->font()).horizontalAdvance(item->plottable()->name());
          QVERIFY2(item->outerRect().width() > text && item->outerRect().right() <= width,
                   qPrintable(QString("%1 at %2 wide").arg(item->plottable()->name()).arg(width)));
        }
      }
    }
  }

  // A validation loss of 40 beside a training loss near 1 does not flatten the training
  // curve; a single validation point (at the end) is not drawn on an axis of one step.
  void axesFitWhatIsRead() {
    ui::LossPanel loss;
    loss.resize(800, 450);
    loss.show();
    QVERIFY(QTest::qWaitForWindowExposed(&loss));
    loss.reset(liveRun(1));
    std::vector<core::Record> records;
    for (std::int64_t s = 1; s <= 300; ++s) {
      records.push_back(step(0, s, 1.0 + 0.05 * std::sin(s * 0.3), 100, 10));
      if (s % 100 == 0) {
        core::Record v;
        v.kind = core::Record::Kind::Validation;
        v.step.step = s;
        v.valLoss = 40.0 - s / 10.0;
        records.push_back(v);
      }
    }
    loss.add({records.data(), records.data() + records.size()});
    loss.refresh();
    const QCPRange y = loss.plot()->yAxis->range();
    QVERIFY2(y.upper < 1.2 + 0.5 * 0.2 + 0.2 && y.lower > 0.5, qPrintable(QString("%1..%2").arg(y.lower).arg(y.upper)));
    ui::MetricChart accuracy("val accuracy (%)");
    accuracy.resize(500, 300);
    accuracy.show();
    QVERIFY(QTest::qWaitForWindowExposed(&accuracy));
    accuracy.addSeries("validation", Qt::black);
    accuracy.append(0, 3000, 80);
    accuracy.refresh();
    const QCPRange x = accuracy.plot()->xAxis->range();
    QVERIFY2(x.lower <= 0 && x.upper >= 3000, qPrintable(QString("%1..%2").arg(x.lower).arg(x.upper)));
    const QVector<QString> labels = accuracy.plot()->xAxis->tickVectorLabels();
    QCOMPARE(QSet<QString>(labels.begin(), labels.end()).size(), labels.size());  // no "3k, 3k, 3k"
    // A run that ends without a validation point shows why, not empty axes.
    ui::AccuracyPanel panel;
    ui::LiveRun run = liveRun(1);
    run.profile.data.kind = "synthetic-classification";
    run.profile.data.valFraction = 0.2;
    panel.reset(run);
    QCOMPARE(panel.currentWidget(), static_cast<QWidget*>(panel.chart()));
    panel.finish();
    QCOMPARE(panel.currentWidget(), static_cast<QWidget*>(panel.note()));
    QVERIFY2(panel.note()->text().contains("no validation point"), qPrintable(panel.note()->text()));
  }

  // The table's samples/s is the last seconds' rate, not the last record's: a rank that sends
  // a fast group and a slow one in turn (Note [Step groups]) reads steadily.
  void theTablesRateIsSmoothed() {
    ui::RankTable table;
    table.reset(liveRun(2));
    std::vector<core::Record> records;
    for (int k = 0; k < 10; ++k) {
      // 100 samples in 10 ms, then 100 samples in 590 ms: 200 samples each 600 ms.
      records.push_back(step(0, 2 * k + 1, 1, 10000, 10));
      records.push_back(step(0, 2 * k + 2, 1, 100.0 / 0.59, 590));
    }
    table.add({records.data(), records.data() + records.size()});
    table.refresh();
    const double shown = table.item(table.rowOf(0), 4)->data(Qt::UserRole).toDouble();
    QVERIFY2(std::abs(shown - 2000.0 / 6.0) < 1e-6, qPrintable(QString::number(shown)));
  }

  // The table sorts by a column's numbers, groups by host, filters, and marks the ranks that
  // stand out; a sorted table still says which rank a row is.
  void theRankTableSortsGroupsFiltersAndMarks() {
    ui::RankTable table;
    table.resize(1000, 400);
    ui::LiveRun run = liveRun(12);
    run.profile.hosts.launcher = "ssh";
    run.profile.hosts.hosts = {"nodeB:6", "nodeA:6"};
    table.reset(run);
    std::vector<core::Record> records;
    for (int r = 0; r < 12; ++r) records.push_back(step(r, 1, 1, 100.0 * ((r * 7) % 12 + 1), 10));
    table.add({records.data(), records.data() + records.size()});
    table.refresh();
    table.sortByColumn(4, Qt::DescendingOrder);  // samples/s, as numbers: 1,200 above 900
    double last = 1e300;
    for (int row = 0; row < 12; ++row) {
      const double v = table.item(row, 4)->data(Qt::UserRole).toDouble();
      QVERIFY(v <= last);
      last = v;
      QCOMPARE(table.rowOf(table.rankAt(row)), row);
    }
    QCOMPARE(table.rankAt(0), 5);  // (5 × 7) % 12 + 1 = 12: the fastest
    table.setGroupedByHost(true);
    for (int row = 0; row < 12; ++row) QCOMPARE(table.rankAt(row), row < 6 ? row + 6 : row - 6);  // nodeA first
    table.setGroupedByHost(false);
    table.markStraggler(7, "rank 7: 2.0× the median step for 5 s, compute 90%");
    table.setOutliers({{3, "samples/s"}});
    QCOMPARE(table.markOf(7), QString("straggler"));
    QCOMPARE(table.markOf(3), QString("outlier: samples/s"));
    QVERIFY(table.item(table.rowOf(7), 0)->background().color() != QColor());
    table.setFilter("straggler");
    for (int r = 0; r < 12; ++r) QCOMPARE(table.isRowHidden(table.rowOf(r)), r != 7);
    table.setFilter("nodeA");
    for (int r = 0; r < 12; ++r) QCOMPARE(table.isRowHidden(table.rowOf(r)), r < 6);
    table.setFilter("3");
    for (int r = 0; r < 12; ++r) QCOMPARE(table.isRowHidden(table.rowOf(r)), r != 3);
    table.setFilter("");
    for (int r = 0; r < 12; ++r) QVERIFY(!table.isRowHidden(r));
  }

  // 64 synthetic ranks, rank 13 three times slower from step 20: the charts draw the band and
  // no rank's line but rank 13's, named; the heatmap has a row per rank and rank 13's is the
  // hottest; the banner and the table name it; hovering names it. At the window's default
  // size the table's last message is readable.
  void sixtyFourRanksShowTheSpreadAndTheSlowRank() {
    QTemporaryDir runs;
    ui::MainWindow w;
    w.setConfirmations(false);
    w.setRunsDirectory(runs.path());
    w.resize(1600, 1000);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.setProfile(core::applyOverrides(core::defaultProfile(), {"strategy.kind=synthetic", "strategy.ranks=64",
                                                               "strategy.device=cpu", "hyper.max_steps=300"}));
    QVERIFY2(w.blockingReason().isEmpty(), qPrintable(w.blockingReason()));
    w.controller()->setWorkerArgs({"--synthetic-rate=100", "--fault=slow-at-step:13:20:3"});
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("finished"), 60000);
    auto* throughput = static_cast<ui::ThroughputPanel*>(w.throughputChart());
    auto* loss = static_cast<ui::LossPanel*>(w.lossChart());
    QVERIFY(hasBand(loss) && hasBand(throughput));
    QVERIFY2(rankLines(loss).size() <= 3, qPrintable(QString::number(rankLines(loss).size())));
    QCOMPARE(rankLines(throughput), std::set<int>{13});
    QCOMPARE(throughput->standouts(), std::vector<int>{13});
    // The heatmap: a row per rank, rank 13's the hottest.
    QVERIFY(w.heatmap()->isVisible());
    QCOMPARE(w.heatmap()->map()->data()->valueSize(), 64);
    int hottest = 0;
    for (int r = 1; r < 64; ++r)
      if (w.heatmap()->rowMean(r) > w.heatmap()->rowMean(hottest)) hottest = r;
    QCOMPARE(hottest, 13);
    auto* hm = w.heatmap()->plot();
    const QPointF cell(hm->xAxis->coordToPixel(hm->xAxis->range().upper - 2), hm->yAxis->coordToPixel(13));
    QVERIFY2(w.heatmap()->hoverText(cell).startsWith("rank 13,"), qPrintable(w.heatmap()->hoverText(cell)));
    // Hovering the named line names the rank.
    const QPointF at = pointOf(throughput, "rank 13");
    QVERIFY(at.x() >= 0);
    QVERIFY2(throughput->hoverText(at).startsWith("rank 13:"), qPrintable(throughput->hoverText(at)));
    // The banner and the table.
    QVERIFY(w.stragglerBanner()->isVisible());
    QVERIFY2(w.stragglerBanner()->text().contains("rank 13"), qPrintable(w.stragglerBanner()->text()));
    auto* table = static_cast<ui::RankTable*>(w.rankTable());
    QVERIFY2(table->markOf(13).contains("straggler") && table->markOf(13).contains("outlier"),
             qPrintable(table->markOf(13)));
    QCOMPARE(table->rowCount(), 64);
    // The last message is in view whole at the window's size, at least 240 pixels of it.
    QVERIFY2(table->columnWidth(7) >= 240, qPrintable(QString::number(table->columnWidth(7))));
    QVERIFY2(table->columnViewportPosition(7) + table->columnWidth(7) <= table->viewport()->width(),
             qPrintable(QString("%1 + %2 > %3")
                            .arg(table->columnViewportPosition(7))
                            .arg(table->columnWidth(7))
                            .arg(table->viewport()->width())));
    // The redraws' time by part adds up to their time, of the clock and of the CPU; the
    // thread's CPU time in them is at most their time.
    QVERIFY(w.redrawCount() > 0);
    for (bool cpu : {false, true}) {
      double sum = 0;
      for (const auto& [part, ms] : w.redrawMsByPart(cpu)) sum += ms;
      const double total = cpu ? w.redrawCpuMsTotal() : w.redrawMsTotal();
      QVERIFY2(std::abs(sum - total) <= 1e-6 * total, qPrintable(QString("%1 by part, %2 in all").arg(sum).arg(total)));
    }
    QVERIFY(w.redrawCpuMsTotal() > 0);
    QVERIFY2(w.redrawCpuMsTotal() <= w.redrawMsTotal() + 0.01 * static_cast<double>(w.redrawCount()),
             qPrintable(QString("%1 > %2").arg(w.redrawCpuMsTotal()).arg(w.redrawMsTotal())));
    // The step split's five bars stand for the ranks; the slowest is rank 13.
    QCOMPARE(w.splitChart()->shownRanks().size(), std::size_t(5));
    QCOMPARE(w.splitChart()->shownRanks().back(), 13);
  }
};

QTEST_MAIN(TestScaleView)
#include "test_scale_view.moc"
