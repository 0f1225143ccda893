// SPDX-License-Identifier: GPL-3.0-or-later
// The command strategy: a user's program run as the ranks (Note [Script ranks] in
// common/command.h). First its plain parts (the protocol's parser, the output pattern,
// templates, the environment), then whole headless runs of small Python programs: what
// they report is stored exactly, failures are named, stops escalate, nothing outlives a run.
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QtTest>

#include <signal.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/command.h"
#include "common/error.h"
#include "launch/run_store.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

struct Result {
  int code = -1;
  QString out, err;
  qint64 ms = 0;
};

Result runPtw(const QStringList& args, const QTemporaryDir& runs) {
  QProcess p;
  QElapsedTimer t;
  t.start();
  p.start(test::binDir() + "/ptw", QStringList{"--headless", "--runs-dir", runs.path()} + args);
  if (!p.waitForFinished(120000)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError()), t.elapsed()};
}

// A profile of `ranks` processes running `script` (Python, written to the folder) in `dir`.
Profile scriptProfile(const QTemporaryDir& dir, const QString& script, int ranks = 2) {
  QFile f(dir.filePath("script.py"));
  f.open(QIODevice::WriteOnly);
  f.write(script.toUtf8());
  f.close();
  Profile p = defaultProfile();
  p.name = "script";
  p.strategy.kind = "command";
  p.strategy.ranks = ranks;
  p.command.program = "/usr/bin/python3";
  p.command.args = {"script.py"};
  p.command.cwd = dir.path().toStdString();
  p.command.stopGraceS = 0.5;
  return p;
}

// Python that reports a record: `report(step, loss=..., name=value, ...)`.
const char* kReport = R"(import json, os, sys, time, signal
RANK = int(os.environ["RANK"])
_ch = open(os.environ["PTW_METRICS"], "w", buffering=1)
def report(step, **kv):
    kv["step"] = step
    _ch.write(json.dumps(kv) + "\n")
)";

// The one run folder in `runs`.
QString runFolder(const QTemporaryDir& runs) {
  for (const auto& d : QDir(runs.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot))
    if (d != "runs.blocks") return runs.filePath(d);
  return {};
}

QString rankLog(const QTemporaryDir& runs, int rank) {
  QFile f(runFolder(runs) + QString("/rank%1.log").arg(rank));
  f.open(QIODevice::ReadOnly);
  return QString::fromUtf8(f.readAll());
}

// rank -> step -> loss, as stored.
std::map<int, std::map<std::int64_t, double>> storedLosses(const QTemporaryDir& runs) {
  RunStore store(runs.path().toStdString());
  std::map<int, std::map<std::int64_t, double>> out;
  const auto list = store.runs();
  if (list.empty()) return out;
  for (const auto& s : store.steps(list.front().id)) out[s.rank][s.step] = s.loss;
  return out;
}

// rank -> step -> loss, as a rank's program printed it ("step N loss X", X as Python's repr).
std::map<int, std::map<std::int64_t, double>> printedLosses(const QTemporaryDir& runs, int ranks) {
  std::map<int, std::map<std::int64_t, double>> out;
  static const QRegularExpression line(R"(^step (\d+) loss (\S+)$)", QRegularExpression::MultilineOption);
  for (int r = 0; r < ranks; ++r)
    for (auto it = line.globalMatch(rankLog(runs, r)); it.hasNext();) {
      const auto m = it.next();
      out[r][m.captured(1).toLongLong()] = std::strtod(m.captured(2).toUtf8().constData(), nullptr);
    }
  return out;
}

std::vector<int> pidsIn(const QString& file) {
  QFile f(file);
  f.open(QIODevice::ReadOnly);
  std::vector<int> pids;
  for (const auto& s : QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts)) pids.push_back(s.toInt());
  return pids;
}

}  // namespace

class TestCommand : public QObject {
  Q_OBJECT
 private slots:
  // ---- the protocol and the profile section ----

