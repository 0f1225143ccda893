// Profiles: file round-trip, every validation error named, overrides, record lines.
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

#include "common/error.h"
#include "common/profile.h"
#include "common/record.h"

using namespace ptw;
using namespace ptw::core;

namespace {
std::string errorOf(const std::string& json) {
  try {
    parseProfile(json, "p.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

class TestProfile : public QObject {
  Q_OBJECT
 private slots:
  void shippedDefaultProfileIsTheBuiltInOne() {
    Profile p = loadProfile(qEnvironmentVariable("PTW_SOURCE_DIR").toStdString() + "/resources/profiles/seed-ddp.json");
    QVERIFY(p == defaultProfile());
    QCOMPARE(p.strategy.kind, std::string("ddp"));
    QCOMPARE(p.strategy.ranks, 2);
    QCOMPARE(p.hyper.batchSize, std::int64_t(16));
    QCOMPARE(p.model.inFeatures, std::int64_t(10));
    QCOMPARE(p.data.samples, std::int64_t(100));
  }

  void saveLoadRoundTrip() {
    QTemporaryDir dir;
    Profile p = defaultProfile();
    p.name = "round trip";
    p.model.kind = "mlp";
    p.model.hidden = {32, 16};
    p.hyper.lr = 0.123456789;
    p.hyper.optimizer = "adam";
    p.strategy.ranks = 3;
    p.hyper.seed = 18446744073709551615ull;
    std::string path = dir.filePath("p.json").toStdString();
    saveProfile(p, path);
    Profile q = loadProfile(path);
    QVERIFY(p == q);
    QCOMPARE(q.hyper.lr, 0.123456789);
    QCOMPARE(q.model.hidden, (std::vector<std::int64_t>{32, 16}));
    QCOMPARE(q.hyper.seed, 18446744073709551615ull);
    QVERIFY(!QFile::exists(dir.filePath("p.json.tmp")));
  }

  void invalidProfilesAreRejected_data() {
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("expected");
    QTest::newRow("bad JSON names line and column")
        << "{\n  \"strategy\": {\n    \"ranks\": 2,,\n  }\n}" << "p.json:3:16: invalid JSON";
    QTest::newRow("unknown strategy") << R"({"strategy": {"kind": "horovod"}})"
                                      << "strategy.kind: expected one of single, dataparallel, ddp, pool, got \"horovod\"";
    QTest::newRow("negative learning rate") << R"({"hyper": {"lr": -1}})" << "hyper.lr: must be > 0, got -1";
    QTest::newRow("zero ranks") << R"({"strategy": {"ranks": 0}})" << "strategy.ranks: must be >= 1, got 0";
    QTest::newRow("wrong type") << R"({"strategy": {"ranks": "two"}})"
                                << "strategy.ranks: expected an integer, got \"two\"";
    QTest::newRow("fractional integer") << R"({"hyper": {"batch_size": 1.5}})"
                                        << "hyper.batch_size: expected an integer, got 1.5";
    QTest::newRow("unknown field") << R"({"hyper": {"learning_rate": 0.1}})" << "hyper.learning_rate: unknown field";
    QTest::newRow("unknown section") << R"({"hyperparams": {}})" << "hyperparams: unknown section";
    QTest::newRow("not an object") << "[1, 2]" << "expected a JSON object at the top level";
    QTest::newRow("more ranks than samples") << R"({"strategy": {"ranks": 8}, "data": {"samples": 4}})"
                                             << "strategy.ranks: more ranks (8) than training samples (4)";
    QTest::newRow("no steps") << R"({"hyper": {"max_steps": 0, "epochs": 0}})" << "hyper.max_steps: set hyper.max_steps";
    QTest::newRow("nccl on cpu") << R"({"strategy": {"backend": "nccl"}})" << "strategy.backend: nccl needs";
    QTest::newRow("number beyond double range") << R"({"hyper": {"lr": 1e999}})" << "p.json: invalid JSON: number overflow";
    QTest::newRow("unknown pool mode") << R"({"strategy": {"kind": "pool", "pool_mode": "async"}})"
                                       << "strategy.pool_mode: expected one of sync, hogwild, got \"async\"";
    QTest::newRow("pool on cuda") << R"({"strategy": {"kind": "pool", "device": "cuda"}})"
                                  << "strategy.device: the process pool shares CPU memory";
    QTest::newRow("mixed precision on cpu") << R"({"hyper": {"precision": "bf16"}})"
                                            << "hyper.precision: mixed precision runs on cuda";
    QTest::newRow("nesterov without momentum") << R"({"hyper": {"nesterov": true}})"
                                               << "hyper.nesterov: needs optimizer sgd and momentum > 0";
    QTest::newRow("zero accumulation") << R"({"hyper": {"accumulate": 0}})" << "hyper.accumulate: must be >= 1, got 0";
    QTest::newRow("unknown schedule") << R"({"hyper": {"schedule": "cyclic"}})"
                                      << "hyper.schedule: expected one of constant, step, cosine";
    QTest::newRow("eval without split") << R"({"run": {"eval_every": 5}})"
                                        << "run.eval_every: validation needs a held-out split";
    QTest::newRow("csv without path") << R"({"data": {"kind": "csv", "target": "y"}})" << "data.path: csv needs the file";
    QTest::newRow("csv without target") << R"({"data": {"kind": "csv", "path": "d.csv"}})"
                                        << "data.target: csv needs the name of the target column";
    QTest::newRow("torchscript without file") << R"({"model": {"kind": "torchscript"}})"
                                              << "model.path: torchscript needs the .pt file";
    QTest::newRow("cnn on the wrong input") << R"({"model": {"kind": "cnn", "in_features": 10}})"
                                            << "model.in_features: cnn takes 1×28×28 images: must be 784";
    QTest::newRow("validation split too large") << R"({"data": {"val_fraction": 1.0}})"
                                                << "data.val_fraction: must be in [0, 1), got 1";
  }
  void invalidProfilesAreRejected() {
    QFETCH(QString, json);
    QFETCH(QString, expected);
    QString got = QString::fromStdString(errorOf(json.toStdString()));
    QVERIFY2(got.contains(expected), qPrintable("got: " + got));
    QVERIFY2(got.startsWith("p.json"), qPrintable("message must name the file: " + got));
  }

  void failedLoadChangesNothingOnDisk() {
    QTemporaryDir dir;
    std::string path = dir.filePath("p.json").toStdString();
    saveProfile(defaultProfile(), path);
    QVERIFY_THROWS_EXCEPTION(Error, loadProfile(dir.filePath("missing.json").toStdString()));
    QVERIFY(loadProfile(path) == defaultProfile());
  }

  void overrides() {
    Profile p = applyOverrides(defaultProfile(), {"hyper.lr=0.05", "strategy.ranks=4", "strategy.kind=ddp", "name=x"});
    QCOMPARE(p.hyper.lr, 0.05);
    QCOMPARE(p.strategy.ranks, 4);
    QCOMPARE(p.name, std::string("x"));
    auto fails = [](std::vector<std::string> a) {
      try {
        applyOverrides(defaultProfile(), a);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    QVERIFY(QString::fromStdString(fails({"hyper.lrr=1"})).contains("unknown field hyper.lrr"));
    QVERIFY(QString::fromStdString(fails({"hyper.lr=-2"})).contains("hyper.lr: must be > 0, got -2"));
    QVERIFY(QString::fromStdString(fails({"hyper"})).contains("expected key=value"));
    QVERIFY(QString::fromStdString(fails({"hyper=1"})).contains("is a section"));
  }

  void recordLinesRoundTrip() {
    Record r;
    r.step = {3, 42, 2, 0.25, 1234.5, 1.5, 0.1, 0.9, 0.4, 0.1, 0.01, 123456789};
    std::string line;
    formatRecord(r, line);
    QVERIFY(line.back() == '\n');
    line.pop_back();
    auto back = parseRecord(line);
    QVERIFY(back.has_value());
    QCOMPARE(back->step.rank, 3);
    QCOMPARE(back->step.step, std::int64_t(42));
    QCOMPARE(back->step.loss, 0.25);
    QCOMPARE(back->step.memBytes, std::int64_t(123456789));
    for (const char* bad : {"", "S", "S 1 2", "X 1 2 3", "S -1 1 0 1 1 1 1 1 1 1 1 1", "D 0 -5", "H 0 1",
                            "S 0 1 0 nan? 1 1 1 1 1 1 1 1", "H 1 0 \r\r", "H 1 0 Train", "H 1 0 a\x1b[2J"})
      QVERIFY2(!parseRecord(bad).has_value(), bad);
  }
};

QTEST_APPLESS_MAIN(TestProfile)
#include "test_profile.moc"
