// SPDX-License-Identifier: GPL-3.0-or-later
// `ptw --headless` as CI sees it: exit codes, messages, and no orphan when ptw itself is killed.
#include <QDir>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QXmlStreamReader>
#include <QtTest>

#include <sched.h>
#include <signal.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <initializer_list>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/version.h"
#include "launch/expectation.h"
#include "launch/forwarding_observer.h"
#include "launch/headless.h"
#include "launch/last_steps.h"
#include "launch/launcher.h"
#include "launch/preflight.h"
#include "launch/rate_window.h"
#include "launch/run_session.h"
#include "launch/run_store.h"
#include "launch/supervisor.h"  // checkpointStep
#include "launch/sweep.h"
#include "launch/throughput.h"
#include "sql_support.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

struct Result {
  int code = -1;
  QString out, err;
};

// `ptw args`, as given.
Result runCommand(const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(test::binDir() + "/ptw", args);
  if (!p.waitForFinished(120000)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError())};
}

// A headless run of `ptw args` with its runs in `runs`.
Result runPtw(const QStringList& args, const QTemporaryDir& runs,
              const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  return runCommand(QStringList{"--headless", "--runs-dir", runs.path()} + args, env);
}

}  // namespace

class TestHeadless : public QObject {
  Q_OBJECT
 private slots:
  void defaultProfileSucceeds() {
    QTemporaryDir runs;
    Result r = runPtw({}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY(r.out.contains("rank 0  step 20/20"));
    QVERIFY(r.out.contains("rank 1  step 20/20"));
    QVERIFY(r.out.contains("finished"));
    // One run folder, and the store's step files, none left once the run's records are rows.
    QDir dirs(runs.path());
    const QStringList names = dirs.entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    QCOMPARE(names.size(), 2);
    QVERIFY(names.contains("runs.blocks"));
    QVERIFY(QDir(runs.filePath("runs.blocks")).isEmpty());
  }

  // Every example profile a new user can open runs headless to the end, and the summary
  // says so: the steps asked for, a finite loss, validation where it holds out data.
  void everyExampleProfileRuns_data() {
    QTest::addColumn<QString>("path");
    QDir dir(qEnvironmentVariable("PTW_SOURCE_DIR") + "/resources/profiles");
    const auto files = dir.entryList({"*.json"}, QDir::Files, QDir::Name);
    QVERIFY(files.size() >= 6);
    for (const auto& f : files) QTest::newRow(qPrintable(f)) << dir.filePath(f);
  }
  void everyExampleProfileRuns() {
    QFETCH(QString, path);
    QTemporaryDir runs;
    const QString summaryPath = runs.filePath("summary.json");
    // The examples run long enough to watch in the window; here 40 steps of each keep the
    // suite short.
    const int steps = 40;
    Result r =
        runPtw({"--profile", path, "--summary", summaryPath, "--set", QString("hyper.max_steps=%1").arg(steps)}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QFile f(summaryPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QJsonObject summary = QJsonDocument::fromJson(f.readAll()).object();
    QFile pf(path);
    QVERIFY(pf.open(QIODevice::ReadOnly));
    QJsonObject profile = QJsonDocument::fromJson(pf.readAll()).object();
    QCOMPARE(summary["status"].toString(), QString("finished"));
    QCOMPARE(summary["final"].toObject()["step"].toInt(), steps);
    QVERIFY(std::isfinite(summary["final"].toObject()["loss"].toDouble(std::nan(""))));
    if (profile["data"].toObject()["val_fraction"].toDouble() > 0)
      QVERIFY2(summary["final"].toObject()["val_loss"].isDouble(), "no validation loss in the summary");
  }

  // The image examples learn: shortened with --set, ResNet-18 under DDP ends well above
  // chance (10 classes) on its held-out CIFAR-shaped images, and the image folder's CNN under
  // DataParallel well above chance (3 classes) on the held-out images of every class; every
  // rank's records are stored.
  void imageExamplesLearn_data() {
    QTest::addColumn<QString>("profile");
    QTest::addColumn<QStringList>("set");
    QTest::addColumn<QString>("expect");
    QTest::newRow("ddp-resnet18-cifar") << "ddp-resnet18-cifar.json"
                                        << QStringList{"hyper.max_steps=24", "run.eval_every=12"}
                                        << "final.val_accuracy >= 0.3";
    QTest::newRow("dataparallel-image-folder")
        << "dataparallel-image-folder.json" << QStringList{"hyper.max_steps=1500"} << "final.val_accuracy >= 0.55";
  }
  void imageExamplesLearn() {
    QFETCH(QString, profile);
    QFETCH(QStringList, set);
    QFETCH(QString, expect);
    if (!QFile::exists(test::sourcePath("resources/data/resnet18-cifar.scripted.pt")))
      QSKIP("the image examples' data is not generated (the build's ptw_example_data target)");
    QTemporaryDir runs;
    QStringList args{"--profile", test::sourcePath("resources/profiles/" + profile), "--expect", expect};
    for (const QString& s : set) args << "--set" << s;
    Result r = runPtw(args, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    core::RunStore store(runs.path().toStdString());
    std::map<int, std::vector<double>> losses;
    for (const auto& s : store.steps(1)) losses[s.rank].push_back(s.loss);
    const int steps = set.front().section('=', 1).toInt();
    QCOMPARE(static_cast<int>(losses.size()), 2);
    for (const auto& [rank, l] : losses) {
      QCOMPARE(static_cast<int>(l.size()), steps);
      // The mean of the last tenth of the steps below that of the first tenth.
      const auto tenth = static_cast<std::ptrdiff_t>(l.size() / 10);
      const double first = std::accumulate(l.begin(), l.begin() + tenth, 0.0) / static_cast<double>(tenth);
      const double last = std::accumulate(l.end() - tenth, l.end(), 0.0) / static_cast<double>(tenth);
      QVERIFY2(last < first,
               qPrintable(QString("rank %1: loss %2 at the start, %3 at the end").arg(rank).arg(first).arg(last)));
    }
  }

  void invalidInputExitsTwoAndStartsNothing_data() {
    QTest::addColumn<QString>("content");
    QTest::addColumn<QStringList>("extra");
    QTest::addColumn<QString>("expected");
    QTest::newRow("bad json") << "{\"hyper\": {\"lr\": }}" << QStringList{} << "p.json:1:";
    QTest::newRow("negative lr") << "{\"hyper\": {\"lr\": -1}}" << QStringList{} << "hyper.lr: must be > 0, got -1";
    QTest::newRow("zero ranks") << "{\"strategy\": {\"ranks\": 0}}" << QStringList{} << "strategy.ranks: must be >= 1";
    QTest::newRow("unknown strategy") << "{\"strategy\": {\"kind\": \"mpi\"}}" << QStringList{}
                                      << "strategy.kind: expected one of";
    QTest::newRow("bad override") << "{}" << QStringList{"--set", "hyper.lr=abc"}
                                  << "hyper.lr: expected a number, got \"abc\"";
    QTest::newRow("unknown override") << "{}" << QStringList{"--set", "strategy.rank=3"}
                                      << "unknown field strategy.rank";
    QTest::newRow("summary into a folder") << "{}" << QStringList{"--summary", QDir::tempPath()}
                                           << "--summary " + QDir::tempPath() + ": is a folder; give a file name";
    QTest::newRow("validation expected, none held out") << "{}" << QStringList{"--expect", "final.val_loss < 1"}
                                                        << "final.val_loss needs validation data, and the profile "
                                                           "holds none (data.val_fraction is 0)";
  }
  void invalidInputExitsTwoAndStartsNothing() {
    QFETCH(QString, content);
    QFETCH(QStringList, extra);
    QFETCH(QString, expected);
    QTemporaryDir runs, dir;
    QFile f(dir.filePath("p.json"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(content.toUtf8());
    f.close();
    Result r = runPtw(QStringList{"--profile", dir.filePath("p.json")} + extra, runs);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(expected), qPrintable(r.err));
    QVERIFY(QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty());  // nothing started
  }

  // A missing profile, data file or column: one line that names it and says what to do, exit
  // 2, and no run folder. The window says the same (test_main_window).
  void missingFilesAndColumnsSayWhatToDo_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("expected");
    const QString csvProfile = test::sourcePath("resources/profiles/ddp-csv-regression.json");
    const QString csv = QDir::cleanPath(test::sourcePath("resources/data/regression.csv"));
    QTest::newRow("profile") << QStringList{"--profile", "/nonexistent/p.json"}
                             << "profile /nonexistent/p.json does not exist; give an existing profile file to "
                                "-p/--profile (examples: resources/profiles/)";
    QTest::newRow("csv data.path") << QStringList{"--profile", csvProfile, "--set", "data.path=/nonexistent/d.csv"}
                                   << "data.path: /nonexistent/d.csv does not exist; set data.path to an existing "
                                      "CSV file";
    QTest::newRow("csv data.path a folder")
        << QStringList{"--profile", csvProfile, "--set", "data.path=" + QDir::tempPath()}
        << "data.path: " + QDir::tempPath() + " is a folder; set data.path to a CSV file";
    QTest::newRow("mnist data.path")
        << QStringList{"--profile", test::sourcePath("resources/profiles/dataparallel-cnn-mnist.json"), "--set",
                       "data.path=/nonexistent/mnist"}
        << "data.path: /nonexistent/mnist is not a folder; set data.path to the folder that holds "
           "train-images-idx3-ubyte and train-labels-idx1-ubyte";
    QTest::newRow("csv data.target") << QStringList{"--profile", csvProfile, "--set", "data.target=z"}
                                     << "data.target: column \"z\" is not in " + csv +
                                            " (columns: x1, x2, x3, x4, y); set data.target to one of them";
    QTest::newRow("csv data.features") << QStringList{"--profile", csvProfile, "--set", "data.features=[\"x1\",\"x9\"]"}
                                       << "data.features: column \"x9\" is not in " + csv +
                                              " (columns: x1, x2, x3, x4, y); set data.features to one of them";
  }
  void missingFilesAndColumnsSayWhatToDo() {
    QFETCH(QStringList, args);
    QFETCH(QString, expected);
    QTemporaryDir runs;
    Result r = runPtw(args, runs);
    QCOMPARE(r.code, 2);
    QCOMPARE(r.err, "ptw: " + expected + "\n");
    QVERIFY(QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty());  // nothing started
  }

  void expectationsSummaryAndJunit() {
    QTemporaryDir runs, out;
    QString summary = out.filePath("s.json"), junit = out.filePath("j.xml");
    Result ok = runPtw({"--set", "hyper.max_steps=200", "--expect", "final.loss < 1.0", "--expect", "final.step == 200",
                        "--summary", summary, "--junit", junit},
                       runs);
    QVERIFY2(ok.code == 0, qPrintable(ok.out + ok.err));
    QVERIFY(ok.out.contains("expect final.loss < 1.0: ok"));
    QFile sf(summary);
    QVERIFY(sf.open(QIODevice::ReadOnly));
    QJsonParseError pe;
    QJsonObject s = QJsonDocument::fromJson(sf.readAll(), &pe).object();
    QCOMPARE(pe.error, QJsonParseError::NoError);
    QCOMPARE(s["status"].toString(), QStringLiteral("finished"));
    QCOMPARE(s["final"].toObject()["step"].toDouble(), 200.0);
    QVERIFY(s["final"].toObject()["loss"].toDouble() < 1.0);
    QCOMPARE(s["ranks"].toArray().size(), 2);
    QVERIFY(s["ranks"].toArray()[1].toObject()["samples_per_s"].toDouble() > 0);
    QVERIFY(s["throughput"].toObject()["samples_per_s"].toDouble() > 0);
    for (const auto& rank : s["ranks"].toArray()) {  // the parts of a step are within it
      const QJsonObject ms = rank.toObject()["step_ms"].toObject();
      double parts = 0;
      for (const char* part : {"data", "compute", "comm", "opt"}) {
        QVERIFY2(ms[part].toDouble(-1) >= 0, part);
        parts += ms[part].toDouble();
      }
      QVERIFY(ms["compute"].toDouble() > 0);
      QVERIFY2(parts <= ms["total"].toDouble() * (1 + 1e-9), qPrintable(QJsonDocument(ms).toJson()));
    }
    QCOMPARE(s["expectations"].toArray().size(), 2);

    // A failed expectation: exit 4, and the JUnit file says which.
    Result bad = runPtw({"--expect", "final.loss < 0.000001", "--junit", junit, "--summary", summary}, runs);
    QCOMPARE(bad.code, 4);
    QVERIFY(bad.out.contains("expect final.loss < 0.000001: FAILED"));
    QFile jf(junit);
    QVERIFY(jf.open(QIODevice::ReadOnly));
    QXmlStreamReader xml(&jf);
    int cases = 0, failures = 0;
    QString failedName;
    QString current;
    while (!xml.atEnd()) {
      xml.readNext();
      if (xml.isStartElement() && xml.name() == QLatin1String("testcase")) {
        ++cases;
        current = xml.attributes().value("name").toString();
      }
      if (xml.isStartElement() && xml.name() == QLatin1String("failure")) {
        ++failures;
        failedName = current;
      }
    }
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
    QCOMPARE(cases, 2);
    QCOMPARE(failures, 1);
    QCOMPARE(failedName, QStringLiteral("expect final.loss < 0.000001"));
    sf.close();
    QVERIFY(sf.open(QIODevice::ReadOnly));
    QCOMPARE(QJsonDocument::fromJson(sf.readAll()).object()["status"].toString(), QStringLiteral("expectation_failed"));
  }

  // The summary's and --expect's metrics end to end, from a run whose ranks send groups of
  // steps past step 2048 (Note [Step groups]): throughput per rank and in all, steps per
  // second and each rank's step time are what its stored records give, leaving out its first
  // 10 (Note [Warm-up steps]); the final loss is the ranks' mean at the last step; wall_s is
  // within the command's own time; the expectations judge those same values.
  void theSummaryIsWhatTheStoredRecordsGive() {
    QTemporaryDir runs, out;
    const QString summary = out.filePath("s.json");
    QElapsedTimer clock;
    clock.start();
    Result r =
        runPtw({"--set", "hyper.max_steps=6000", "--summary", summary, "--expect", "throughput.samples_per_s > 0",
                "--expect", "throughput.steps_per_s > 0", "--expect", "wall_s > 0"},
               runs);
    const double elapsedS = static_cast<double>(clock.elapsed()) / 1000.0;
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QFile sf(summary);
    QVERIFY(sf.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(sf.readAll()).object();
    RunStore store(runs.path().toStdString());
    const auto steps = store.steps(s["run_id"].toInt());
    QCOMPARE(steps.size(), std::size_t(12000));
    struct Sums {
      double samples = 0, busyS = 0, lastLoss = 0;
      std::int64_t seen = 0, counted = 0;
    };
    std::map<int, Sums> sums;
    for (const auto& st : steps) {  // by rank, then step
      Sums& k = sums[st.rank];
      k.lastLoss = st.loss;
      if (k.seen++ < 10) continue;
      k.samples += st.samplesPerS * (st.stepMs / 1000.0);
      k.busyS += st.stepMs / 1000.0;
      ++k.counted;
    }
    auto near = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::abs(b); };
    double total = 0, stepsPerS = 1e300;
    const QJsonArray ranks = s["ranks"].toArray();
    QCOMPARE(ranks.size(), 2);
    for (int k = 0; k < 2; ++k) {
      const Sums& x = sums[k];
      const QJsonObject rank = ranks[k].toObject();
      QVERIFY2(near(rank["samples_per_s"].toDouble(), x.samples / x.busyS), qPrintable(QString::number(k)));
      QVERIFY(near(rank["step_ms"].toObject()["total"].toDouble(), 1000.0 * x.busyS / static_cast<double>(x.counted)));
      QCOMPARE(rank["final_loss"].toDouble(), x.lastLoss);
      total += x.samples / x.busyS;
      stepsPerS = std::min(stepsPerS, static_cast<double>(x.counted) / x.busyS);
    }
    const QJsonObject throughput = s["throughput"].toObject();
    QVERIFY(near(throughput["samples_per_s"].toDouble(), total));
    QVERIFY(near(throughput["steps_per_s"].toDouble(), stepsPerS));
    QCOMPARE(s["final"].toObject()["loss"].toDouble(), (sums[0].lastLoss + sums[1].lastLoss) / 2);
    QCOMPARE(s["final"].toObject()["step"].toDouble(), 6000.0);
    const double wall = s["wall_s"].toDouble();
    QVERIFY2(wall > 0 && wall <= elapsedS, qPrintable(QString("%1 of %2 s").arg(wall).arg(elapsedS)));
    const QJsonArray judged = s["expectations"].toArray();
    QCOMPARE(judged.size(), 3);
    QCOMPARE(judged[0].toObject()["value"].toDouble(), throughput["samples_per_s"].toDouble());
    QCOMPARE(judged[1].toObject()["value"].toDouble(), throughput["steps_per_s"].toDouble());
    QCOMPARE(judged[2].toObject()["value"].toDouble(), wall);
  }

  // The progress line's rate, over a stream of groups alternating 20x faster and slower, a
  // group every 10 ms: a single group's rate is off by a factor of ten, the window's stays
  // within 10% of the true mean (samples over time inside steps).
  void theProgressRateIsSmoothedOverGroups() {
    RateWindow window(3.0);
    const double samples = 640, fastS = 0.001, slowS = 0.02;
    const double mean = 2 * samples / (fastS + slowS);
    for (int i = 0; i < 2000; ++i) {
      const double busyS = i % 2 == 0 ? fastS : slowS;
      window.add(0.01 * i, samples, busyS);
      if (i < 20) continue;  // a few groups in, as the first line after start-up
      QVERIFY2(std::abs(window.rate() - mean) <= 0.1 * mean,
               qPrintable(QString("group %1: %2 vs %3").arg(i).arg(window.rate()).arg(mean)));
    }
    QVERIFY(samples / fastS > 5 * mean && samples / slowS < 0.6 * mean);  // what a group alone says
    window.add(100.0, samples, slowS);  // after a pause: only the newest record is left
    QCOMPARE(window.rate(), samples / slowS);
    QCOMPARE(RateWindow().rate(), 0.0);
  }

  // Each rank's last step is the last record that holds steps, a step's or a group's last;
  // other kinds and ranks past the reporting ones leave it.
  void lastStepsKeepEachRanksLastStep() {
    LastSteps last(2);
    QCOMPARE(last.size(), std::size_t(2));
    QVERIFY(!last[0].seen && !last[1].seen);
    Record step;
    step.step.rank = 1;
    step.step.step = 7;
    step.step.loss = 0.5;
    QVERIFY(last.add(step));
    Record group = step;
    group.kind = Record::Kind::Group;
    group.step.step = 9;
    group.group.first = 8;
    group.group.count = 2;
    QVERIFY(last.add(group));
    Record validation = step;
    validation.kind = Record::Kind::Validation;
    validation.step.step = 10;
    QVERIFY(!last.add(validation));
    Record beyond = step;
    beyond.step.rank = 2;
    QVERIFY(!last.add(beyond));
    QVERIFY(!last[0].seen);
    QVERIFY(last[1].seen);
    QCOMPARE(last[1].last.step, std::int64_t(9));
    QCOMPARE(last[1].last.loss, 0.5);
  }

  // A wrapper passes on every callback it does not act on, in order, to the observer inside.
  void aForwardingObserverPassesEveryCallbackOn() {
    struct Inner final : LaunchObserver {
      std::vector<std::string> heard;
      void onStarted(int port, const std::vector<int>& pids) override {
        heard.push_back("started " + std::to_string(port) + " " + std::to_string(pids.size()));
      }
      void onRecords(std::vector<Record>& batch) override {
        heard.push_back("records " + std::to_string(batch.size()));
      }
      void onLog(int rank, const std::string& line) override { heard.push_back(std::to_string(rank) + " " + line); }
      void onRankExit(const RankExit& e) override { heard.push_back("exit " + std::to_string(e.rank)); }
      void onRestart(int attempt, std::int64_t step) override {
        heard.push_back("restart " + std::to_string(attempt) + " " + std::to_string(step));
      }
    } inner;
    struct Counting final : ForwardingObserver {
      using ForwardingObserver::ForwardingObserver;
      std::size_t records = 0;
      void onRecords(std::vector<Record>& batch) override {
        records += batch.size();
        ForwardingObserver::onRecords(batch);
      }
    } outer(inner);
    std::vector<Record> batch(3);
    RankExit exit;
    exit.rank = 1;
    LaunchObserver& observer = outer;
    observer.onStarted(29500, {11, 12});
    observer.onRecords(batch);
    observer.onLog(0, "hello");
    observer.onRankExit(exit);
    observer.onRestart(1, 40);
    QCOMPARE(outer.records, std::size_t(3));
    const std::vector<std::string> expected = {"started 29500 2", "records 3", "0 hello", "exit 1", "restart 1 40"};
    QVERIFY(inner.heard == expected);
  }

  // More CPU ranks than cores: one line that says what to do, on stderr before the run, and
  // the run goes on.
  void moreRanksThanCoresWarnsAndRuns() {
    Profile p = defaultProfile();
    p.strategy.ranks = 3;
    const std::string expected =
        "strategy.ranks: 3 ranks on 2 core(s); they will take turns and each step waits for "
        "the slowest; set strategy.ranks to 2 or fewer for a fair speed";
    QCOMPARE(coresWarning(p, 2), expected);
    QCOMPARE(coresWarning(p, 3), std::string());
    p.strategy.device = "cuda";
    QCOMPARE(coresWarning(p, 2), std::string());
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    QTemporaryDir runs;
    Result r = runPtw({"--set", QString("strategy.ranks=%1").arg(cores + 1)}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    p.strategy.device = "cpu";
    p.strategy.ranks = cores + 1;
    QVERIFY2(r.err.contains(QString::fromStdString("ptw: warning: " + coresWarning(p) + "\n")), qPrintable(r.err));
  }

  // device: cuda where LibTorch sees no GPU: found before any rank starts (the worker is asked
  // for its devices), said in one line with what to do, exit 2 and no run folder. (On a
  // machine with a GPU there is nothing to check.)
  void noCudaDeviceSaysUseCpu() {
    Profile p = defaultProfile();
    p.strategy.device = "cuda";
    QCOMPARE(deviceProblem(p, "/nonexistent/ptw-worker"), std::string());  // no answer: the ranks will say
    if (deviceProblem(p, test::workerPath()).empty()) QSKIP("a CUDA device is visible here");
    QCOMPARE(deviceProblem(p, test::workerPath()), std::string(kNoCudaDeviceMessage));
    QTemporaryDir runs;
    Result r = runPtw({"--set", "strategy.device=cuda"}, runs);
    QCOMPARE(r.code, 2);
    QCOMPARE(r.err, QString("ptw: strategy.device: \"cuda\" but LibTorch sees no CUDA device on this machine (this "
                            "LibTorch has no CUDA, or no driver is loaded); use \"cpu\"\n"));
    QVERIFY(QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty());
  }

  // The final line's throughput is the figure the summary and the store hold.
  void theFinalLineGivesTheStoredThroughput() {
    QTemporaryDir runs;
    const QString summary = runs.filePath("s.json");
    Result r = runPtw({"--set", "hyper.max_steps=400", "--summary", summary}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto m = QRegularExpression("ptw: throughput (\\d+) samples/s, ([0-9.]+) steps/s\n").match(r.out);
    QVERIFY2(m.hasMatch(), qPrintable(r.out));
    QFile sf(summary);
    QVERIFY(sf.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(sf.readAll()).object();
    const double stored = s["throughput"].toObject()["samples_per_s"].toDouble(-1);
    QVERIFY(stored > 0);
    QCOMPARE(m.captured(1), QString::number(stored, 'f', 0));
    const double steps = s["throughput"].toObject()["steps_per_s"].toDouble(-1);
    QCOMPARE(m.captured(2), QString::number(steps, 'f', steps < 10 ? 2 : 0));
    QCOMPARE(RunStore(runs.path().toStdString()).runs().back().samplesPerS, stored);
  }

  // The default profile's 20 steps leave 18 after warm-up: too short to measure, said so on
  // the final line, null in the summary (the run's and each rank's), NULL in the store.
  void theDefaultProfileIsTooShortToMeasure() {
    QTemporaryDir runs;
    const QString summary = runs.filePath("s.json");
    Result r = runPtw({"--summary", summary}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("ptw: too short to measure throughput: 18 steps after warm-up"), qPrintable(r.out));
    QVERIFY(!r.out.contains("ptw: throughput "));
    QFile sf(summary);
    QVERIFY(sf.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(sf.readAll()).object();
    QVERIFY(s["throughput"].toObject()["samples_per_s"].isNull());
    QVERIFY(s["throughput"].toObject()["steps_per_s"].isNull());
    for (const auto& rank : s["ranks"].toArray()) QVERIFY(rank.toObject()["samples_per_s"].isNull());
    QVERIFY(std::isnan(RunStore(runs.path().toStdString()).runs().back().samplesPerS));
  }

  // Every operator, at its boundary and either side of it; written with or without spaces
  // (the longest operator at a place wins: "<=" is not "<" followed by "=0.5"); a metric that
  // is not a number (no validation, no steps) holds for none of them, != included.
  void expectationsJudgeEveryOperatorAtItsBoundary_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<double>("value");
    QTest::addColumn<bool>("holds");
    const double nan = std::nan("");
    struct Row {
      const char* text;
      double value;
      bool holds;
    };
    for (const Row& r : std::initializer_list<Row>{
             {"final.loss < 0.5", 0.5, false},
             {"final.loss < 0.5", 0.4999, true},
             {"final.loss<=0.5", 0.5, true},
             {"final.loss <= 0.5", 0.5001, false},
             {"final.step > 20", 20, false},
             {"final.step > 20", 21, true},
             {"final.step >= 20", 20, true},
             {"final.step >= 20", 19, false},
             {"final.step == 20", 20, true},
             {"final.step == 20", 21, false},
             {"final.step != 20", 20, false},
             {"final.step != 20", 21, true},
             {"throughput.samples_per_s >= 1e3", 1000, true},
             {"wall_s < 60", 59.9, true},
             {"final.val_accuracy >= 0.9", nan, false},
             {"final.loss != 1", nan, false},
         })
      QTest::newRow(qPrintable(QStringLiteral("%1 at %2").arg(r.text).arg(r.value)))
          << QString(r.text) << r.value << r.holds;
  }
  void expectationsJudgeEveryOperatorAtItsBoundary() {
    QFETCH(QString, text);
    QFETCH(double, value);
    QFETCH(bool, holds);
    const Expectation e = Expectation::parse(text.toStdString());
    QCOMPARE(e.holds(value), holds);
    QVERIFY(knownMetrics().count(e.metric) == 1);
  }

  void invalidExpectationsExitTwo_data() {
    QTest::addColumn<QString>("expect");
    QTest::addColumn<QString>("message");
    QTest::newRow("no operator") << "final.loss 0.5"
                                 << "expected METRIC OP NUMBER";
    QTest::newRow("unknown metric") << "final.val_los < 1"
                                    << "unknown metric \"final.val_los\"";
    QTest::newRow("not a number") << "final.loss < small"
                                  << "expected a number after <";
  }
  void invalidExpectationsExitTwo() {
    QFETCH(QString, expect);
    QFETCH(QString, message);
    QTemporaryDir runs;
    Result r = runPtw({"--expect", expect}, runs);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QVERIFY(QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty());
  }

  // A failed run fails as a run; its expectations are not judged (reported as such, and
  // skipped in JUnit rather than failed a second time).
  void failingRankExitsThreeNamingIt() {
    QTemporaryDir runs;
    const QString junit = runs.filePath("j.xml");
    Result r = runPtw({"--worker-arg=--fault=throw-at-start:1", "--expect", "final.step >= 0", "--junit", junit}, runs);
    QCOMPARE(r.code, 3);
    QVERIFY2(r.err.contains("rank 1 failed with exit code 1"), qPrintable(r.err));
    QVERIFY2(r.err.contains("injected fault"), qPrintable(r.err));
    QVERIFY2(r.out.contains("expect final.step >= 0: not judged (the run failed)"), qPrintable(r.out));
    QFile f(junit);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString xml = QString::fromUtf8(f.readAll());
    QVERIFY2(xml.contains("<testsuites tests=\"2\" failures=\"1\">"), qPrintable(xml));
    QVERIFY2(xml.contains("<skipped message=\"not judged: the run failed\"/>"), qPrintable(xml));
  }

  // What the command line cannot do is said, with exit 2, before anything starts: options
  // of a run before a subcommand, a read-only command on a folder without runs, a sweep's
  // output into a folder, a worker program that is not there. And --expect judges a
  // headless run even where a Qt platform is set (CI machines often set offscreen).
  void theCommandLineSaysWhatItCannotUse() {
    QTemporaryDir runs;
    Result before = runCommand({"--set", "hyper.lr=-1", "sweep", "--runs-dir", runs.path()});
    QCOMPARE(before.code, 2);
    QVERIFY2(before.err.contains("--set is an option of a run, not of `ptw sweep`; give it after the subcommand"),
             qPrintable(before.err));
    QVERIFY(before.out.isEmpty());

    Result typo = runCommand({"runs", "--runs-dir", runs.filePath("typo")});
    QCOMPARE(typo.code, 2);
    QVERIFY2(typo.err.contains("runs directory " + runs.filePath("typo") + " holds no runs"), qPrintable(typo.err));
    QVERIFY(!QFileInfo::exists(runs.filePath("typo")));

    Result csv = runCommand({"sweep", "--runs-dir", runs.path(), "--csv", runs.path()});
    QCOMPARE(csv.code, 2);
    QVERIFY2(csv.err.contains("--csv " + runs.path() + ": is a folder"), qPrintable(csv.err));
    QVERIFY2(csv.out.isEmpty(), qPrintable(csv.out));

    auto noWorker = QProcessEnvironment::systemEnvironment();
    noWorker.insert("PTW_WORKER", "/nonexistent/ptw-worker");
    Result worker = runCommand({"--headless", "--runs-dir", runs.path()}, noWorker);
    QCOMPARE(worker.code, 2);
    QVERIFY2(worker.err.contains("worker program /nonexistent/ptw-worker is not executable"), qPrintable(worker.err));
    QVERIFY(QDir(runs.path()).entryList(QDir::NoDotAndDotDot | QDir::AllEntries).isEmpty());

    auto offscreen = QProcessEnvironment::systemEnvironment();
    offscreen.insert("QT_QPA_PLATFORM", "offscreen");
    Result judged = runCommand(
        {"--runs-dir", runs.path(), "--set", "hyper.max_steps=20", "--expect", "final.step == 20"}, offscreen);
    QVERIFY2(judged.code == 0, qPrintable(judged.out + judged.err));
    QVERIFY2(judged.out.contains("expect final.step == 20: ok"), qPrintable(judged.out));
    Result both = runCommand({"--start", "--expect", "final.step == 20"}, offscreen);
    QCOMPARE(both.code, 2);
    QVERIFY2(both.err.contains("cannot be given with --start"), qPrintable(both.err));
  }

  // Ctrl-C stops the configuration running and skips the rest: the table so far is printed
  // and written, the exit code is 5, and no worker is left.
  void anInterruptedSweepKeepsWhatItMeasured() {
    QTemporaryDir runs;
    QProcess p;
    p.start(test::binDir() + "/ptw", {"sweep", "--runs-dir", runs.path(), "--strategies", "ddp", "--workers", "2",
                                      "--steps", "1000000000", "--csv", runs.filePath("s.csv")});
    QVERIFY(p.waitForStarted());
    std::vector<int> workers;
    QTRY_VERIFY_WITH_TIMEOUT(!(workers = test::livePtwWorkers(static_cast<int>(p.processId()))).empty(), 20000);
    QTest::qWait(1500);  // Single trains a while
    ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(20000));
    QCOMPARE(p.exitCode(), 5);
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    QVERIFY2(out.contains("ptw: sweep interrupted after 1 configuration(s)"), qPrintable(out));
    QFile csv(runs.filePath("s.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 2);
    QVERIFY2(lines[1].startsWith("single,1,") && lines[1].contains(",stopped,"), qPrintable(lines[1]));
    QVERIFY(!test::anyAlive(workers));
  }

  // A runs directory given relative to the working directory: a rank killed after step 12
  // is restarted from the checkpoint at step 10, which the restarted workers (running in
  // the run folder) must find.
  void aRestartFromARelativeRunsDirResumes() {
    QTemporaryDir cwd;
    QProcess p;
    p.setWorkingDirectory(cwd.path());
    p.start(test::binDir() + "/ptw", {"--headless", "--worker-arg=--fault=kill-at-step:1:12", "--runs-dir", "runs/here",
                                      "--set", "run.checkpoint_every=5", "--set", "run.max_restarts=1"});
    QVERIFY(p.waitForFinished(120000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput() + p.readAllStandardError());
    QVERIFY2(p.exitCode() == 0, qPrintable(out));
    QVERIFY2(out.contains("restarting (attempt 2 of 2) from the checkpoint at step 10"), qPrintable(out));
    QVERIFY2(out.contains("rank 1  step 20/20"), qPrintable(out));
  }

  // Note [Warm-up steps]: throughput leaves out each rank's first steps, a tenth of the run
  // and at most 10, unless the rank did no more than those.
  void throughputLeavesOutEachRanksWarmUp() {
    Profile p;
    for (auto [steps, warmup] : {std::pair{100, 10}, {300, 10}, {20, 2}, {5, 0}, {0, 10}}) {
      p.hyper.maxSteps = steps;
      QCOMPARE(warmupSteps(p), std::int64_t(warmup));
    }
    auto step = [](int rank, double ms, double samples) {
      StepRecord s;
      s.rank = rank;
      s.stepMs = ms;
      s.samplesPerS = samples * 1000.0 / ms;
      return s;
    };
    ThroughputMeter meter(2);
    meter.add(step(0, 250, 16));                // a first CUDA step
    QCOMPARE(meter.samplesPerS(0), 16 / 0.25);  // only warm-up so far: counted whole
    meter.add(step(0, 12, 16));
    for (int i = 0; i < 4; ++i) meter.add(step(0, 1, 16));
    QCOMPARE(meter.samplesPerS(0), 16000.0);
    QCOMPARE(meter.stepsPerS(0), 1000.0);
    meter.add(step(1, 2, 16));
    QCOMPARE(meter.samplesPerS(1), 8000.0);  // each rank has its own warm-up
    QCOMPARE(meter.samplesPerS(2), 0.0);
    QCOMPARE(meter.total(), 16000.0 + 8000.0);
    meter.restart();  // restarted ranks warm up again: these two are left out
    meter.add(step(0, 250, 16));
    meter.add(step(0, 12, 16));
    meter.add(step(0, 2, 16));
    QCOMPARE(meter.samplesPerS(0), 5 * 16 / 0.006);  // the four 1 ms steps and the 2 ms one
    // The step split: means over the same steps, here the four 1 ms steps and the 2 ms one.
    QCOMPARE(meter.split(0).stepMs, 6.0 / 5);
    QCOMPARE(meter.split(2).stepMs, 0.0);
    ThroughputMeter parts(1);
    auto split = [&](double data, double compute, double comm, double opt) {
      StepRecord s = step(0, data + compute + comm + opt, 16);
      s.dataMs = data;
      s.computeMs = compute;
      s.commMs = comm;
      s.optMs = opt;
      parts.add(s);
    };
    split(100, 100, 100, 100);  // warm-up
    split(1, 2, 3, 4);
    split(3, 4, 5, 6);
    const StepSplit got = parts.split(0);
    QCOMPARE(got.stepMs, 14.0);
    QCOMPARE(got.dataMs, 2.0);
    QCOMPARE(got.computeMs, 3.0);
    QCOMPARE(got.commMs, 4.0);
    QCOMPARE(got.optMs, 5.0);
    ThroughputMeter pool(0, /*coordinatorOnly=*/true);
    pool.add(step(0, 1, 32));  // the coordinator reports the whole pool's samples
    pool.add(step(1, 1, 16));
    QCOMPARE(pool.total(), 32000.0);
    // The mean split is over the ranks that train: the pool's workers, every rank otherwise.
    pool.add(step(2, 3, 16));
    QCOMPARE(pool.meanSplit().stepMs, (1.0 + 3.0) / 2);
    ThroughputMeter ranks(0);
    ranks.add(step(0, 1, 16));
    ranks.add(step(1, 3, 16));
    QCOMPARE(ranks.meanSplit().stepMs, 2.0);
    QCOMPARE(ThroughputMeter(0).meanSplit().stepMs, 0.0);
  }

  // A sweep of a profile that lists GPUs gives each configuration the first ones it needs,
  // and refuses a configuration with more ranks than GPUs listed, naming the field.
  void sweepTakesTheListedGpusInOrder() {
    Profile base = defaultProfile();
    base.strategy.device = "cuda";
    base.strategy.ranks = 3;
    base.strategy.gpus = {3, 1, 2};
    QCOMPARE(Sweep::profileFor(base, "ddp", 2, 50).strategy.gpus, (std::vector<std::int64_t>{3, 1}));
    QCOMPARE(Sweep::profileFor(base, "dataparallel", 3, 50).strategy.gpus, (std::vector<std::int64_t>{3, 1, 2}));
    QCOMPARE(Sweep::profileFor(base, "single", 2, 50).strategy.gpus, (std::vector<std::int64_t>{3}));
    try {
      Sweep::profileFor(base, "ddp", 4, 50);
      QFAIL("4 ranks on 3 listed GPUs was accepted");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("strategy.gpus: lists 3 GPU(s) for 4 rank(s)/lane(s)"), e.what());
    }
    // A strategy the profile's device cannot take names itself and how to leave it out.
    try {
      Sweep::profileFor(base, "ddp-shm", 2, 50);
      QFAIL("shared memory on cuda ranks was accepted");
    } catch (const Error& e) {
      QVERIFY2(
          QString(e.what()).contains("sweep: ddp-shm with 2 worker(s) cannot run this profile: strategy.backend") &&
              QString(e.what()).contains("leave ddp-shm out of the strategies"),
          e.what());
    }
  }

  // Graceful: the ranks agree on a step to stop at, rank 0 checkpoints it, every record up to
  // it is stored, and the run is marked stopped.
  void sigintStopsGracefullyAndExitsFive_data() {
    QTest::addColumn<int>("signal");
    QTest::newRow("SIGINT") << SIGINT;
    QTest::newRow("SIGTERM") << SIGTERM;
    QTest::newRow("SIGHUP (the terminal closed)") << SIGHUP;
  }
  void sigintStopsGracefullyAndExitsFive() {
    QFETCH(int, signal);
    QTemporaryDir runs;
    QProcess p;
    p.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "--set", "hyper.max_steps=1000000000"});
    QVERIFY(p.waitForStarted());
    QByteArray out;
    QTRY_VERIFY_WITH_TIMEOUT((out += p.readAllStandardOutput()).contains("step "), 20000);
    auto workers = test::livePtwWorkers(static_cast<int>(p.processId()));
    QCOMPARE(workers.size(), std::size_t(2));
    ::kill(static_cast<pid_t>(p.processId()), signal);
    QVERIFY(p.waitForFinished(15000));
    QCOMPARE(p.exitCode(), 5);
    QVERIFY(!test::anyAlive(workers));
    RunStore store(runs.path().toStdString());
    const auto list = store.runs();
    QCOMPARE(list.size(), std::size_t(1));
    QCOMPARE(list[0].status, std::string("stopped"));
    const std::int64_t step = checkpointStep(list[0].dir);
    QVERIFY2(step > 0, list[0].dir.c_str());
    QVERIFY(QFile::exists(QString::fromStdString(list[0].dir + "/checkpoint.pt")));
    std::int64_t last[2] = {0, 0};
    for (const auto& s : store.steps(list[0].id)) last[s.rank] = std::max(last[s.rank], s.step);
    QCOMPARE(last[0], step);
    QCOMPARE(last[1], step);
  }

  void takenPortOrUnwritableRunsDirStartsNothing() {
    QTemporaryDir runs;
    const int port = Launcher::pickFreePort();
    Result r;
    {
      test::TakenPort taken(port);
      QVERIFY(taken.ok());
      r = runPtw({"--set", QStringLiteral("run.port=%1").arg(port)}, runs);
    }
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(QStringLiteral("run.port: port %1 on 127.0.0.1 is already in use").arg(port)),
             qPrintable(r.err));
    QVERIFY(QDir(runs.path()).entryList(QDir::NoDotAndDotDot | QDir::AllEntries).isEmpty());

    QFile blocker(runs.filePath("a-file"));
    QVERIFY(blocker.open(QIODevice::WriteOnly));
    blocker.close();
    QProcess p;
    p.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.filePath("a-file/runs")});
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 2);
    QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(err.contains("runs directory " + runs.filePath("a-file/runs") + ": cannot create"), qPrintable(err));
    QVERIFY2(err.contains("choose another with --runs-dir"), qPrintable(err));
  }

  // The metrics store fills up: the run is stopped and fails (exit 3) with the reason and what to do.
  void fullMetricsStoreExitsThreeWithTheReason() {
    QTemporaryDir runs;
    Result r = runPtw({"--store-limit-kib", "768", "--set", "hyper.max_steps=1000000000"}, runs);
    QCOMPARE(r.code, 3);
    // One line: the file, the folder to free space in, and the way around it.
    const QRegularExpression line(
        "^ptw: run failed: [^\n]*run store " + QRegularExpression::escape(runs.path()) +
            "/runs\\.(blocks/1|sqlite): [^\n]*; the disk holding " + QRegularExpression::escape(runs.path()) +
            " is full: free space there or pass --runs-dir another folder, then resume the run "
            "from its last checkpoint \\(run\\.resume_from\\)$",
        QRegularExpression::MultilineOption);
    QVERIFY2(line.match(r.err).hasMatch(), qPrintable(r.err));
  }

  // `ptw sweep`: one row per configuration plus the Single baseline, efficiency as defined,
  // the fastest marked, CSV and JSON agreeing, and --min-efficiency failing with exit 4.
  void sweepWritesTheTableAndAssertsEfficiency() {
    QTemporaryDir runs;
    auto sweep = [&](const QStringList& extra) {
      QProcess p;
      p.start(test::binDir() + "/ptw", QStringList{"sweep", "--runs-dir", runs.path(), "--strategies", "ddp,pool",
                                                   "--workers", "1,2", "--steps", "30"} +
                                           extra);
      p.waitForFinished(120000);
      return Result{p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()),
                    QString::fromUtf8(p.readAllStandardError())};
    };
    Result ok = sweep({"--csv", runs.filePath("s.csv"), "--json", runs.filePath("s.json")});
    QVERIFY2(ok.code == 0, qPrintable(ok.out + ok.err));
    QFile csv(runs.filePath("s.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    QStringList lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 1 + 5);
    QCOMPARE(lines[0], QString("strategy,workers,samples_per_s,efficiency,status,run_id,fastest,step_ms,data_ms,"
                               "compute_ms,comm_ms,opt_ms,steps_per_s"));
    QVERIFY(lines[1].startsWith("single,1,"));
    const double single = lines[1].split(',')[2].toDouble();
    QVERIFY(single > 0);
    double best = 0;
    int fastestRows = 0;
    for (int i = 1; i < lines.size(); ++i) {
      auto c = lines[i].split(',');
      QCOMPARE(c[4], QString("finished"));
      const double tput = c[2].toDouble(), eff = c[3].toDouble();
      QVERIFY(std::abs(eff - tput / (c[1].toInt() * single)) < 1e-6 * std::max(1.0, eff));
      best = std::max(best, tput);
      fastestRows += c[6].toInt();
      // Where the step went: the parts are within it, and every one computes; only Single has
      // no one to wait for.
      const double step = c[7].toDouble(), compute = c[9].toDouble(), comm = c[10].toDouble();
      QVERIFY2(step > 0 && compute > 0 && c[8].toDouble() + compute + comm + c[11].toDouble() <= step * (1 + 1e-9),
               qPrintable(lines[i]));
      if (c[0] == "single") QVERIFY2(comm < 0.01 * step, qPrintable(lines[i]));
      // One rank's steps/s is the inverse of its mean step (the pool's also has its coordinator),
      // to the CSV's 9 digits.
      if (c[1] == "1" && !c[0].startsWith("pool"))
        QVERIFY2(std::abs(c[12].toDouble() * step - 1000.0) < 1e-4, qPrintable(lines[i]));
    }
    QCOMPARE(fastestRows, 1);
    QFile json(runs.filePath("s.json"));
    QVERIFY(json.open(QIODevice::ReadOnly));
    QJsonArray rows = QJsonDocument::fromJson(json.readAll()).array();
    QCOMPARE(rows.size(), 5);
    for (int i = 0; i < rows.size(); ++i) {
      const QJsonObject r = rows[i].toObject();
      if (r["fastest"].toBool()) QVERIFY(std::abs(r["samples_per_s"].toDouble() - best) < 1e-6 * best);
      const double step = lines[i + 1].split(',')[7].toDouble();  // the CSV's row
      QVERIFY(std::abs(r["step_ms"].toObject()["total"].toDouble() - step) <= 1e-6 * step);
    }
    QVERIFY(ok.out.contains("* fastest:"));
    // Every configuration is a stored run.
    QCOMPARE(RunStore(runs.path().toStdString()).runs().size(), std::size_t(5));

    Result strict = sweep({"--min-efficiency", "1000"});
    QCOMPARE(strict.code, 4);
    QVERIFY2(strict.out.contains("is below --min-efficiency"), qPrintable(strict.out));
    Result bad = sweep({"--strategies", "horovod"});
    QCOMPARE(bad.code, 2);
    QVERIFY2(bad.err.contains("unknown strategy \"horovod\""), qPrintable(bad.err));
    QVERIFY2(bad.out.isEmpty(), qPrintable(bad.out));  // no table is started
  }

  // A configuration too short to measure says so in the sweep's table, as a run's final line
  // does, where the store holds no throughput for it.
  void aSweepTooShortToMeasureSaysSo() {
    QTemporaryDir runs;
    Result r =
        runCommand({"sweep", "--runs-dir", runs.path(), "--strategies", "ddp", "--workers", "1", "--steps", "20"});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const QRegularExpression row("^(single|ddp) +1 +too short +", QRegularExpression::MultilineOption);
    QCOMPARE(r.out.count(row), 2);
    const auto stored = RunStore(runs.path().toStdString()).runs();
    QCOMPARE(stored.size(), std::size_t(2));
    for (const auto& run : stored) QVERIFY(std::isnan(run.samplesPerS));
  }

  void sigkillOfPtwLeavesNoWorker() {
    QTemporaryDir runs;
    QProcess p;
    p.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "--set", "hyper.max_steps=1000000000",
                                      "--set", "strategy.ranks=3"});
    QVERIFY(p.waitForStarted());
    std::vector<int> workers;
    QTRY_VERIFY_WITH_TIMEOUT((workers = test::livePtwWorkers(static_cast<int>(p.processId()))).size() == 3, 20000);
    QByteArray out;
    QTRY_VERIFY_WITH_TIMEOUT((out += p.readAllStandardOutput()).contains("step "), 20000);
    ::kill(static_cast<pid_t>(p.processId()), SIGKILL);
    QVERIFY(p.waitForFinished(5000));
    QTRY_VERIFY_WITH_TIMEOUT(!test::anyAlive(workers), 5000);
    // The next look at the store finds the run interrupted, its flushed records kept, no gaps.
    RunStore store(runs.path().toStdString());
    auto all = store.runs();
    QCOMPARE(all.size(), std::size_t(1));
    QCOMPARE(all[0].status, std::string("interrupted"));
    auto steps = store.steps(all[0].id);
    QVERIFY(!steps.empty());
    std::vector<std::int64_t> last(3, 0);
    for (const auto& s : steps) {
      QCOMPARE(s.step, last[static_cast<std::size_t>(s.rank)] + 1);
      last[static_cast<std::size_t>(s.rank)] = s.step;
    }
    // `ptw runs` packs its step file into chunks, the same records.
    QProcess list;
    list.start(test::binDir() + "/ptw", {"runs", "--runs-dir", runs.path()});
    QVERIFY(list.waitForFinished(30000));
    QCOMPARE(list.exitCode(), 0);
    {
      test::Sql sql(store.path());
      QCOMPARE(sql.count("SELECT count(*) FROM step_files"), std::int64_t(0));
      QCOMPARE(sql.count("SELECT sum(count) FROM step_chunks"), static_cast<std::int64_t>(steps.size()));
    }
    QVERIFY(QDir(runs.filePath("runs.blocks")).isEmpty());  // the step file is gone once it is chunks
    const auto rows = store.steps(all[0].id);
    QCOMPARE(rows.size(), steps.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
      QVERIFY(rows[i].rank == steps[i].rank && rows[i].step == steps[i].step && rows[i].loss == steps[i].loss);
  }

  // Every run is in the store; export writes every step record of every rank as CSV.
  void storeListsRunsAndExportsCsv() {
    QTemporaryDir runs;
    QCOMPARE(runPtw({"--set", "hyper.max_steps=25"}, runs).code, 0);
    QProcess list;
    list.start(test::binDir() + "/ptw", {"runs", "--runs-dir", runs.path()});
    QVERIFY(list.waitForFinished(30000));
    QString table = QString::fromUtf8(list.readAllStandardOutput());
    QVERIFY2(table.contains("finished") && table.contains("seed-ddp"), qPrintable(table));
    // The run says which ptw made it, in the store and in the list.
    QCOMPARE(RunStore(runs.path().toStdString()).run(1).ptwVersion, std::string(ptw::kVersion));
    QVERIFY2(table.contains(QRegularExpression("\\bversion\\b")) &&
                 table.contains(QRegularExpression(QString("\\s%1\\s").arg(QRegularExpression::escape(ptw::kVersion)))),
             qPrintable(table));
    QProcess exporter;
    exporter.start(test::binDir() + "/ptw",
                   {"export", "1", "--csv", runs.filePath("run1.csv"), "--runs-dir", runs.path()});
    QVERIFY(exporter.waitForFinished(30000));
    QCOMPARE(exporter.exitCode(), 0);
    QFile csv(runs.filePath("run1.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    QStringList lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 1 + 2 * 25);
    QCOMPARE(
        lines[0],
        QString(
            "rank,step,epoch,loss,samples_per_s,step_ms,data_ms,compute_ms,comm_ms,opt_ms,lr,mem_bytes,script_step"));
    // Every field of every record, as the store holds it, exactly.
    const auto stored = RunStore(runs.path().toStdString()).steps(1);
    QCOMPARE(stored.size(), std::size_t(50));
    for (std::size_t i = 0; i < stored.size(); ++i) {
      const QStringList c = lines[static_cast<int>(i) + 1].split(',');
      QCOMPARE(c.size(), 13);
      StepRecord r;
      r.rank = c[0].toInt();
      r.step = c[1].toLongLong();
      r.epoch = c[2].toLongLong();
      double* v[8] = {&r.loss, &r.samplesPerS, &r.stepMs, &r.dataMs, &r.computeMs, &r.commMs, &r.optMs, &r.lr};
      for (int k = 0; k < 8; ++k) *v[k] = c[3 + k].toDouble();
      r.memBytes = c[11].toLongLong();
      r.stepOffset = r.step - c[12].toLongLong();  // script_step
      QVERIFY2(r == stored[i], qPrintable(lines[static_cast<int>(i) + 1]));
    }
    QVERIFY(lines[1].startsWith("0,1,0,"));
    QVERIFY(lines[26].startsWith("1,1,0,"));
    QProcess missing;
    missing.start(test::binDir() + "/ptw", {"export", "7", "--csv", runs.filePath("x.csv"), "--runs-dir", runs.path()});
    QVERIFY(missing.waitForFinished(30000));
    QCOMPARE(missing.exitCode(), 2);
    QVERIFY(QString::fromUtf8(missing.readAllStandardError()).contains("no run with id 7"));
  }

  // `ptw runs` turns an interrupted run's step records into rows, and says how far it is
  // when that takes a while (half a million records and more).
  void runsShowsProgressWhileUnpackingALongInterruptedRun() {
    QTemporaryDir runs;
    const std::int64_t steps = 250'000;
    std::int64_t id = 0;
    {
      core::RunStore store(runs.path().toStdString());
      id = store.beginRun(runs.path().toStdString(), core::defaultProfile());
      std::vector<core::Record> batch;
      for (std::int64_t s = 1; s <= steps; ++s) {
        for (int rank = 0; rank < 2; ++rank) {
          core::Record r;
          r.step.rank = rank;
          r.step.step = s;
          r.step.loss = 1.0 / static_cast<double>(s);
          batch.push_back(r);
        }
        if (batch.size() == 16'000) {
          store.append(id, 0, batch);
          store.flush();
          batch.clear();
        }
      }
      store.append(id, 0, batch);
      store.flush();
    }
    {
      const pid_t gone = ::fork();  // the run's supervisor: a process that has exited
      if (gone == 0) ::_exit(0);
      ::waitpid(gone, nullptr, 0);
      test::Sql sql(runs.filePath("runs.sqlite").toStdString());
      sql.exec("UPDATE runs SET pid = " + std::to_string(gone));
    }
    QProcess list;
    list.start(test::binDir() + "/ptw", {"runs", "--runs-dir", runs.path()});
    QVERIFY(list.waitForFinished(120000));
    QCOMPARE(list.exitCode(), 0);
    const QString err = QString::fromUtf8(list.readAllStandardError());
    const QString what = QString(" step records of run %1 in chunks").arg(id);
    QVERIFY2(err.startsWith("ptw: storing 500000" + what + "...\n"), qPrintable(err));
    QVERIFY2(err.endsWith("ptw: stored 500000 of 500000" + what + "\n"), qPrintable(err));
    QVERIFY(QString::fromUtf8(list.readAllStandardOutput()).contains("interrupted"));
    test::Sql sql(runs.filePath("runs.sqlite").toStdString());
    QCOMPARE(sql.count("SELECT sum(count) FROM step_chunks"), 2 * steps);
  }

  // run.keep_every past run.keep_all_until: the ranks write the records of those steps only.
  void keepEveryNthStepRecord() {
    QTemporaryDir runs;
    Result r =
        runPtw({"--set", "hyper.max_steps=25", "--set", "run.keep_every=5", "--set", "run.keep_all_until=10"}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    std::vector<std::int64_t> kept[2];
    for (const auto& s : RunStore(runs.path().toStdString()).steps(1)) kept[s.rank].push_back(s.step);
    const std::vector<std::int64_t> expected{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25};
    QCOMPARE(kept[0], expected);
    QCOMPARE(kept[1], expected);
  }

  // Note [One run lifecycle]: however a run is started, its row holds the final loss and
  // throughput that headless reports. A pool's final loss is its coordinator's (rank 0 speaks
  // for the run), not a mean over the coordinator and its workers.
  void everyPathStoresTheFinalMetricsHeadlessReports() {
    Profile p = defaultProfile();
    p.strategy.kind = "pool";
    p.strategy.ranks = 2;
    p.hyper.maxSteps = 200;  // long enough to measure (Note [Warm-up steps])
    QTemporaryDir headlessRuns, sessionRuns, sweepRuns;
    // Headless, in this process: its summary and its row.
    HeadlessOptions o;
    o.runsDir = headlessRuns.path().toStdString();
    o.workerPath = test::workerPath();
    o.overrides = {"strategy.kind=pool", "strategy.ranks=2", "hyper.max_steps=200"};
    o.summaryPath = headlessRuns.filePath("summary.json").toStdString();
    std::ostringstream out, err;
    QCOMPARE(runHeadless(o, out, err), 0);
    QFile f(QString::fromStdString(o.summaryPath));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject summary = QJsonDocument::fromJson(f.readAll()).object();
    const double loss = summary["final"].toObject()["loss"].toDouble(std::nan(""));
    const double throughput = summary["throughput"].toObject()["samples_per_s"].toDouble(std::nan(""));
    QVERIFY(std::isfinite(loss) && throughput > 0);
    RunRow row = RunStore(o.runsDir).runs().back();
    QCOMPARE(row.finalLoss, loss);
    QCOMPARE(row.samplesPerS, throughput);

    // The window's path: a session with the caller's observer, which sees rank 0's last loss.
    struct LastLoss final : LaunchObserver {
      double rank0 = std::nan("");
      void onRecords(std::vector<Record>& batch) override {
        for (const auto& r : batch)
          if ((r.kind == Record::Kind::Step || r.kind == Record::Kind::Group) && r.step.rank == 0) rank0 = r.step.loss;
      }
    } seen;
    RunSession session(
        RunSessionOptions(p).setRunsDir(sessionRuns.path().toStdString()).setWorkerPath(test::workerPath()));
    session.begin();
    const RunResult result = session.run(seen);
    QVERIFY2(result.report.status == RunReport::Status::Finished, result.report.message.c_str());
    QVERIFY(result.storeError.empty());
    QCOMPARE(result.metrics.at("final.loss"), seen.rank0);
    QCOMPARE(result.metrics.at("final.loss"), loss);  // the same training: the same loss as headless's
    row = RunStore(sessionRuns.path().toStdString()).runs().back();
    QCOMPARE(row.finalLoss, seen.rank0);
    QCOMPARE(row.samplesPerS, result.metrics.at("throughput.samples_per_s"));
    QCOMPARE(row.samplesPerS, session.throughput().total());

    // The sweep's path: its pool point trains the same 200 steps.
    const auto points =
        Sweep(SweepOptions(p, {"pool"}, {2}).setSteps(200).setRunsDir(sweepRuns.path().toStdString())).run();
    QCOMPARE(points.size(), std::size_t(2));
    const auto rows = RunStore(sweepRuns.path().toStdString()).runs();
    QCOMPARE(rows.size(), std::size_t(2));
    for (std::size_t i = 0; i < 2; ++i) {
      QVERIFY2(points[i].status == "finished", points[i].message.c_str());
      QVERIFY(std::isfinite(rows[i].finalLoss));
      QCOMPARE(rows[i].samplesPerS, points[i].samplesPerS);
    }
    QCOMPARE(rows[1].strategy, std::string("pool/sync"));
    QCOMPARE(rows[1].finalLoss, loss);
  }

  // A store that cannot record the run's end fails the run with the store's message, the
  // same in headless and on the window's path (which once let it pass as finished).
  void aStoreThatCannotRecordTheEndFailsTheRunAlike() {
    // Holds the store's write lock from when rank 0 has written its final parameters (the
    // run's end) until the run has returned: the store waits its 5 s, then gives up.
    struct LockAtEnd {
      explicit LockAtEnd(const QString& runs)
          : thread([this, runs] {
              sqlite3* db = nullptr;
              while (!release.load()) {
                QDir dir(runs);
                bool ended = false;
                for (const auto& d : dir.entryList(QDir::Dirs | QDir::NoDotAndDotDot))
                  ended = ended || QFile::exists(dir.filePath(d + "/rank0.final.pt"));
                if (ended && !db &&
                    sqlite3_open_v2(dir.filePath("runs.sqlite").toUtf8().constData(), &db, SQLITE_OPEN_READWRITE,
                                    nullptr) == SQLITE_OK) {
                  sqlite3_busy_timeout(db, 5000);
                  locked = sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) == SQLITE_OK;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
              }
              if (db) sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
              sqlite3_close(db);
            }) {}
      void done() {
        release = true;
        if (thread.joinable()) thread.join();
      }
      ~LockAtEnd() { done(); }
      std::atomic<bool> release{false}, locked{false};
      std::thread thread;
    };
    const QRegularExpression said("^run store .*runs.sqlite: .*\\(database is locked\\)");

    QTemporaryDir headlessRuns;
    HeadlessOptions o;
    o.runsDir = headlessRuns.path().toStdString();
    o.workerPath = test::workerPath();
    std::ostringstream out, err;
    LockAtEnd headlessLock(headlessRuns.path());
    const int code = runHeadless(o, out, err);
    headlessLock.done();
    QVERIFY(headlessLock.locked);
    QCOMPARE(code, int(kExitTrainingFailed));
    const QString headlessErr = QString::fromStdString(err.str());
    const qsizetype at = headlessErr.indexOf("ptw: run failed: ");
    QVERIFY2(at >= 0, qPrintable(headlessErr));
    const QString headlessMessage = headlessErr.mid(at + 17).section('\n', 0, 0);
    QVERIFY2(said.match(headlessMessage).hasMatch(), qPrintable(headlessMessage));

    QTemporaryDir windowRuns;
    RunSession session(RunSessionOptions(defaultProfile())
                           .setRunsDir(windowRuns.path().toStdString())
                           .setWorkerPath(test::workerPath()));
    session.begin();
    LockAtEnd windowLock(windowRuns.path());
    LaunchObserver quiet;
    const RunResult result = session.run(quiet);
    windowLock.done();
    QVERIFY(windowLock.locked);
    QCOMPARE(result.report.status, RunReport::Status::Failed);
    QVERIFY(!result.storeError.empty());
    QCOMPARE(result.report.message, result.storeError);
    const QString windowMessage = QString::fromStdString(result.report.message);
    QVERIFY2(said.match(windowMessage).hasMatch(), qPrintable(windowMessage));
  }
};

QTEST_GUILESS_MAIN(TestHeadless)
#include "test_headless.moc"