  void aLineBecomesARecord() {
    ScriptRecord r;
    std::string error;
    QVERIFY(
        parseMetricsLine(R"({"rank": 1, "step": 12, "loss": 0.53, "samples": 64, "acc": 0.91, "lr": 0.1})", r, error));
    QCOMPARE(r.rank, 1);
    QCOMPARE(r.step, std::int64_t{12});
    QCOMPARE(*r.loss, 0.53);
    QCOMPARE(*r.samples, 64.0);
    QCOMPARE(*r.lr, 0.1);
    QCOMPARE(r.scalars.size(), std::size_t{1});
    QCOMPARE(r.scalars[0].first, std::string("acc"));
    QCOMPARE(r.scalars[0].second, 0.91);
    // What Python's json writes for non-finite numbers.
    QVERIFY(parseMetricsLine(R"({"step": 3, "loss": NaN, "val_loss": Infinity, "g/norm": -Infinity})", r, error));
    QVERIFY(std::isnan(*r.loss));
    QVERIFY(std::isinf(*r.valLoss) && *r.valLoss > 0);
    QCOMPARE(r.scalars[0].first, std::string("g/norm"));
    QVERIFY(std::isinf(r.scalars[0].second) && r.scalars[0].second < 0);
    QVERIFY(parseMetricsLine(R"({"step": 4, "note": "NaN"})", r, error));  // a string "NaN" is the number too
  }

