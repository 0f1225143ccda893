// SPDX-License-Identifier: GPL-3.0-or-later
// The command strategy: a user's program run as the ranks (Note [Script ranks] in
// common/command.h). First its plain parts (the protocol's parser, the output pattern,
// templates, the environment), then whole headless runs of small Python programs: what
// they report is stored exactly, failures are named, stops escalate, nothing outlives a run.
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QtTest>

#include <signal.h>

#include <algorithm>
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
  p.hyper.maxSteps = 0;  // the scripts end themselves; a test of the bound sets one
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
    QTest::newRow("no capture") << "loss: [0-9.]+"
                                << "captures nothing";
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
    p.command.pattern = "loss [0-9]+";
    std::map<std::string, std::string> errors;
    for (const auto& e : validate(p)) errors[e.path] = e.message;
    QCOMPARE(errors["command.args[1]"], std::string("{hyper.lrr} names no profile field (e.g. {hyper.lr})"));
    QVERIFY(errors["command.env[0]"].find("expected KEY=VALUE") == 0);
    QVERIFY(errors.count("command.env[1]") == 0);
    QVERIFY(errors["command.program"].find("needs a program") != std::string::npos);
    QVERIFY(errors["command.pattern"].find("captures nothing") != std::string::npos);
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
    ScriptContext ctx{1,          3,          29500, "/run/rank1.metrics",    "/share/ptw/python",
                      "42-29500", "2024-run", 2,     "/run/rank1.error.json", "/run/rank1.pystacks"};
    const auto env = scriptEnvironment(p, ctx, {"PATH=/usr/bin", "PYTHONPATH=/mine", "RANK=9"});
    std::map<std::string, std::string> vars;
    for (const auto& e : env) vars[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
    QCOMPARE(vars["RANK"], std::string("7"));  // the profile's env comes last
    QCOMPARE(vars["LOCAL_RANK"], std::string("1"));
    QCOMPARE(vars["WORLD_SIZE"], std::string("3"));
    QCOMPARE(vars["LOCAL_WORLD_SIZE"], std::string("3"));
    QCOMPARE(vars["GROUP_RANK"], std::string("0"));
    QVERIFY(!vars.count("NODE_RANK"));  // across hosts only, as torchrun on one host
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
    // Note [Python stacks].
    QCOMPARE(vars["PTW_STACKS_FILE"], std::string("/run/rank1.pystacks"));
    QCOMPARE(vars["PTW_STACKS_SIGNAL"], std::to_string(stacksSignal()));
    QVERIFY(stacksSignal() >= SIGRTMIN && stacksSignal() <= SIGRTMAX);
    QCOMPARE(vars["PYTHONFAULTHANDLER"], std::string("1"));
    // As torchrun, a value ptw's own environment gives is kept.
    QCOMPARE(scriptEnvironment(p, ctx, {"NCCL_ASYNC_ERROR_HANDLING=0"}).front(),
             std::string("NCCL_ASYNC_ERROR_HANDLING=0"));
  }

  // torchrun's multi-node numbering: hosts in hosts.hosts order, ranks of a host in rank order.
  void ranksArePlacedOnTheirHosts_data() {
    QTest::addColumn<QStringList>("hosts");  // each rank's host
    QTest::addColumn<int>("rank");
    QTest::addColumn<QList<int>>("place");  // local rank, local world, group rank, group world
    const QStringList twoByTwo{"a", "a", "b", "b"};
    QTest::newRow("first of the first host") << twoByTwo << 0 << QList<int>{0, 2, 0, 2};
    QTest::newRow("second of the first host") << twoByTwo << 1 << QList<int>{1, 2, 0, 2};
    QTest::newRow("first of the second host") << twoByTwo << 2 << QList<int>{0, 2, 1, 2};
    QTest::newRow("second of the second host") << twoByTwo << 3 << QList<int>{1, 2, 1, 2};
    QTest::newRow("uneven slots") << QStringList{"a", "b", "b", "b", "c"} << 3 << QList<int>{2, 3, 1, 3};
    QTest::newRow("one host") << QStringList{"a", "a", "a"} << 2 << QList<int>{2, 3, 0, 1};
  }
  void ranksArePlacedOnTheirHosts() {
    QFETCH(QStringList, hosts);
    QFETCH(int, rank);
    QFETCH(QList<int>, place);
    std::vector<std::string> h;
    for (const auto& s : hosts) h.push_back(s.toStdString());
    QCOMPARE(placeRank(h, rank), (HostPlace{place[0], place[1], place[2], place[3]}));
  }

  void aRankWithNoHostIsNamed() {
    try {
      placeRank({"a", "b"}, 2);
      QFAIL("rank 2 of 2 slots was placed");
    } catch (const Error& e) {
      QCOMPARE(std::string(e.what()), std::string("rank 2 has no host (2 slots in hosts.hosts)"));
    }
  }

  // Across hosts the program sees what torchrun gives a multi-node run: its host's local rank
  // and size, the host's index as GROUP_RANK and NODE_RANK, and the master's address.
  void acrossHostsTheProgramGetsTorchrunsMultiNodeVariables() {
    Profile p = defaultProfile();
    p.strategy.kind = "command";
    p.command.program = "python3";
    ScriptContext ctx{3, 4, 29501, "/run/rank3.metrics", "", "42-29501", "run", 0, "", ""};
    ctx.place = placeRank({"a", "a", "b", "b"}, 3);
    ctx.masterAddr = "10.0.0.1";
    std::map<std::string, std::string> vars;
    for (const auto& e : scriptEnvironment(p, ctx, {"PATH=/usr/bin"}))
      vars[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
    const std::map<std::string, std::string> expected{{"RANK", "3"},
                                                      {"LOCAL_RANK", "1"},
                                                      {"WORLD_SIZE", "4"},
                                                      {"LOCAL_WORLD_SIZE", "2"},
                                                      {"GROUP_RANK", "1"},
                                                      {"NODE_RANK", "1"},
                                                      {"GROUP_WORLD_SIZE", "2"},
                                                      {"ROLE_RANK", "3"},
                                                      {"ROLE_WORLD_SIZE", "4"},
                                                      {"MASTER_ADDR", "10.0.0.1"},
                                                      {"MASTER_PORT", "29501"},
                                                      {"OMP_NUM_THREADS", "1"}};
    for (const auto& [k, v] : expected)
      QCOMPARE(QString::fromStdString(k + "=" + vars[k]), QString::fromStdString(k + "=" + v));
    // One rank on each host shares no cores: no OpenMP limit, as torchrun with one process a node.
    ctx.place = placeRank({"a", "b"}, 1);
    for (const auto& e : scriptEnvironment(p, ctx, {})) QVERIFY2(e.rfind("OMP_NUM_THREADS=", 0) != 0, e.c_str());
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
    const ScriptContext ctx{0, world, 29500, "/run/rank0.metrics", "", "42-29500", "2024-run", 0, "", ""};
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
    QCOMPARE(m.take(r, 200.0, out), std::string());  // 200 ms since the start: its first step
    QVERIFY(out.empty());                            // held for more of step 5
    r.step = 6;
    r.rank = 0;
    r.valLoss = 0.3;
    QCOMPARE(m.take(r, 300.0, out), std::string());
    m.flush(400.0, 0, out);  // rank by rank: rank 0's step 6, then rank 1's step 5
    QCOMPARE(out.size(), std::size_t{5});
    QCOMPARE(out[0].kind, Record::Kind::Step);
    QCOMPARE(out[0].step.rank, 0);
    QCOMPARE(out[0].step.stepMs, 300.0);  // rank 0's first
    QCOMPARE(out[1].kind, Record::Kind::Validation);
    QCOMPARE(out[1].valLoss, 0.3);
    QCOMPARE(out[3].kind, Record::Kind::Step);
    QCOMPARE(out[3].step.rank, 1);
    QCOMPARE(out[3].step.stepMs, 200.0);
    QCOMPARE(out[3].step.samplesPerS, 160.0);
    QCOMPARE(out[3].step.stepOffset, std::int64_t{0});
    QCOMPARE(out[4].kind, Record::Kind::Scalar);
    QCOMPARE(std::string(out[4].scalarName()), std::string("acc"));
    QCOMPARE(m.lastStep(), std::int64_t{6});
    QCOMPARE(m.progressStep(), std::int64_t{5});  // rank 1 is behind
    r.rank = 2;
    QVERIFY(m.take(r, 400.0, out).find("rank 2 is not one of this run's ranks") == 0);
    QCOMPARE(out.size(), std::size_t{5});
    // Through the record pipe and back, a scalar is whole.
    std::string frames;
    encodeRecord(out[4], frames);
    std::vector<Record> back;
    bool malformed = false;
    QCOMPARE(decodeRecords(frames, back, malformed), frames.size());
    QCOMPARE(std::string(back.at(0).scalarName()), std::string("acc"));
    QCOMPARE(back.at(0).value, 0.5);
  }

  // Note [Stretches of steps]: the fields of one step, given in several records, make one
  // record; a field given twice keeps its last value. Nothing a rank sends for a step it
  // already sent can break the record pipe.
  void fieldsOfOneStepMerge() {
    ScriptMetrics m(0, 1);
    std::vector<Record> out;
    auto take = [&](const char* line, double at) {
      ScriptRecord r;
      std::string error;
      QVERIFY2(parseMetricsLine(line, r, error), error.c_str());
      QCOMPARE(m.take(r, at, out), std::string());
    };
    take(R"({"step": 1, "loss": 0.9})", 10);
    take(R"({"step": 1, "loss": 0.8, "accuracy": 0.25})", 11);
    take(R"({"step": 1, "lr": 0.1, "accuracy": 0.5})", 12);
    take(R"({"step": 2, "loss": 0.7})", 20);
    m.flush(30, 0, out);
    std::vector<Record> steps, scalars;
    for (const auto& r : out) (r.kind == Record::Kind::Step ? steps : scalars).push_back(r);
    QCOMPARE(steps.size(), std::size_t{2});
    QCOMPARE(steps[0].step.step, std::int64_t{1});
    QCOMPARE(steps[0].step.loss, 0.8);
    QCOMPARE(steps[0].step.lr, 0.1);
    QCOMPARE(steps[1].step.step, std::int64_t{2});
    QVERIFY(std::isnan(steps[1].step.lr));  // not reported, not 0
    QCOMPARE(scalars.size(), std::size_t{1});
    QCOMPARE(scalars[0].value, 0.5);
    // Every record makes frames the launcher reads whole, as a worker's groups of them too.
    std::string frames;
    for (const auto& r : out) encodeRecord(r, frames);
    std::vector<Record> back;
    bool malformed = false;
    QCOMPARE(decodeRecords(frames, back, malformed), frames.size());
    QVERIFY(!malformed);
    // A step record field after the step went out (held past kHoldMs) is refused, not sent twice.
    take(R"({"step": 3, "loss": 0.6})", 100);
    out.clear();
    m.flush(100 + ScriptMetrics::kHoldMs, ScriptMetrics::kHoldMs, out);
    QCOMPARE(out.size(), std::size_t{1});
    ScriptRecord late;
    std::string error;
    QVERIFY(parseMetricsLine(R"({"step": 3, "loss": 0.5, "grad_norm": 2})", late, error));
    QVERIFY(m.take(late, 2000, out).find("a field of a step whose record went out") != std::string::npos);
    QVERIFY(parseMetricsLine(R"({"step": 3, "grad_norm": 2})", late, error));
    QCOMPARE(m.take(late, 2001, out), std::string());  // a scalar alone still goes
    QCOMPARE(out.size(), std::size_t{2});
    QCOMPARE(out[1].kind, Record::Kind::Scalar);
    QCOMPARE(out[1].step.step, std::int64_t{3});
  }

  // A per-epoch counter starts a new stretch each epoch; the global step goes on by the
  // counter's stride, and each record keeps the script's own counter.
  void aCounterThatGoesBackStartsAStretch_data() {
    QTest::addColumn<QString>("records");  // epoch:counter ...
    QTest::addColumn<QString>("global");   // the global steps, in order
    QTest::addColumn<QString>("own");      // the script's counters, in order
    QTest::newRow("per-epoch index, every 10") << "0:0 0:10 0:20 1:0 1:10 1:20 2:0"
                                               << "0 10 20 30 40 50 60"
                                               << "0 10 20 0 10 20 0";
    QTest::newRow("1-based, no epoch") << "-:1 -:2 -:3 -:1 -:2"
                                       << "1 2 3 4 5"
                                       << "1 2 3 1 2";
    QTest::newRow("epoch changes, counter stays") << "0:0 1:0 2:0"
                                                  << "0 1 2"
                                                  << "0 0 0";
    QTest::newRow("global counter with epochs") << "0:98 0:99 1:100 1:101"
                                                << "98 99 100 101"
                                                << "98 99 100 101";
  }
  void aCounterThatGoesBackStartsAStretch() {
    QFETCH(QString, records);
    QFETCH(QString, global);
    QFETCH(QString, own);
    ScriptMetrics m(0, 1);
    std::vector<Record> out;
    double at = 0;
    for (const auto& rec : records.split(' ')) {
      ScriptRecord r;
      const auto parts = rec.split(':');
      if (parts[0] != "-") r.epoch = parts[0].toLongLong();
      r.step = parts[1].toLongLong();
      r.loss = 1.0;
      QCOMPARE(m.take(r, at += 10, out), std::string());
    }
    m.flush(at, 0, out);
    QStringList gotGlobal, gotOwn;
    for (const auto& r : out) {
      gotGlobal << QString::number(r.step.step);
      gotOwn << QString::number(r.step.ownStep());
    }
    QCOMPARE(gotGlobal.join(' '), global);
    QCOMPARE(gotOwn.join(' '), own);
  }

  // A record that stands for several steps (a script printing every 10th) gives per-step
  // times and rates; samples come from the profile's batch when the script reports none,
  // and are "not reported" (NaN) when neither says.
  void aRecordStandsForTheStepsSinceTheLast() {
    ScriptMetrics declared(0, 1, 32), silent(0, 1);
    for (ScriptMetrics* m : {&declared, &silent}) {
      std::vector<Record> out;
      ScriptRecord r;
      r.loss = 1;
      r.step = 10;
      QCOMPARE(m->take(r, 100, out), std::string());
      r.step = 20;
      QCOMPARE(m->take(r, 600, out), std::string());  // 10 steps in 500 ms
      m->flush(600, 0, out);
      QCOMPARE(out.size(), std::size_t{2});
      QCOMPARE(out[1].step.stepMs, 50.0);
      if (m == &declared)
        QCOMPARE(out[1].step.samplesPerS, 640.0);
      else
        QVERIFY(std::isnan(out[1].step.samplesPerS));
      QCOMPARE(out[1].step.epoch, std::int64_t{-1});
      QCOMPARE(out[1].step.memBytes, std::int64_t{-1});
    }
    // A loss not reported is notReported(), apart from a NaN loss; a group keeps it out of its sums.
    ScriptMetrics m(0, 1);
    std::vector<Record> out;
    ScriptRecord r;
    r.step = 1;
    r.samples = 8;
    QCOMPARE(m.take(r, 10, out), std::string());
    m.flush(10, 0, out);
    QVERIFY(isNotReported(out.at(0).step.loss));
    QVERIFY(!isNotReported(std::nan("")));
    StepGroup g;
    g.add(out[0].step);
    QVERIFY(isNotReported(g.lossSum));
    StepRecord withLoss = out[0].step;
    withLoss.step = 2;
    withLoss.loss = 0.5;
    g.add(withLoss);
    QCOMPARE(g.lossSum, 0.5);
    QCOMPARE(g.count, std::int64_t{2});
  }

  // A pattern without {step} makes each matching line the next step; times in seconds fill
  // the step split in ms.
  void aPatternWithoutAStepCountsLines() {
    OutputPattern p(R"(Time\s+{step_s} \(.*\)\s+Data\s+{data_s} \(.*\)\s+Loss {loss})");
    QVERIFY(!p.hasStep());
    ScriptMetrics m(0, 1);
    std::vector<Record> out;
    const char* lines[] = {"Time  0.512 ( 0.634)   Data  0.012 ( 0.101)   Loss 6.9011e+00 (6.9120e+00)", "unrelated",
                           "Time  0.500 ( 0.600)   Data  0.010 ( 0.090)   Loss 6.8e+00 (6.9e+00)"};
    for (const char* line : lines) {
      ScriptRecord r;
      if (p.match(line, r)) QCOMPARE(m.take(r, 1, out), std::string());
    }
    m.flush(1, 0, out);
    QCOMPARE(out.size(), std::size_t{2});
    QCOMPARE(out[0].step.step, std::int64_t{1});
    QCOMPARE(out[1].step.step, std::int64_t{2});
    QCOMPARE(out[0].step.stepMs, 0.512 * 1000);
    QCOMPARE(out[0].step.dataMs, 0.012 * 1000);
    QCOMPARE(out[1].step.loss, 6.8);
    QVERIFY(std::isnan(out[0].step.computeMs));
  }

  // A line that is the pattern's but whose capture is not what its key takes is named.
  void aBadCaptureIsNamed_data() {
    QTest::addColumn<QString>("line");
    QTest::addColumn<QString>("expected");  // "" for a line that is not the pattern's
    QTest::newRow("not a number") << "step 3 loss abc"
                                  << "{loss} is \"abc\", not a number";
    QTest::newRow("a fractional step") << "step 2.5 loss 1"
                                       << "{step} is \"2.5\", not an integer >= 0";
    QTest::newRow("a NaN step") << "step nan loss 1"
                                << "{step} is \"nan\", not an integer >= 0";
    QTest::newRow("another line") << "epoch 3 done"
                                  << "";
  }
  void aBadCaptureIsNamed() {
    QFETCH(QString, line);
    QFETCH(QString, expected);
    OutputPattern p("step {step} loss {loss}");
    ScriptRecord r;
    std::string problem;
    const auto m = p.match(line.toStdString(), r, problem);
    QCOMPARE(m, expected.isEmpty() ? OutputPattern::Match::None : OutputPattern::Match::Bad);
    QCOMPARE(QString::fromStdString(problem), expected);
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
    QVERIFY2(rows[0].endsWith(",mem_bytes,script_step,acc"), qPrintable(rows[0]));
    QCOMPARE(rows.size(), 61);
    QVERIFY2(rows[10].startsWith("0,10,") && rows[10].endsWith(",10,0.1"), qPrintable(rows[10]));  // shortest exact
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

  // The shape of torchvision's ImageNet example: a per-epoch batch index, times in seconds
  // and running averages in parentheses, printed every other batch. Each rank's stored
  // records are what it printed, in order and as many; the export writes as many rows as it
  // says, with the script's own counter beside ptw's step.
  void aPerEpochCounterWithTimesInSecondsIsKept() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"PY(import os, random, time
rank = int(os.environ["RANK"])
rnd = random.Random(rank)
N = 7
truth = open("truth.%d" % rank, "w")
for epoch in range(3):
    sums = [0.0, 0.0, 0.0]
    for i in range(N):
        t, d, loss = rnd.uniform(0.001, 0.01), rnd.uniform(0.0001, 0.001), rnd.uniform(0.5, 7.0)
        for k, v in enumerate((t, d, loss)):
            sums[k] += v
        if i % 2 == 0 or i == N - 1:
            line = "Epoch: [%d][%3d/%d]\tTime %6.3f (%6.3f)\tData %6.3f (%6.3f)\tLoss %.4e (%.4e)" % (
                epoch, i, N, t, sums[0] / (i + 1), d, sums[1] / (i + 1), loss, sums[2] / (i + 1))
            print(line)
            truth.write(line + "\n")
        time.sleep(0.003)
truth.close()
)PY");
    p.command.pattern =
        R"(Epoch: \[{epoch}\]\[\s*{step}/\d+\]\s+Time\s+{step_s} \(.*?\)\s+Data\s+{data_s} \(.*?\)\s+Loss {loss} \()";
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    RunStore store(runs.path().toStdString());
    const auto id = store.runs().front().id;
    std::map<int, std::vector<StepRecord>> stored;
    for (const auto& s : store.steps(id)) stored[s.rank].push_back(s);
    static const QRegularExpression printed(
        R"(^Epoch: \[(\d+)\]\[\s*(\d+)/\d+\]\tTime\s+(\S+) \(.*\)\tData\s+(\S+) \(.*\)\tLoss (\S+) \()");
    for (int rank = 0; rank < 2; ++rank) {
      QFile f(dir.filePath(QString("truth.%1").arg(rank)));
      QVERIFY(f.open(QIODevice::ReadOnly));
      const QStringList lines = QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
      QCOMPARE(lines.size(), 12);  // 0 2 4 6 of 7 batches, 3 epochs
      QCOMPARE(stored[rank].size(), std::size_t(lines.size()));
      std::int64_t last = -1;
      for (int i = 0; i < lines.size(); ++i) {
        const auto m = printed.match(lines[i]);
        QVERIFY2(m.hasMatch(), qPrintable(lines[i]));
        const StepRecord& s = stored[rank][static_cast<std::size_t>(i)];
        auto number = [&](int group) { return std::strtod(m.captured(group).toUtf8().constData(), nullptr); };
        QCOMPARE(s.epoch, m.captured(1).toLongLong());
        QCOMPARE(s.ownStep(), m.captured(2).toLongLong());
        QCOMPARE(s.stepMs, number(3) * 1000);
        QCOMPARE(s.dataMs, number(4) * 1000);
        QCOMPARE(s.loss, number(5));
        QVERIFY(std::isnan(s.computeMs) && std::isnan(s.lr));  // not reported
        QVERIFY2(s.step > last, "the global step goes on across epochs");
        last = s.step;
      }
      QCOMPARE(stored[rank].back().step, std::int64_t{20 + 2});  // epoch 2, batch 6: 2 x 8 + 6
    }
    QProcess exporter;
    const QString csv = runs.filePath("out.csv");
    exporter.start(test::binDir() + "/ptw", {"export", "--runs-dir", runs.path(), QString::number(id), csv});
    QVERIFY(exporter.waitForFinished(60000));
    const QString said = QString::fromUtf8(exporter.readAllStandardOutput());
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QStringList rows = QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
    QVERIFY2(said.contains(QString(": %1 rows written").arg(rows.size() - 1)), qPrintable(said));
    QCOMPARE(rows.size() - 1, 24);
    const QStringList header = rows[0].split(',');
    QVERIFY2(header.contains("script_step") && header.contains("step"), qPrintable(rows[0]));
    const QStringList row = rows[5].split(',');  // rank 0's 5th record: epoch 1, batch 0
    QCOMPARE(row[header.indexOf("step")], QString("8"));
    QCOMPARE(row[header.indexOf("script_step")], QString("0"));
    QCOMPARE(row[header.indexOf("epoch")], QString("1"));
    QCOMPARE(row[header.indexOf("lr")], QString());
    QCOMPARE(row[header.indexOf("mem_bytes")], QString());
    QCOMPARE(row[header.indexOf("samples_per_s")], QString());
  }

  // Two reports of one step, by ptw_metrics or by two lines a pattern matches: one record,
  // the last value of each field, and every step after it kept.
  void aStepReportedTwiceIsOneRecord_data() {
    QTest::addColumn<bool>("pattern");
    QTest::newRow("two log calls") << false;
    QTest::newRow("two matching lines") << true;
  }
  void aStepReportedTwiceIsOneRecord() {
    QFETCH(bool, pattern);
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"PY(import os, sys, ptw_metrics
rank = int(os.environ["RANK"])
lines = len(sys.argv) > 1
for step in range(1, 41):
    a = 1.0 / (step + rank)
    b = a / 3
    if lines:
        print("step %d loss %r" % (step, a))
        print("step %d loss %r accuracy %r (running avg)" % (step, b, step / 100.0))
    else:
        ptw_metrics.log(step, loss=a)
        ptw_metrics.log(step, loss=b, accuracy=step / 100.0)
)PY");
    if (pattern) {
      p.command.args = {"script.py", "lines"};
      p.command.pattern = R"(step {step} loss {loss}(?: accuracy {accuracy})?)";
    }
    const QString summary = runs.filePath("summary.json");
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p)), "--summary", summary}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto stored = storedLosses(runs);
    for (int rank = 0; rank < 2; ++rank) {
      QVERIFY2(!rankLog(runs, rank).contains("malformed"), qPrintable(rankLog(runs, rank)));
      QCOMPARE(stored.at(rank).size(), std::size_t{40});
      for (int step = 1; step <= 40; ++step) QCOMPARE(stored.at(rank).at(step), 1.0 / (step + rank) / 3);
    }
    RunStore store(runs.path().toStdString());
    const auto acc = store.scalars(store.runs().front().id, "accuracy", 1);
    QCOMPARE(acc.size(), std::size_t{40});
    QCOMPARE(acc.back().value, 0.4);
    QFile f(summary);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(s["final"].toObject()["step"].toDouble(), 40.0);
    QCOMPARE(s["final"].toObject()["loss"].toDouble(), (1.0 / 40 / 3 + 1.0 / 41 / 3) / 2);
  }

  // Processes the script forks print their own lines among its own; the pattern takes the
  // script's, each as printed, and none is lost.
  void forkedProcessesPrintingAmongTheLinesLoseNone() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"PY(import os, time
