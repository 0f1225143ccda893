// SPDX-License-Identifier: GPL-3.0-or-later
// Stragglers (Note [Stragglers]): the detector on made-up sequences of steps, then the slow
// rank of a real DDP run and of a synthetic run of many ranks named, and only it; and a
// synthetic run of 256 ranks storing every record its ranks sent (Note [Synthetic ranks]).
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QThread>
#include <QtTest>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "launch/run_store.h"
#include "launch/straggler_detector.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

// A run of `ranks` ranks in lock-step, each step 10 ms of its own time (data 2, compute 7,
// opt 1) with a little noise, and 2 ms of comm; rank `slow` takes `factor` times its own
// time from step `from` for `lasting` steps (-1: to the end), its excess in its data time.
struct Sequence {
  int ranks = 8;
  int slow = -1;
  std::int64_t from = 0;
  double factor = 1;
  std::int64_t lasting = -1;
  bool waitersComm = false;  ///< DDP: the others wait for the slow rank in their comm time
  std::int64_t group = 1;    ///< steps a record
  bool splitReported = true;
  std::int64_t steps = 400;
};

double noise(int rank, std::int64_t step) {  // deterministic, within ±5%
  const std::uint64_t h = (static_cast<std::uint64_t>(rank) * 2654435761u + static_cast<std::uint64_t>(step) * 40503u);
  return 0.95 + 0.1 * static_cast<double>(h % 1000) / 1000.0;
}

bool slowAt(const Sequence& q, int rank, std::int64_t step) {
  return rank == q.slow && step >= q.from && (q.lasting < 0 || step < q.from + q.lasting);
}

StepRecord stepOf(const Sequence& q, int rank, std::int64_t step) {
  StepRecord s;
  s.rank = rank;
  s.step = step;
  const double n = noise(rank, step);
  s.dataMs = 2 * n, s.computeMs = 7 * n, s.optMs = 1 * n, s.commMs = 2;
  if (slowAt(q, rank, step)) s.dataMs += (q.factor - 1) * 10 * n;
  const bool anySlow = q.slow >= 0 && slowAt(q, q.slow, step);
  if (q.waitersComm && anySlow && rank != q.slow) s.commMs += (q.factor - 1) * 10;
  s.stepMs = s.dataMs + s.computeMs + s.optMs + s.commMs;
  if (!q.splitReported) s.dataMs = s.computeMs = s.optMs = s.commMs = std::nan("");
  s.loss = 1;
  return s;
}

// Feeds the sequence step by step (10 ms a step), checking every 10 steps; returns the ranks
// named, and in `at` the step each was named at.
std::vector<int> feed(const Sequence& q, StragglerDetector& d, std::map<int, std::int64_t>& at) {
  std::vector<int> named;
  std::vector<StepGroup> open(static_cast<std::size_t>(q.ranks));
  for (std::int64_t step = 1; step <= q.steps; ++step) {
    const double now = static_cast<double>(step) * 0.012;
    for (int r = 0; r < q.ranks; ++r) {
      Record rec;
      rec.step = stepOf(q, r, step);
      if (q.group > 1) {
        StepGroup& g = open[static_cast<std::size_t>(r)];
        g.add(rec.step);
        if (g.count < q.group) continue;
        rec.kind = Record::Kind::Group;
        rec.group = g;
        g = StepGroup{};
      }
      d.add(rec, now);
    }
    if (step % 10 == 0)
      for (const Straggler& s : d.check(now)) {
        named.push_back(s.rank);
        at[s.rank] = step;
      }
  }
  return named;
}

struct Outcome {
  int code = -1;
  QString out, err;
  QJsonObject summary;
};

// A headless run with its runs in `runs`, and its summary.
Outcome runPtw(const QStringList& args, const QTemporaryDir& runs) {
  QProcess p;
  const QString summary = runs.filePath("summary.json");
  p.start(test::binDir() + "/ptw", QStringList{"--headless", "--runs-dir", runs.path(), "--summary", summary} + args);
  if (!p.waitForFinished(120000)) {
    p.kill();
    p.waitForFinished();
  }
  Outcome o{p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
            QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError()),
            {}};
  QFile f(summary);
  if (f.open(QIODevice::ReadOnly)) o.summary = QJsonDocument::fromJson(f.readAll()).object();
  return o;
}

std::vector<int> stragglerRanks(const QJsonObject& summary) {
  std::vector<int> ranks;
  for (const auto& s : summary["stragglers"].toArray()) ranks.push_back(s.toObject()["rank"].toInt());
  return ranks;
}

}  // namespace