  void badLinesSayWhatIsWrong_data() {
    QTest::addColumn<QString>("line");
    QTest::addColumn<QString>("expected");
    QTest::newRow("not json") << "step 3 loss 0.5"
                              << "not valid JSON";
    QTest::newRow("array") << "[1, 2]"
                           << "expected a JSON object, got an array";
    QTest::newRow("no step") << R"({"loss": 1})"
                             << "\"step\" is missing";
    QTest::newRow("step text") << R"({"step": "x"})"
                               << "\"step\": expected an integer >= 0, got \"x\"";
    QTest::newRow("negative step") << R"({"step": -1})"
                                   << "\"step\": expected an integer >= 0, got -1";
    QTest::newRow("loss text") << R"({"step": 1, "loss": "low"})"
                               << "\"loss\": expected a number, got \"low\"";
    QTest::newRow("scalar bool") << R"({"step": 1, "ok": true})"
                                 << "\"ok\": expected a number (a named scalar), got true";
    QTest::newRow("scalar name") << R"({"step": 1, "a b": 2})"
                                 << "a scalar's name is 1 to 48 characters";
    QTest::newRow("nested") << R"({"step": 1, "x": [[[[[1]]]]]})"
                            << "nested deeper";
    QTest::newRow("binary") << QString::fromLatin1("\x01\x02\xff{") << "not valid JSON";
  }
  void badLinesSayWhatIsWrong() {
    QFETCH(QString, line);
    QFETCH(QString, expected);
    ScriptRecord r;
    std::string error;
    const QByteArray bytes = line.toLatin1();
    QVERIFY(!parseMetricsLine(std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())), r, error));
    QVERIFY2(QString::fromStdString(error).contains(expected), error.c_str());
  }

  void aPatternPicksNumbersOutOfOutput() {
    OutputPattern p("step {step} loss {loss}(?: acc {acc})?");
    ScriptRecord r;
    QVERIFY(p.match("epoch 1 | step 12 loss 0.53 acc 0.75 (fast)", r));
    QCOMPARE(r.step, std::int64_t{12});
    QCOMPARE(*r.loss, 0.53);
    QCOMPARE(r.scalars.at(0).second, 0.75);
    QVERIFY(p.match("step 7 loss -1.5e-3", r));
    QCOMPARE(*r.loss, -1.5e-3);
    QVERIFY(r.scalars.empty());
    QVERIFY(p.match("step 8 loss nan", r));
    QVERIFY(std::isnan(*r.loss));
    QVERIFY(!p.match("loss 0.5 at step 3", r));
    QVERIFY(!p.match("step 2.5 loss 1", r));  // a step is a whole number
    QVERIFY(!p.match(std::string(OutputPattern::kMaxLine + 1, 'x'), r));
  }

  void aBadPatternIsRefused_data() {
    QTest::addColumn<QString>("pattern");
    QTest::addColumn<QString>("expected");
    QTest::newRow("no step") << "loss {loss}"
                             << "has no {step}";
    QTest::newRow("unknown key") << "step {step} {a b}"
                                 << "is not a valid regular expression";
    QTest::newRow("own group") << "(epoch) step {step}"
                               << "write (?:...)";
    QTest::newRow("bad regex") << "step {step} ["
                               << "is not a valid regular expression";
  }
  void aBadPatternIsRefused() {
    QFETCH(QString, pattern);
    QFETCH(QString, expected);
    try {
      OutputPattern p(pattern.toStdString());
      QFAIL("accepted");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains(expected), e.what());
    }
  }

  void templatesTakeTheProfilesValues() {
    Profile p = defaultProfile();
    p.strategy.kind = "command";
    p.command.program = "python3";
    p.hyper.lr = 0.05;
    p.command.args = {"train.py", "--lr={hyper.lr}", "--steps", "{hyper.max_steps}", "{name}", "{}", "{0}", "{x}"};
    const auto argv = commandLine(p);
    QCOMPARE(argv, (std::vector<std::string>{"python3", "train.py", "--lr=0.05", "--steps", "20", "seed-ddp", "{}",
                                             "{0}", "{x}"}));
    QVERIFY(validate(p).empty());
    p.command.args = {"--lr", "{hyper.lrr}"};
    p.command.env = {"1X=2", "OK={hyper.seed}"};
    p.command.program = "";
    p.command.pattern = "loss {loss}";
    std::map<std::string, std::string> errors;
    for (const auto& e : validate(p)) errors[e.path] = e.message;
    QCOMPARE(errors["command.args[1]"], std::string("{hyper.lrr} names no profile field (e.g. {hyper.lr})"));
    QVERIFY(errors["command.env[0]"].find("expected KEY=VALUE") == 0);
    QVERIFY(errors.count("command.env[1]") == 0);
    QVERIFY(errors["command.program"].find("needs a program") != std::string::npos);
    QVERIFY(errors["command.pattern"].find("has no {step}") != std::string::npos);
    // A native strategy ignores the section.
    p.strategy.kind = "ddp";
    QVERIFY(validate(p).empty());
  }

  void theEnvironmentIsTorchruns() {
    Profile p = defaultProfile();
    p.strategy.kind = "command";
    p.command.program = "python3";
    p.command.env = {"OMP_NUM_THREADS=1", "SEED={hyper.seed}", "RANK=7"};
    p.run.maxRestarts = 3;
    ScriptContext ctx{1,          3,          29500, "/run/rank1.metrics",   "/share/ptw/python",
                      "42-29500", "2024-run", 2,     "/run/rank1.error.json"};
    const auto env = scriptEnvironment(p, ctx, {"PATH=/usr/bin", "PYTHONPATH=/mine", "RANK=9"});
    std::map<std::string, std::string> vars;
    for (const auto& e : env) vars[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
    QCOMPARE(vars["RANK"], std::string("7"));  // the profile's env comes last
    QCOMPARE(vars["LOCAL_RANK"], std::string("1"));
    QCOMPARE(vars["WORLD_SIZE"], std::string("3"));
    QCOMPARE(vars["LOCAL_WORLD_SIZE"], std::string("3"));
    QCOMPARE(vars["GROUP_RANK"], std::string("0"));
    QCOMPARE(vars["MASTER_ADDR"], std::string("127.0.0.1"));
    QCOMPARE(vars["MASTER_PORT"], std::string("29500"));
    QCOMPARE(vars["PYTHONUNBUFFERED"], std::string("1"));
    QCOMPARE(vars["PYTHONPATH"], std::string("/share/ptw/python:/mine"));
    QCOMPARE(vars["PTW_METRICS"], std::string("/run/rank1.metrics"));
    QCOMPARE(vars["PTW_RUN_TOKEN"], std::string("42-29500"));
    QCOMPARE(vars["SEED"], std::string("0"));
    QCOMPARE(vars["PATH"], std::string("/usr/bin"));
    // The rest of torchrun's set (test_torchrun_env checks it against torchrun itself).
    QCOMPARE(vars["GROUP_WORLD_SIZE"], std::string("1"));
    QCOMPARE(vars["ROLE_NAME"], std::string("default"));
    QCOMPARE(vars["TORCHELASTIC_RUN_ID"], std::string("2024-run"));
    QCOMPARE(vars["TORCHELASTIC_RESTART_COUNT"], std::string("2"));
    QCOMPARE(vars["TORCHELASTIC_MAX_RESTARTS"], std::string("3"));
    QCOMPARE(vars["TORCHELASTIC_USE_AGENT_STORE"], std::string("False"));
    QCOMPARE(vars["TORCHELASTIC_ERROR_FILE"], std::string("/run/rank1.error.json"));
    QCOMPARE(vars["NCCL_ASYNC_ERROR_HANDLING"], std::string("1"));
    // As torchrun, a value ptw's own environment gives is kept.
    QCOMPARE(scriptEnvironment(p, ctx, {"NCCL_ASYNC_ERROR_HANDLING=0"}).front(),
             std::string("NCCL_ASYNC_ERROR_HANDLING=0"));
  }

  // As torchrun: one OpenMP thread a process when several share the host, unless ptw's own
  // environment or the profile's command.env sets OMP_NUM_THREADS.
  void severalRanksGetOneOpenMpThreadEach_data() {
    QTest::addColumn<int>("world");
    QTest::addColumn<QString>("inherited");  // ptw's own OMP_NUM_THREADS; "" unset
    QTest::addColumn<QString>("profile");    // the profile's command.env entry; "" none
    QTest::addColumn<QString>("expected");   // "" unset
    QTest::newRow("two ranks") << 2 << ""
                               << ""
                               << "1";
    QTest::newRow("one rank") << 1 << ""
                              << ""
                              << "";
    QTest::newRow("ptw's own kept") << 4 << "3"
                                    << ""
                                    << "3";
    QTest::newRow("the profile's wins") << 2 << "3"
                                        << "OMP_NUM_THREADS=2"
                                        << "2";
  }
  void severalRanksGetOneOpenMpThreadEach() {
    QFETCH(int, world);
    QFETCH(QString, inherited);
    QFETCH(QString, profile);
    QFETCH(QString, expected);
    Profile p = defaultProfile();
    p.strategy.kind = "command";
    p.command.program = "python3";
    if (!profile.isEmpty()) p.command.env = {profile.toStdString()};
    std::vector<std::string> base{"PATH=/usr/bin"};
    if (!inherited.isEmpty()) base.push_back("OMP_NUM_THREADS=" + inherited.toStdString());
    const ScriptContext ctx{0, world, 29500, "/run/rank0.metrics", "", "42-29500", "2024-run", 0, ""};
    std::optional<std::string> got;
    for (const auto& e : scriptEnvironment(p, ctx, base))
      if (e.rfind("OMP_NUM_THREADS=", 0) == 0) got = e.substr(16);
    QCOMPARE(got.has_value(), !expected.isEmpty());
    if (got) QCOMPARE(QString::fromStdString(*got), expected);
  }

  void longLinesAreCutOffNotKept() {
    LineSplitter s(8);
    std::vector<std::string> lines;
    std::vector<std::size_t> tooLong;
    auto line = [&](std::string_view l) { lines.emplace_back(l); };
    auto longOne = [&](std::size_t n) { tooLong.push_back(n); };
    s.feed("abc\n0123456", line, longOne);
    s.feed("789abc\nde", line, longOne);
    s.feed("f\n", line, longOne);
    QCOMPARE(lines, (std::vector<std::string>{"abc", "def"}));
    QCOMPARE(tooLong, (std::vector<std::size_t>{13}));
  }

  void recordsBecomePtwsRecords() {
    ScriptMetrics m(1, 2);
    std::vector<Record> out;
    ScriptRecord r;
    r.step = 5;
    r.loss = 0.25;
    r.samples = 32;
    r.scalars = {{"acc", 0.5}};
    QCOMPARE(m.convert(r, 200.0, out), std::string());  // 200 ms since the start: its first step record
    r.step = 6;
    r.rank = 0;
    r.valLoss = 0.3;
    QCOMPARE(m.convert(r, 300.0, out), std::string());
    QCOMPARE(out.size(), std::size_t{5});
    QCOMPARE(out[0].kind, Record::Kind::Step);
    QCOMPARE(out[0].step.rank, 1);
    QCOMPARE(out[0].step.stepMs, 200.0);
    QCOMPARE(out[0].step.samplesPerS, 160.0);
    QCOMPARE(out[1].kind, Record::Kind::Scalar);
    QCOMPARE(std::string(out[1].scalarName()), std::string("acc"));
    QCOMPARE(out[2].step.rank, 0);
    QCOMPARE(out[2].step.stepMs, 300.0);  // rank 0's first
    QCOMPARE(out[3].kind, Record::Kind::Validation);
    QCOMPARE(out[3].valLoss, 0.3);
    QCOMPARE(m.lastStep(), std::int64_t{6});
    QCOMPARE(m.progressStep(), std::int64_t{5});  // rank 1 is behind
    r.rank = 2;
    QVERIFY(m.convert(r, 400.0, out).find("rank 2 is not one of this run's ranks") == 0);
    QCOMPARE(out.size(), std::size_t{5});
    // Through the record pipe and back, a scalar is whole.
    std::string frames;
    encodeRecord(out[1], frames);
    std::vector<Record> back;
    bool malformed = false;
    QCOMPARE(decodeRecords(frames, back, malformed), frames.size());
    QCOMPARE(std::string(back.at(0).scalarName()), std::string("acc"));
    QCOMPARE(back.at(0).value, 0.5);
  }

  // ---- whole runs ----

  // Two processes report through the channel; the store holds exactly what each reported,
  // and each got torchrun's environment and ptw_metrics on its path.
  void aRunStoresWhatEachRankReported() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + R"(
import ptw_metrics
with open("env.%d" % RANK, "w") as f:
    for k in ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONUNBUFFERED"]:
        f.write("%s=%s\n" % (k, os.environ[k]))
for step in range(1, 31):
    report(step, loss=1.0 / (step + RANK) + 1e-17 * step, samples=8, acc=step / 100.0)
print("done", RANK)
)");
    p.command.args = {"script.py", "--tag", "{name}"};
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto stored = storedLosses(runs);
    for (int rank = 0; rank < 2; ++rank) {
      QCOMPARE(stored.at(rank).size(), std::size_t{30});
      for (int step = 1; step <= 30; ++step) QCOMPARE(stored.at(rank).at(step), 1.0 / (step + rank) + 1e-17 * step);
      QFile env(dir.filePath(QString("env.%1").arg(rank)));
      QVERIFY(env.open(QIODevice::ReadOnly));
      const QString e = QString::fromUtf8(env.readAll());
      QVERIFY2(
          e.contains(
              QString("RANK=%1\nLOCAL_RANK=%1\nWORLD_SIZE=2\nLOCAL_WORLD_SIZE=2\nMASTER_ADDR=127.0.0.1\n").arg(rank)),
          qPrintable(e));
      QVERIFY(QRegularExpression("MASTER_PORT=\\d+\nPYTHONUNBUFFERED=1").match(e).hasMatch());
      QVERIFY(rankLog(runs, rank).contains(QString("done %1").arg(rank)));
    }
    RunStore store(runs.path().toStdString());
    const auto id = store.runs().front().id;
    QCOMPARE(store.scalarNames(id), std::vector<std::string>{"acc"});
    const auto acc = store.scalars(id, "acc", 1);
    QCOMPARE(acc.size(), std::size_t{30});
    QCOMPARE(acc[9].step, std::int64_t{10});
    QCOMPARE(acc[9].value, 0.1);
    // The CSV export carries the scalar as a column.
    const QString csv = runs.filePath("out.csv");
    store.exportCsv(id, csv.toStdString());
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QStringList rows = QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
    QVERIFY2(rows[0].endsWith(",mem_bytes,acc"), qPrintable(rows[0]));
    QCOMPARE(rows.size(), 61);
    QVERIFY2(rows[10].startsWith("0,10,") && rows[10].endsWith(",0.10000000000000001"), qPrintable(rows[10]));
    // And TensorBoard's export, read back by an independent reader, has it as scalars/acc.
    QProcess exporter;
    exporter.start(test::binDir() + "/ptw", {"export", "--runs-dir", runs.path(), "--format", "tensorboard",
                                             QString::number(id), runs.filePath("tb")});
    QVERIFY(exporter.waitForFinished(60000));
    QVERIFY2(exporter.exitCode() == 0, exporter.readAllStandardError().constData());
    QProcess reader;
    reader.start("/usr/bin/python3", {test::sourcePath("tests/core/read_tfevents.py"), runs.filePath("tb")});
    QVERIFY(reader.waitForFinished(60000));
    QVERIFY2(reader.exitCode() == 0, reader.readAllStandardError().constData());
    const QStringList events = QString::fromUtf8(reader.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(events.filter(" scalars/acc ").size(), 60);
    QVERIFY2(!events.filter(QRegularExpression("^rank1 scalars/acc 10 3dcccccd ")).isEmpty(), "acc of rank 1, step 10");
  }

  // An unmodified program reports through its output and command.pattern.
  void aPatternReadsAProgramsOutput() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"(import os