rank = int(os.environ["RANK"])
children = []
for w in range(2):
    pid = os.fork()
    if pid == 0:
        for k in range(400):
            print("worker %d loaded batch %d of rank %d" % (w, k, rank))
            if k % 20 == 0:
                time.sleep(0.001)
        os._exit(0)
    children.append(pid)
truth = open("truth.%d" % rank, "w")
for step in range(1, 151):
    loss = 1.0 / (step + rank) + 1e-13 * step
    print("step %d loss %r" % (step, loss))
    truth.write("%d %r\n" % (step, loss))
for pid in children:
    os.waitpid(pid, 0)
)PY");
    p.command.pattern = "step {step} loss {loss}";
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto stored = storedLosses(runs);
    for (int rank = 0; rank < 2; ++rank) {
      QFile f(dir.filePath(QString("truth.%1").arg(rank)));
      QVERIFY(f.open(QIODevice::ReadOnly));
      std::map<std::int64_t, double> truth;
      for (const auto& line : QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts))
        truth[line.section(' ', 0, 0).toLongLong()] = std::strtod(line.section(' ', 1).toUtf8().constData(), nullptr);
      QCOMPARE(truth.size(), std::size_t{150});
      QCOMPARE(stored.at(rank), truth);
      QVERIFY(rankLog(runs, rank).contains(QString("worker 1 loaded batch 399 of rank %1").arg(rank)));
    }
  }

  // hyper.max_steps bounds a program that has no limit of its own: once every rank reported
  // it, the program is stopped as a stop does, and the run finished.
  void maxStepsBoundsAProgram() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"PY(import os, sys, time