Q_DECLARE_METATYPE(Sequence)

class TestStragglers : public QObject {
  Q_OBJECT
 private slots:
  // The detector names the rank whose own time grew, and no other, within its window.
  void namesTheSlowRank_data() {
    QTest::addColumn<Sequence>("sequence");
    QTest::addColumn<QList<int>>("expected");
    Sequence q;
    QTest::newRow("all alike") << q << QList<int>{};
    q.slow = 5, q.from = 100, q.factor = 1.8;
    QTest::newRow("one rank 1.8x from step 100") << q << QList<int>{5};
    q.factor = 1.2;
    QTest::newRow("1.2x: under the factor") << q << QList<int>{};
    q.factor = 2, q.lasting = 10;
    QTest::newRow("slow for 10 steps: less than the window") << q << QList<int>{};
    q.lasting = -1, q.waitersComm = true;
    QTest::newRow("DDP: the others wait in comm") << q << QList<int>{5};
    q.from = 1;
    QTest::newRow("slow from the first step") << q << QList<int>{5};
    q.from = 100, q.group = 16;
    QTest::newRow("steps in groups of 16") << q << QList<int>{5};
    q.group = 1, q.splitReported = false, q.waitersComm = false;
    QTest::newRow("no split reported: the step time") << q << QList<int>{5};
    q.ranks = 2, q.slow = 1, q.splitReported = true;
    QTest::newRow("two ranks") << q << QList<int>{1};
  }
  void namesTheSlowRank() {
    QFETCH(Sequence, sequence);
    QFETCH(QList<int>, expected);
    StragglerDetector d(sequence.ranks);
    std::map<int, std::int64_t> at;
    const std::vector<int> named = feed(sequence, d, at);
    QCOMPARE(QList<int>(named.begin(), named.end()), expected);
    const StragglerOptions defaults;
    for (int r : named) {
      // Named within the window of its first slow step (checked every 10 steps).
      QVERIFY2(at[r] <= sequence.from + defaults.windowSteps + 10, qPrintable(QString::number(at[r])));
      QCOMPARE(d.named().size(), std::size_t(1));
      const Straggler& s = d.named().front();
      // The time of its slow steps in the window: at least half the window, each of its slow
      // steps' time (comm included).
      QVERIFY2(s.forS >= defaults.windowSteps / 2 * (10 * sequence.factor + 2) * 0.95 / 1000,
               qPrintable(QString::number(s.forS)));
      if (sequence.splitReported) {
        if (sequence.ranks > 2)  // with two, the median is halfway to the slow one
          QVERIFY2(std::abs(s.factor - sequence.factor) < 0.15, qPrintable(QString::number(s.factor)));
        // Its excess is in its data time: 8 + 2 of its 18 ms.
        QCOMPARE(s.phase, std::string("data"));
        QVERIFY2(std::abs(s.phaseShare - (2 + 10 * (sequence.factor - 1)) / (10 * sequence.factor)) < 0.05,
                 qPrintable(QString::number(s.phaseShare)));
      }
    }
  }

  // Times nobody reported (NaN) are passed over: a rank with only NaN reports is never judged,
  // and does not move the median.
  void passesOverTimesNotReported() {
    StragglerDetector d(3, StragglerOptions().setWindowSteps(10));
    for (std::int64_t step = 1; step <= 30; ++step) {
      for (int r = 0; r < 3; ++r) {
        Record rec;
        rec.step.rank = r;
        rec.step.step = step;
        const double nan = std::nan("");
        rec.step.stepMs = r == 2 ? nan : 10;
        rec.step.dataMs = rec.step.computeMs = rec.step.optMs = rec.step.commMs = nan;
        d.add(rec, static_cast<double>(step));
      }
    }
    QVERIFY(d.check(31).empty());
    QVERIFY(d.named().empty());
  }

  void messageSaysWhereTheTimeGoes_data() {
    QTest::addColumn<QString>("host");
    QTest::addColumn<double>("forS");
    QTest::addColumn<QString>("expected");
    QTest::newRow("a host") << "node5" << 40.2
                            << QString::fromUtf8("rank 37 on node5: 1.8× the median step for 40 s, data 70%");
    QTest::newRow("this machine") << "" << 2.25
                                  << QString::fromUtf8("rank 37: 1.8× the median step for 2.2 s, data 70%");
  }
  void messageSaysWhereTheTimeGoes() {
    QFETCH(QString, host);
    QFETCH(double, forS);
    QFETCH(QString, expected);
    Straggler s;
    s.rank = 37, s.host = host.toStdString(), s.factor = 1.84, s.forS = forS, s.phase = "data", s.phaseShare = 0.7;
    QCOMPARE(QString::fromStdString(stragglerMessage(s)), expected);
  }