rank = int(os.environ["RANK"])
for step in range(1, 26):
    print("epoch 0 step %d loss %r" % (step, 0.5 ** step + rank))
)");
    p.command.pattern = "step {step} loss {loss}";
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto stored = storedLosses(runs);
    for (int rank = 0; rank < 2; ++rank) {
      QCOMPARE(stored.at(rank).size(), std::size_t{25});
      for (int step = 1; step <= 25; ++step) QCOMPARE(stored.at(rank).at(step), std::pow(0.5, step) + rank);
    }
  }

  // A failing process is named with its exit and last lines; the others are stopped.
  void aFailingProcessIsNamed_data() {
    QTest::addColumn<QString>("end");
    QTest::addColumn<QString>("expected");
    QTest::newRow("exit 3") << "sys.exit(3)"
                            << "exited with code 3";
    QTest::newRow("SIGKILL") << "os.kill(os.getpid(), signal.SIGKILL)"
                             << "was killed by signal 9";
  }
  void aFailingProcessIsNamed() {
    QFETCH(QString, end);
    QFETCH(QString, expected);
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + R"(
open("pid.%d" % RANK, "w").write("%d\n" % os.getpid())
for step in range(1, 100000):
    report(step, loss=1.0)
    time.sleep(0.02)
    if RANK == 1 and step == 5:
        print("boom at step 5", flush=True)
        )" + end + "\n");
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QCOMPARE(r.code, 3);
    QVERIFY2(r.err.contains("rank 1 failed"), qPrintable(r.err));
    QVERIFY2(r.err.contains("boom at step 5"), qPrintable(r.err));
    QVERIFY2(r.err.contains("/usr/bin/python3 script.py " + expected), qPrintable(r.err));
    QVERIFY(!test::anyAlive(pidsIn(dir.filePath("pid.0"))));
  }

  // The stall timeout counts a program only once it has reported: a quiet one is left be,
  // one that reported and then hangs is named.
  void theStallTimeoutStartsWithTheFirstRecord() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + R"(