rank = int(os.environ["RANK"])
limit = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else None
step = 0
try:
    while limit is None or step < limit:
        step += 1
        print("step %d loss %r" % (step, 1.0 / step))
        time.sleep(0.01)
except KeyboardInterrupt:
    open("interrupted.%d" % rank, "w").write(str(step))
)PY");
    p.command.pattern = "step {step} loss {loss}";
    p.hyper.maxSteps = 30;
    const QString summary = runs.filePath("summary.json");
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p)), "--summary", summary}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("ranks reached step 30 (hyper.max_steps) and were stopped"), qPrintable(r.out));
    QFile f(summary);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(s["status"].toString(), QString("finished"));
    for (int rank = 0; rank < 2; ++rank) {
      QFile done(dir.filePath(QString("interrupted.%1").arg(rank)));
      QVERIFY2(done.open(QIODevice::ReadOnly), "the program was stopped by SIGINT, gracefully");
      const auto stored = storedLosses(runs);
      QVERIFY(stored.at(rank).size() >= 30);
      QCOMPARE(static_cast<qint64>(stored.at(rank).size()), QString(done.readAll()).toLongLong());  // every step kept
    }
    // A program told the limit ({hyper.max_steps} in its arguments) ends itself, unstopped.
    p.command.args = {"script.py", "--steps", "{hyper.max_steps}"};
    QTemporaryDir runs2;
    for (int rank = 0; rank < 2; ++rank) QFile::remove(dir.filePath(QString("interrupted.%1").arg(rank)));
    Result told = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs2);
    QVERIFY2(told.code == 0, qPrintable(told.out + told.err));
    QVERIFY2(told.out.contains("all 2 ranks finished"), qPrintable(told.out));
    QVERIFY(!QFile::exists(dir.filePath("interrupted.0")) && !QFile::exists(dir.filePath("interrupted.1")));
    QCOMPARE(storedLosses(runs2).at(1).size(), std::size_t{30});
  }

  // Note [Not reported]: a script that reports no samples has steps/s and no samples/s,
  // shown as such everywhere, never as 0; with the batch passed to it, samples/s follows.
  void whatNobodyReportedIsNotZero() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"PY(import time