  // A real DDP run of 4 CPU ranks, rank 2 slowed from step 100: rank 2 is named, in the
  // progress and the summary, with its excess in its data time; the others, which wait for
  // it in the all-reduce, are not. Its records come every 250 ms (Note [Step groups]), which
  // may be all its steps at once: how soon it is named is the unit rows' to pin, but never
  // before it slowed.
  void namesTheSlowRankOfADdpRun() {
    QTemporaryDir runs;
    const std::int64_t from = 100;
    const Outcome o = runPtw({"--set", "strategy.ranks=4", "--set", "hyper.max_steps=400", "--worker-arg",
                              QString("--fault=slow-at-step:2:%1:4").arg(from)},
                             runs);
    QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
    // Only rank 2 where every rank has a core of its own. With fewer cores than ranks (CI's
    // 2), the ranks that wait for rank 2 share the cores it leaves, and one the scheduler keeps
    // starving is slower in its own compute: a straggler too, by less, and in compute. A rank
    // named for its waiting (comm) never is.
    QJsonObject s;
    for (const auto& v : o.summary["stragglers"].toArray()) {
      const QJsonObject one = v.toObject();
      if (one["rank"].toInt() == 2) {
        s = one;
        continue;
      }
      QVERIFY2(QThread::idealThreadCount() < 4 && one["phase"].toString() == "compute",
               qPrintable(QJsonDocument(o.summary).toJson()));
    }
    QVERIFY2(!s.isEmpty(), qPrintable(QJsonDocument(o.summary).toJson()));
    for (const auto& v : o.summary["stragglers"].toArray())
      QVERIFY(v.toObject()["rank"].toInt() == 2 || v.toObject()["factor"].toDouble() < s["factor"].toDouble());
    QCOMPARE(s["phase"].toString(), QString("data"));
    QVERIFY2(s["factor"].toDouble() > StragglerOptions().factor, qPrintable(QString::number(s["factor"].toDouble())));
    QVERIFY2(s["step"].toInt() >= from, qPrintable(QString::number(s["step"].toInt())));
    QVERIFY2(o.out.contains("ptw: warning: straggler: rank 2:"), qPrintable(o.out));
    // The suite's largest run of real local ranks says how long they took to start: each
    // rank's first record came after the launch and before the run's end.
    const QJsonObject started = o.summary["ranks_started_s"].toObject();
    QVERIFY2(started["first"].toDouble() > 0 && started["first"].toDouble() <= started["last"].toDouble() &&
                 started["last"].toDouble() < o.summary["wall_s"].toDouble(),
             qPrintable(QJsonDocument(o.summary).toJson()));
    QVERIFY2(o.out.contains("ptw: ranks started in "), qPrintable(o.out));
  }

  // 256 synthetic ranks in one process: every step record their process counted as sent is in
  // the store, each rank's max_steps of them; the one slowed is named, and only it.
  void syntheticRanksStoreEveryRecord() {
    QTemporaryDir runs;
    const int ranks = 256, steps = 100;
    const Outcome o = runPtw({"--set", "strategy.kind=synthetic", "--set", QString("strategy.ranks=%1").arg(ranks),
                              "--set", QString("hyper.max_steps=%1").arg(steps), "--worker-arg", "--synthetic-rate=50",
                              "--worker-arg", "--fault=slow-at-step:7:20:3"},
                             runs);
    QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
    QFile log(o.summary["run_dir"].toString() + "/rank0.log");
    QVERIFY(log.open(QIODevice::ReadOnly));
    const auto sent = QRegularExpression("sent (\\d+) step records").match(QString::fromUtf8(log.readAll()));
    QVERIFY(sent.hasMatch());
    RunStore store(runs.path().toStdString());
    const std::int64_t stored = store.stepCount(o.summary["run_id"].toInt());
    QCOMPARE(stored, sent.captured(1).toLongLong());
    QCOMPARE(stored, std::int64_t(ranks) * steps);
    QCOMPARE(o.summary["ranks"].toArray().size(), ranks);
    QCOMPARE(stragglerRanks(o.summary), std::vector<int>{7});
    QCOMPARE(o.summary["stragglers"].toArray().at(0).toObject()["phase"].toString(), QString("compute"));
  }
};

QTEST_GUILESS_MAIN(TestStragglers)
#include "test_stragglers.moc"