open("pid.%d" % RANK, "w").write("%d\n" % os.getpid())
time.sleep(5)
if RANK == 1 and len(sys.argv) > 1:
    report(1, loss=1.0)
    time.sleep(30)
)",
                              2);
    p.run.timeoutS = 3;
    Result quiet = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(quiet.code == 0, qPrintable(quiet.out + quiet.err));
    p.command.args = {"script.py", "hang"};
    QTemporaryDir runs2;
    Result hung = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs2);
    QCOMPARE(hung.code, 3);
    QVERIFY2(hung.err.contains("rank 1 stopped making progress"), qPrintable(hung.err));
    QVERIFY(!test::anyAlive(pidsIn(dir.filePath("pid.1"))));
    QVERIFY(hung.ms < 20000);
  }

  // A stop asks with SIGINT, then SIGTERM, then kills, command.stop_grace_s apart.
  void aStopEscalatesFromIntToKill() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + R"(
seen = []
def note(sig, frame):
    seen.append(signal.Signals(sig).name)
    open("signals.%d" % RANK, "w").write(" ".join(seen))
signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGTERM, note)
open("pid.%d" % RANK, "w").write("%d\n" % os.getpid())
report(1, loss=1.0)
open("ready.%d" % RANK, "w").write("1")
while True:
    time.sleep(0.01)
)",
                              1);
    QProcess ptw;
    ptw.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "--profile",
                                        QString::fromStdString(test::writeProfile(dir, p))});
    QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(dir.filePath("ready.0")), 20000);
    QElapsedTimer t;
    t.start();
    ::kill(static_cast<pid_t>(ptw.processId()), SIGINT);
    QVERIFY(ptw.waitForFinished(20000));
    QCOMPARE(ptw.exitCode(), 5);
    QVERIFY2(t.elapsed() >= 900, qPrintable(QString::number(t.elapsed())));
    QFile f(dir.filePath("signals.0"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(f.readAll()), QString("SIGINT SIGTERM"));
    QVERIFY(!test::anyAlive(pidsIn(dir.filePath("pid.0"))));
  }

  // Children, and children that left the run's process group, do not outlive the run.
  void nothingOutlivesTheRun() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + R"(