for step in range(1, 61):
    print("step %d loss %r" % (step, 0.651298 if step == 1 else 1.0 / step))
    time.sleep(0.002)
)PY",
                              1);
    p.command.pattern = "step {step} loss {loss}";
    const QString summary = runs.filePath("summary.json");
    const QString profile = QString::fromStdString(test::writeProfile(dir, p));
    Result r = runPtw({"--profile", profile, "--summary", summary}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains(QString::fromUtf8("throughput \u2013 samples/s, ")), qPrintable(r.out));
    QVERIFY2(QRegularExpression(" samples/s, [0-9.]+ steps/s").match(r.out).hasMatch(), qPrintable(r.out));
    QFile f(summary);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    QVERIFY(s["throughput"].toObject()["samples_per_s"].isNull());
    QVERIFY(s["throughput"].toObject()["steps_per_s"].toDouble() > 0);
    QProcess list;
    list.start(test::binDir() + "/ptw", {"runs", "--runs-dir", runs.path()});
    QVERIFY(list.waitForFinished(60000));
    const QStringList listed = QString::fromUtf8(list.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts);
    QVERIFY2(listed.size() == 2 && listed[1].contains(QString::fromUtf8("\u2013")), qPrintable(listed.join('\n')));
    RunStore store(runs.path().toStdString());
    const QString csv = runs.filePath("out.csv");
    store.exportCsv(store.runs().front().id, csv.toStdString());
    QFile c(csv);
    QVERIFY(c.open(QIODevice::ReadOnly));
    const QStringList rows = QString::fromUtf8(c.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(rows[0],
             QString("rank,step,epoch,loss,samples_per_s,step_ms,data_ms,compute_ms,comm_ms,opt_ms,lr,mem_bytes,"
                     "script_step"));
    QVERIFY2(QRegularExpression(R"(^0,1,,0\.651298,,[0-9.e-]+,,,,,,,1$)").match(rows[1]).hasMatch(),
             qPrintable(rows[1]));
    // The batch, passed to the program, gives samples/s: the batch times steps/s.
    p.command.args = {"script.py", "--batch-size", "{hyper.batch_size}"};
    p.hyper.batchSize = 48;
    QFile::remove(summary);
    Result batch =
        runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p)), "--summary", summary}, runs);
    QVERIFY2(batch.code == 0, qPrintable(batch.out + batch.err));
    QFile g(summary);
    QVERIFY(g.open(QIODevice::ReadOnly));
    s = QJsonDocument::fromJson(g.readAll()).object();
    const double samples = s["throughput"].toObject()["samples_per_s"].toDouble();
    const double steps = s["throughput"].toObject()["steps_per_s"].toDouble();
    QVERIFY2(std::fabs(samples - 48 * steps) < 1e-6 * samples, qPrintable(QString("%1 vs %2").arg(samples).arg(steps)));
  }

  // Note [Diverged runs]: a loss that is NaN is named with its rank and step; run.on_nan
  // "stop" fails the run there.
  void aNanLossIsNamed_data() {
    QTest::addColumn<QString>("onNan");
    QTest::addColumn<int>("code");
    QTest::newRow("warn") << "warn" << 0;
    QTest::newRow("stop") << "stop" << 3;
  }
  void aNanLossIsNamed() {
    QFETCH(QString, onNan);
    QFETCH(int, code);
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"PY(import os, time
rank = int(os.environ["RANK"])
for step in range(1, 31):
    print("step %d loss %s" % (step, "nan" if rank == 1 and step >= 3 else repr(1.0 / step)))
    time.sleep(0.01)
)PY");
    p.command.pattern = "step {step} loss {loss}";
    p.run.onNan = onNan.toStdString();
    const QString summary = runs.filePath("summary.json");
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p)), "--summary", summary}, runs);
    QCOMPARE(r.code, code);
    QVERIFY2((r.out + r.err).contains("rank 1: loss is NaN since step 3"), qPrintable(r.out + r.err));
    QFile f(summary);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(s["diverged_at_step"].toInt(), 3);
    QCOMPARE(s["diverged"].toObject()["rank"].toInt(), 1);
  }

  // ptw's own ranks diverge too: a learning rate of 1e9 is named with its rank and step.
  void aNativeRunThatDivergesIsNamed() {
    QTemporaryDir runs;
    const QString summary = runs.filePath("summary.json");
    Result r = runPtw({"--set", "hyper.lr=1e9", "--set", "hyper.max_steps=30", "--summary", summary}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto m = QRegularExpression(R"(rank (\d): loss is (NaN|infinite|-infinite) since step (\d+))").match(r.out);
    QVERIFY2(m.hasMatch(), qPrintable(r.out));
    QFile f(summary);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject s = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(s["diverged_at_step"].toInt(), m.captured(3).toInt());
    // The step named is the first whose stored loss is not finite, on that rank.
    RunStore store(runs.path().toStdString());
    std::int64_t first = -1;
    for (const auto& st : store.steps(store.runs().front().id))
      if (st.rank == m.captured(1).toInt() && !std::isfinite(st.loss) && first < 0) first = st.step;
    QCOMPARE(first, m.captured(3).toLongLong());
  }

  // Output the pattern cannot take is named in the rank log, line by line, and what it could
  // take is kept.
  void badOutputIsNamed() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"PY(import os, sys
print("step 1 loss 0.5")
print("step 2 loss abc")
print("step 2.5 loss 1")
print("step nan loss 1")
print("x" * (1 << 20))
sys.stdout.flush()
with open(os.environ["PTW_METRICS"], "w") as ch:
    ch.write('{"step": NaN, "loss": 1}\n')
print("step 3 loss 0.25")
)PY",
                              1);
    p.command.pattern = "step {step} loss {loss}";
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const QString log = rankLog(runs, 0);
    QVERIFY2(log.contains("output line 2: command.pattern: {loss} is \"abc\", not a number"), qPrintable(log));
    QVERIFY2(log.contains("output line 3: command.pattern: {step} is \"2.5\", not an integer >= 0"), qPrintable(log));
    QVERIFY2(log.contains("output line 4: command.pattern: {step} is \"nan\", not an integer >= 0"), qPrintable(log));
    QVERIFY2(log.contains("output line 5: 1048576 bytes, longer than the 4096 command.pattern searches"),
             qPrintable(log));
    QVERIFY2(log.contains("metrics line 1: \"step\": expected an integer >= 0, got \"NaN\""), qPrintable(log));
    QCOMPARE(storedLosses(runs).at(0), (std::map<std::int64_t, double>{{1, 0.5}, {3, 0.25}}));
  }

  // A pattern that takes nothing is said once: at the 1000th line, or at the end of a shorter run.
  void aPatternThatMatchesNothingIsSaidOnce_data() {
    QTest::addColumn<int>("lines");
    QTest::addColumn<QString>("expected");
    QTest::newRow("long") << 1500 << "matched none of the first 1000 output line(s)";
    QTest::newRow("short") << 5 << "matched none of the first 5 output line(s)";
  }
  void aPatternThatMatchesNothingIsSaidOnce() {
    QFETCH(int, lines);
    QFETCH(QString, expected);
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, R"PY(import sys
for step in range(1, int(sys.argv[1]) + 1):
    print("step %d loss %r" % (step, 1.0 / step))
)PY",
                              1);
    p.command.args = {"script.py", QString::number(lines).toStdString()};
    p.command.pattern = "iteration {step} cost {loss}";
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const QString log = rankLog(runs, 0);
    QCOMPARE(log.count("warning: command.pattern \"iteration {step} cost {loss}\" matched none"), 1);
    QVERIFY2(log.contains(expected), qPrintable(log.right(400)));
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

  // `ptw sweep` of a command profile runs the program itself with each worker count as its
  // processes, the one-process run first whatever the order given; every point is a stored
  // command run holding the command. Samples/s is what the program reports (8 samples in 5 ms a
  // rank: 1600 a rank), or, where it reports none, not reported, with its steps/s alone.
  void aSweepRunsTheProgramWithEachRankCount_data() {
    QTest::addColumn<bool>("samples");
    QTest::newRow("samples reported") << true;
    QTest::newRow("loss only") << false;
  }
  void aSweepRunsTheProgramWithEachRankCount() {
    QFETCH(bool, samples);
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + QString(R"(
steps = int(sys.argv[2])
open("ran.%s.%d" % (os.environ["WORLD_SIZE"], RANK), "w").write("%d\n" % steps)
for step in range(1, steps + 1):
    report(step, loss=1.0 / step, step_ms=5.0%1)
)")
                                                          .arg(samples ? ", samples=8" : ""));
    p.command.args = {"script.py", "--steps", "{hyper.max_steps}"};
    const QString profile = QString::fromStdString(test::writeProfile(dir, p));
    QProcess ptw;
    ptw.start(test::binDir() + "/ptw",
              {"sweep", "--runs-dir", runs.path(), "--profile", profile, "--workers", "2,1", "--steps", "40", "--csv",
               runs.filePath("s.csv"), "--json", runs.filePath("s.json")});
    QVERIFY(ptw.waitForFinished(120000));
    const QString out = QString::fromUtf8(ptw.readAllStandardOutput());
    QVERIFY2(ptw.exitCode() == 0, qPrintable(out + ptw.readAllStandardError()));
    // The processes that ran: as many as each point's workers, each told the sweep's steps.
    for (int world : {1, 2}) {
      QStringList ran = QDir(dir.path()).entryList({QString("ran.%1.*").arg(world)}, QDir::Files);
      ran.sort();
      QStringList expected;
      for (int r = 0; r < world; ++r) expected << QString("ran.%1.%2").arg(world).arg(r);
      QCOMPARE(ran, expected);
      QFile f(dir.filePath(expected.front()));
      QVERIFY(f.open(QIODevice::ReadOnly));
      QCOMPARE(f.readAll(), QByteArray("40\n"));
    }
    QFile csv(runs.filePath("s.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 3);
    QVERIFY2(lines[0].endsWith(",steps_per_s"), qPrintable(lines[0]));
    RunStore store(runs.path().toStdString());
    const auto stored = store.runs();
    QCOMPARE(stored.size(), std::size_t{2});
    for (int i = 0; i < 2; ++i) {
      const QStringList c = lines[i + 1].split(',');
      const int workers = i + 1;  // 1 first: the baseline
      QCOMPARE(c[0], QString("command"));
      QCOMPARE(c[1].toInt(), workers);
      QCOMPARE(c[4], QString("finished"));
      QVERIFY2(std::abs(c[12].toDouble() - 200.0) < 1e-6, qPrintable(lines[i + 1]));  // 5 ms a step
      if (samples) {
        QVERIFY2(std::abs(c[2].toDouble() - 1600.0 * workers) < 1e-6, qPrintable(lines[i + 1]));
        QVERIFY2(std::abs(c[3].toDouble() - 1.0) < 1e-9, qPrintable(lines[i + 1]));
      } else {
        QVERIFY2(c[2].isEmpty() && c[3].isEmpty(), qPrintable(lines[i + 1]));  // not 0: nothing measured
      }
      // Its stored run is a command run of that many processes, its profile holding the command.
      const auto run =
          std::find_if(stored.begin(), stored.end(), [&](const RunRow& r) { return r.id == c[5].toLongLong(); });
      QVERIFY(run != stored.end());
      QCOMPARE(run->strategy, std::string("command"));
      QCOMPARE(run->world, workers);
      const Profile kept = parseProfile(run->profileJson, "stored profile");
      QCOMPARE(kept.strategy.kind, std::string("command"));
      QCOMPARE(kept.strategy.ranks, workers);
      QCOMPARE(kept.hyper.maxSteps, std::int64_t{40});
      QCOMPARE(kept.command.program, p.command.program);
      QCOMPARE(kept.command.args, p.command.args);
      QCOMPARE(kept.command.cwd, p.command.cwd);
      QCOMPARE(kept.command.stopGraceS, p.command.stopGraceS);
    }
    QFile json(runs.filePath("s.json"));
    QVERIFY(json.open(QIODevice::ReadOnly));
    const QJsonArray rows = QJsonDocument::fromJson(json.readAll()).array();
    QCOMPARE(rows.size(), 2);
    QCOMPARE(rows[1].toObject()["samples_per_s"].isNull(), !samples);
    if (samples) {
      QVERIFY2(out.contains("* fastest: command with 2 worker(s), 3200.0 samples/s"), qPrintable(out));
    } else {
      QVERIFY2(QRegularExpression("^command +2 +not reported +n/a +200\\.0 ", QRegularExpression::MultilineOption)
                   .match(out)
                   .hasMatch(),
               qPrintable(out));
      QVERIFY2(out.contains("your program reported no samples"), qPrintable(out));
    }
  }

  // What a sweep of a command profile cannot vary is refused by name, before anything starts:
  // ptw's strategies, and the rank count of a program that starts its ranks itself.
  void aSweepOfACommandRefusesWhatDoesNotApply_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("expected");
    QTest::newRow("ddp") << QStringList{"--strategies", "ddp"}
                         << "ptw: --strategies ddp: a command profile runs your program; a sweep varies its rank "
                            "count only (--workers)";
    QTest::newRow("several") << QStringList{"--strategies", "single,command,pool"}
                             << "--strategies single,pool: a command profile runs your program";
    QTest::newRow("mpirun") << QStringList{"--set", "command.report_ranks=2"}
                            << "sweep: command.report_ranks is 2: the program starts its ranks itself (mpirun)";
  }
  void aSweepOfACommandRefusesWhatDoesNotApply() {
    QFETCH(QStringList, args);
    QFETCH(QString, expected);
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, "open('ran', 'w').write('1')\n");
    QProcess ptw;
    ptw.start(test::binDir() + "/ptw",
              QStringList{"sweep", "--runs-dir", runs.path(), "--profile",
                          QString::fromStdString(test::writeProfile(dir, p)), "--workers", "1,2"} +
                  args);
    QVERIFY(ptw.waitForFinished(60000));
    const QString err = QString::fromUtf8(ptw.readAllStandardError());
    QCOMPARE(ptw.exitCode(), 2);
    QVERIFY2(err.contains(expected), qPrintable(err));
    QVERIFY(ptw.readAllStandardOutput().isEmpty());  // no table started
    QVERIFY(!QFile::exists(dir.filePath("ran")));
    QVERIFY(QDir(runs.path()).entryList(QDir::NoDotAndDotDot | QDir::AllEntries).isEmpty());
  }

  // A rank ptw stopped says so, whatever its code: a program that catches the stop
  // (KeyboardInterrupt) and exits 0 did not finish. One that failed on its own keeps its code.
  void aRankPtwStoppedSaysStopped_data() {
    QTest::addColumn<bool>("oneFails");
    QTest::newRow("stopped by SIGINT to ptw") << false;
    QTest::newRow("the other rank failed") << true;
  }
  void aRankPtwStoppedSaysStopped() {
    QFETCH(bool, oneFails);
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, QString(kReport) + R"(
signal.signal(signal.SIGTERM, signal.default_int_handler)  # a failure elsewhere sends SIGTERM
fails = len(sys.argv) > 1 and RANK == 1
try:
    step = 0
    while True:
        step += 1
        report(step, loss=1.0)
        if step == 5:
            open("ready.%d" % RANK, "w").write("1")
        if fails and step == 20:
            sys.exit(3)
        time.sleep(0.02)
except KeyboardInterrupt:
    print("caught the stop", flush=True)
    sys.exit(0)
)");
    if (oneFails) p.command.args = {"script.py", "fail"};
    const QString summary = runs.filePath("summary.json");
    QProcess ptw;
    ptw.start(test::binDir() + "/ptw", {"--headless", "--runs-dir", runs.path(), "--summary", summary, "--profile",
                                        QString::fromStdString(test::writeProfile(dir, p))});
    QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(dir.filePath("ready.0")) && QFile::exists(dir.filePath("ready.1")), 20000);
    if (!oneFails) ::kill(static_cast<pid_t>(ptw.processId()), SIGINT);
    QVERIFY(ptw.waitForFinished(30000));
    const QString out = QString::fromUtf8(ptw.readAllStandardOutput());
    QCOMPARE(ptw.exitCode(), oneFails ? 3 : 5);
    QFile f(summary);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonArray ranks = QJsonDocument::fromJson(f.readAll()).object()["ranks"].toArray();
    QCOMPARE(ranks.size(), 2);
    QCOMPARE(ranks[0].toObject()["exit"].toString(), QString("stopped (exit code 0)"));
    QVERIFY2(rankLog(runs, 0).contains("caught the stop"), qPrintable(rankLog(runs, 0)));
    QVERIFY2(rankLog(runs, 0).endsWith("ptw: rank 0 ended: stopped (exit code 0)\n"), qPrintable(rankLog(runs, 0)));
    // Rank 1's program exited 3, for which its rank (ptw-worker) exits 1 (Failed).
    const QString one = oneFails ? "exit code 1" : "stopped (exit code 0)";
    QCOMPARE(ranks[1].toObject()["exit"].toString(), one);
    QVERIFY2(rankLog(runs, 1).endsWith("ptw: rank 1 ended: " + one + "\n"), qPrintable(rankLog(runs, 1)));
    QVERIFY2(out.contains("[" + one + "]"), qPrintable(out));  // the progress lines
  }

  // The rank log gives the whole command line, each argument a shell would split or expand
  // quoted: pasted into a shell, it gives the program the same arguments.
  void theRankLogHoldsTheWholeCommandLine() {
    QTemporaryDir dir, runs;
    Profile p = scriptProfile(dir, "import json, sys\nprint('argv=' + json.dumps(sys.argv[1:]))\n", 1);
    p.command.args = {"script.py", "--note",  "two words", "--home",          "$HOME",  "--quote",
                      "it's",      "--empty", "",          "--lr={hyper.lr}", "--long", std::string(130, 'a')};
    Result r = runPtw({"--profile", QString::fromStdString(test::writeProfile(dir, p))}, runs);
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const QString log = rankLog(runs, 0);
    const QString line =
        "/usr/bin/python3 script.py --note 'two words' --home '$HOME' --quote 'it'\\''s' --empty '' "
        "--lr=0.01 --long " +
        QString(130, 'a');
    QVERIFY2(log.contains("[rank 0] script: running " + line + " in " + dir.path() + "\n"), qPrintable(log));
    const QRegularExpression printed("^argv=(.*)$", QRegularExpression::MultilineOption);
    const QString asRun = printed.match(log).captured(1);
    QVERIFY(!asRun.isEmpty());
    QProcess shell;
    shell.setWorkingDirectory(dir.path());
    shell.start("/bin/sh", {"-c", line});
    QVERIFY(shell.waitForFinished(30000));
    QCOMPARE(QString::fromUtf8(shell.readAllStandardOutput()).trimmed(), "argv=" + asRun);
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