import subprocess
kids = [subprocess.Popen(["sleep", "300"]), subprocess.Popen(["sleep", "300"], start_new_session=True)]
open("kids.%d" % RANK, "w").write("".join("%d\n" % k.pid for k in kids))
report(1, loss=1.0)
os._exit(0 if RANK == 0 else 1)
)");
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QCOMPARE(r.code, 3);
    for (int rank = 0; rank < 2; ++rank) {
      const auto kids = pidsIn(dir.filePath(QString("kids.%1").arg(rank)));
      QCOMPARE(kids.size(), std::size_t{2});
      QVERIFY2(!test::anyAlive(kids), "a child of the program outlived the run");
    }
  }

  // Whatever ends an mpirun job (a rank exits 1, is killed, hangs, or the user stops the run),
  // none of mpirun's ranks outlives it: they live in process groups of their own.
  void noMpiRankOutlivesTheRun_data() {
    QTest::addColumn<QString>("how");
    QTest::addColumn<int>("code");
    QTest::newRow("exit 1") << "os._exit(1)" << 3;
    QTest::newRow("SIGKILL") << "os.kill(os.getpid(), signal.SIGKILL)" << 3;
    QTest::newRow("hang") << "time.sleep(300)" << 3;
    QTest::newRow("stop") << "pass" << 5;
  }
  void noMpiRankOutlivesTheRun() {
    QFETCH(QString, how);
    QFETCH(int, code);
    if (QStandardPaths::findExecutable("mpirun", {"/usr/bin"}).isEmpty()) QSKIP("needs mpirun (openmpi-bin)");
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(R"(import os, signal, time
import ptw_metrics
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
open("pid.%d" % rank, "w").write("%d\n" % os.getpid())
for step in range(1, 100000):
    ptw_metrics.log(step, loss=1.0)
    time.sleep(0.02)
    if rank == 1 and step == 10:
        open("ready", "w").write("1")
        )") + how + "\n",
                              1);
    p.command.program = "mpirun";
    p.command.args = {"-np", "2", "--oversubscribe", "/usr/bin/python3", "script.py"};
    p.command.env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
    p.command.reportRanks = 2;
    p.run.timeoutS = 3;
    QProcess ptw;
    ptw.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "--profile",
                                        QString::fromStdString(test::writeProfile(dir, p))});
    if (code == 5) {
      QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(dir.filePath("ready")), 30000);
      ::kill(static_cast<pid_t>(ptw.processId()), SIGINT);
    }
    QVERIFY(ptw.waitForFinished(60000));
    QVERIFY2(ptw.exitCode() == code, ptw.readAllStandardError().constData());
    std::vector<int> ranks = pidsIn(dir.filePath("pid.0"));
    for (int pid : pidsIn(dir.filePath("pid.1"))) ranks.push_back(pid);
    QCOMPARE(ranks.size(), std::size_t{2});
    QVERIFY2(!test::anyAlive(ranks), "an MPI rank outlived the run");
  }

  // Bad input on the channel and the output: named in the rank log, the good records kept.
  void badInputIsNamedAndTheRunGoesOn() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"(import os, sys, time
path = os.environ["PTW_METRICS"]
ch = open(path, "w", buffering=1)
ch.write('{"step": 1, "loss": 0.5}\n')
ch.write('this is not json\n')
ch.write('{"step": 2, "loss": "low"}\n')
ch.write('{"step": 3, "loss": 0.25, "pad": "' + 'x' * (1 << 20) + '"}\n')
ch.write('{"step": 4, "loss": 0.125}\n')
ch.close()
time.sleep(1.6)
sys.stdout.buffer.write(bytes(range(256)) + b"\n")
sys.stdout.flush()
ch = open(path, "w", buffering=1)
ch.write('{"step": 5, "loss": 0.0625}\n')
ch.close()
)",
                              1);
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const QString log = rankLog(runs, 0);
    QVERIFY2(log.contains("metrics line 2: not valid JSON: this is not json"), qPrintable(log));
    QVERIFY2(log.contains("metrics line 3: \"loss\": expected a number, got \"low\""), qPrintable(log));
    QVERIFY2(log.contains("bytes, longer than the 65536 a line may have; dropped"), qPrintable(log));
    QVERIFY2(log.contains("the program closed its metrics channel"), qPrintable(log));
    const auto stored = storedLosses(runs);
    QCOMPARE(stored.at(0), (std::map<std::int64_t, double>{{1, 0.5}, {4, 0.125}, {5, 0.0625}}));
  }

  void aProgramThatCannotRunIsNamed_data() {
    QTest::addColumn<QString>("program");
    QTest::addColumn<QString>("expected");
    QTest::newRow("missing") << "no-such-program-ptw"
                             << "command.program: \"no-such-program-ptw\" is not found on PATH";
    QTest::newRow("not executable") << "./script.py"
                                    << "script.py is not executable";
  }
  void aProgramThatCannotRunIsNamed() {
    QFETCH(QString, program);
    QFETCH(QString, expected);
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, "print(1)\n", 1);
    p.command.program = program.toStdString();
    p.command.args = {};
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QCOMPARE(r.code, 3);
    QVERIFY2(r.err.contains(expected), qPrintable(r.err));
  }

  // A program reporting 10,000 records a second per rank through ptw_metrics loses none.
  void tenThousandRecordsASecondAreAllKept() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"(import time, ptw_metrics
n, rate = 20000, 10000.0
start = time.monotonic()
for i in range(1, n + 1):
    ptw_metrics.log(i, loss=1.0 / i, samples=1)
    if i % 100 == 0:
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
print("logged %d in %.2f s, dropped %d" % (n, time.monotonic() - start, ptw_metrics.dropped()))
)");
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto stored = storedLosses(runs);
    for (int rank = 0; rank < 2; ++rank) {
      QVERIFY2(rankLog(runs, rank).contains("dropped 0"), qPrintable(rankLog(runs, rank)));
      QCOMPARE(stored.at(rank).size(), std::size_t{20000});
      QCOMPARE(stored.at(rank).at(12345), 1.0 / 12345);
    }
  }

  // --expect and --junit judge a program's run as they judge ptw's own.
  void headlessVerdictsJudgeAScript() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + R"(
for step in range(1, 41):
    report(step, loss=1.0 / step, samples=4)
)");
    const QString profile = QString::fromStdString(test::writeProfile(dir, p));
    const QString junit = runs.filePath("out.xml");
    Result ok = runPtw({"--profile", profile, "--expect", "final.loss < 0.1", "--junit", junit}, runs);
    QVERIFY2(ok.code == 0, qPrintable(ok.out + ok.err));
    QFile f(junit);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString xml = QString::fromUtf8(f.readAll());
    QVERIFY2(xml.contains("final.loss &lt; 0.1") && !xml.contains("<failure"), qPrintable(xml));
    Result bad = runPtw({"--profile", profile, "--expect", "final.loss < 0.01"}, runs);
    QCOMPARE(bad.code, 4);
  }

  // The examples in resources/: what each stores is what its program printed, rank by rank.
  void theExamplesStoreWhatTheyPrint_data() {
    QTest::addColumn<QString>("profile");
    QTest::addColumn<int>("ranks");
    QTest::newRow("ddp, ptw_metrics") << "script-ddp.json" << 2;
    QTest::newRow("ddp, output pattern") << "script-ddp-pattern.json" << 2;
    QTest::newRow("mpirun") << "script-mpi.json" << 2;
  }
  void theExamplesStoreWhatTheyPrint() {
    QFETCH(QString, profile);
    QFETCH(int, ranks);
    QTemporaryDir runs;
    Result r =
        runPtw({"--profile", test::sourcePath("resources/profiles/" + profile), "--set", "hyper.max_steps=30"}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto stored = storedLosses(runs);
    QCOMPARE(static_cast<int>(stored.size()), ranks);
    // Under mpirun one process stands for both ranks and their lines share its log, without
    // a rank: there the (step, loss) pairs are compared as a whole.
    const bool oneProcess = profile.contains("mpi");
    const auto printed = printedLosses(runs, oneProcess ? 1 : ranks);
    std::multiset<std::pair<std::int64_t, double>> storedPairs, printedPairs;
    for (int rank = 0; rank < ranks; ++rank) {
      QCOMPARE(stored.at(rank).size(), std::size_t{30});
      for (const auto& [step, loss] : stored.at(rank)) storedPairs.insert({step, loss});
      if (!oneProcess) QCOMPARE(stored.at(rank), printed.at(rank));
    }
    static const QRegularExpression line(R"(step (\d+) loss (\S+)$)", QRegularExpression::MultilineOption);
    for (auto it = line.globalMatch(rankLog(runs, 0) + (oneProcess ? "" : rankLog(runs, 1))); it.hasNext();) {
      const auto m = it.next();
      printedPairs.insert({m.captured(1).toLongLong(), std::strtod(m.captured(2).toUtf8().constData(), nullptr)});
    }
    QVERIFY(storedPairs == printedPairs);
  }
};

QTEST_GUILESS_MAIN(TestCommand)
#include "test_command.moc"
