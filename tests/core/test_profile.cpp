// SPDX-License-Identifier: GPL-3.0-or-later
// Profiles: file round-trip, every validation error named, overrides, record lines.
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>

#include <fstream>
#include <map>

#include "common/data_kinds.h"
#include "common/error.h"
#include "common/launcher_kinds.h"
#include "common/profile.h"
#include "common/record.h"
#include "common/strategies.h"

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

// A value as JSON text, e.g. 0.01, "ddp", [].
QString jsonText(const QJsonValue& v) {
  const QByteArray a = QJsonDocument(QJsonArray{v}).toJson(QJsonDocument::Compact);
  return QString::fromUtf8(a.mid(1, a.size() - 2));
}

// Numbers compare as numbers (25 and 25.0 are one default), anything else as JSON.
bool sameJson(const QJsonValue& a, const QJsonValue& b) {
  if (a.isDouble() && b.isDouble()) return a.toDouble() == b.toDouble();
  return a == b;
}
}  // namespace

class TestProfile : public QObject {
  Q_OBJECT
 private slots:
  void shippedDefaultProfileIsTheBuiltInOne() {
    Profile p = loadProfile(qEnvironmentVariable("PTW_SOURCE_DIR").toStdString() + "/resources/profiles/seed-ddp.json");
    // The example runs long enough to watch in the window; all else is the built-in default.
    QCOMPARE(p.hyper.maxSteps, std::int64_t(200000));
    p.hyper.maxSteps = defaultProfile().hyper.maxSteps;
    QVERIFY(p == defaultProfile());
    QCOMPARE(p.strategy.kind, std::string("ddp"));
    QCOMPARE(p.strategy.ranks, 2);
    QCOMPARE(p.hyper.batchSize, std::int64_t(16));
    QCOMPARE(p.model.inFeatures, std::int64_t(10));
    QCOMPARE(p.data.samples, std::int64_t(100));
  }

  // strategy.backend "auto" (the default) is shared memory for CPU ranks, NCCL for GPUs
  // where LibTorch has it and Gloo where not; a backend named in the profile is kept.
  void autoBackendResolvesByDevice() {
    Profile p = defaultProfile();
    QCOMPARE(p.strategy.backend, std::string("auto"));
    QCOMPARE(collectiveBackend(p, true), std::string("shm"));
    QCOMPARE(collectiveBackend(p, false), std::string("shm"));
    p.strategy.device = "cuda";
    QCOMPARE(collectiveBackend(p, true), std::string("nccl"));
    QCOMPARE(collectiveBackend(p, false), std::string("gloo"));
    QVERIFY(validate(p).empty() || validate(p).front().path != "strategy.backend");
    for (const char* named : {"gloo", "nccl", "shm"}) {
      p.strategy.backend = named;
      QCOMPARE(collectiveBackend(p, true), std::string(named));
      QCOMPARE(collectiveBackend(p, false), std::string(named));
    }
  }

  // strategy.gpus picks each rank's GPU; empty means cuda:0 onwards. Single takes one.
  void gpusMapRanksToDevices() {
    Profile p = defaultProfile();
    p.strategy.device = "cuda";
    QCOMPARE(cudaIndexFor(p, 0), std::int64_t(0));
    QCOMPARE(cudaIndexFor(p, 1), std::int64_t(1));
    p.strategy.gpus = {3, 1};
    QVERIFY(validate(p).empty());
    QCOMPARE(cudaIndexFor(p, 0), std::int64_t(3));
    QCOMPARE(cudaIndexFor(p, 1), std::int64_t(1));
    const Profile back = parseProfile(toJson(p));
    QCOMPARE(back.strategy.gpus, (std::vector<std::int64_t>{3, 1}));
    QVERIFY(back == p);
    p.strategy.kind = "single";
    p.strategy.ranks = 1;
    p.strategy.gpus = {2};
    QVERIFY(validate(p).empty());
    QCOMPARE(cudaIndexFor(p, 0), std::int64_t(2));
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

  // Relative paths are the profile's folder's: what loadProfile does to a file's, resolvePaths
  // does to an editor's (the window, for a profile that has a file). A command run's folder
  // "" is the profile's own; absolute paths and a native run's command.cwd stay.
  void relativePathsAreTheProfileFolders() {
    Profile p = defaultProfile();
    p.data.path = "../data/x.csv";
    p.model.path = "/abs/m.pt";
    resolvePaths(p, "/p/profiles");
    QCOMPARE(p.data.path, std::string("/p/data/x.csv"));
    QCOMPARE(p.model.path, std::string("/abs/m.pt"));
    QCOMPARE(p.command.cwd, std::string(""));
    p.strategy.kind = "command";
    p.command.program = "python3";
    resolvePaths(p, "/p/profiles");
    QCOMPARE(p.command.cwd, std::string("/p/profiles/"));
    p.command.cwd = "../examples";
    resolvePaths(p, "/p/profiles");
    QCOMPARE(p.command.cwd, std::string("/p/examples"));
    QTemporaryDir dir;
    p.command.cwd = "sub";
    saveProfile(p, dir.filePath("p.json").toStdString());
    QCOMPARE(loadProfile(dir.filePath("p.json").toStdString()).command.cwd, dir.filePath("sub").toStdString());
  }

  // docs/profiles.md documents every field, so it cannot go stale: each key that visit()
  // names (the keys the JSON save of a default Profile writes) has one row there, the doc
  // has no row for a key the profile lacks, the default it writes is Profile{}'s, and an
  // enumerated field's allowed values name every choice. A row is a table line whose first
  // cell is the field in backticks (`hyper.lr`, or `name`) and whose second is the default
  // in backticks, read as JSON where it parses (`0.01`, `[]`, `""`, `true`) and as a string
  // where not (`ddp`).
  void profileDocMatchesTheProfile() {
    const QString docPath = qEnvironmentVariable("PTW_SOURCE_DIR") + "/docs/profiles.md";
    QFile file(docPath);
    QVERIFY2(file.open(QIODevice::ReadOnly | QIODevice::Text), qPrintable(docPath + ": cannot open"));
    struct Row {
      QString defaultCell, allowedCell, meaningCell;
      int line = 0;
    };
    std::map<QString, Row> doc;
    QStringList problems;
    static const QRegularExpression rowPattern(R"(^\|\s*`([A-Za-z0-9_.]+)`\s*\|([^|]*)\|([^|]*)\|([^|]*)\|)");
    int line = 0;
    while (!file.atEnd()) {
      ++line;
      const auto m = rowPattern.match(QString::fromUtf8(file.readLine()));
      if (!m.hasMatch()) continue;
      const QString key = m.captured(1);
      if (doc.count(key))
        problems
            << QString("%1: listed twice in docs/profiles.md (lines %2 and %3)").arg(key).arg(doc[key].line).arg(line);
      doc[key] = {m.captured(2).trimmed(), m.captured(3).trimmed(), m.captured(4).trimmed(), line};
    }

    std::map<QString, QJsonValue> fields;  // every key visit() names, with Profile{}'s value
    const QJsonObject saved = QJsonDocument::fromJson(QByteArray::fromStdString(toJson(Profile{}))).object();
    QVERIFY(!saved.isEmpty());
    for (auto it = saved.begin(); it != saved.end(); ++it) {
      if (!it.value().isObject()) {
        fields[it.key()] = it.value();
        continue;
      }
      const QJsonObject section = it.value().toObject();
      for (auto f = section.begin(); f != section.end(); ++f) fields[it.key() + "." + f.key()] = f.value();
    }

    static const QRegularExpression quoted("^`(.*)`$");
    for (const auto& [key, value] : fields) {
      auto row = doc.find(key);
      if (row == doc.end()) {
        problems << QString(
                        "%1: a profile field (default %2) missing from docs/profiles.md; add the row "
                        "| `%1` | `%2` | allowed | meaning |")
                        .arg(key, jsonText(value));
        continue;
      }
      const Row& r = row->second;
      const auto cell = quoted.match(r.defaultCell);
      if (!cell.hasMatch()) {
        problems << QString("%1: docs/profiles.md line %2: the default cell must be one value in backticks, got \"%3\"")
                        .arg(key)
                        .arg(r.line)
                        .arg(r.defaultCell);
      } else {
        QJsonParseError error{};
        const QJsonDocument parsed = QJsonDocument::fromJson("[" + cell.captured(1).toUtf8() + "]", &error);
        const QJsonValue written = error.error == QJsonParseError::NoError && parsed.array().size() == 1
                                       ? parsed.array().at(0)
                                       : QJsonValue(cell.captured(1));
        if (!sameJson(written, value))
          problems << QString("%1: docs/profiles.md line %2 gives the default %3, the profile's is %4")
                          .arg(key)
                          .arg(r.line)
                          .arg(jsonText(written), jsonText(value));
      }
      // The editor's help for a field is this cell: one source for both.
      const auto help = fieldHelp().find(key.toStdString());
      if (help == fieldHelp().end())
        problems << QString("%1: no help string in fieldHelp() (core/common/profile.cpp); add the doc's meaning \"%2\"")
                        .arg(key, r.meaningCell);
      else if (QString::fromStdString(help->second) != r.meaningCell)
        problems << QString("%1: docs/profiles.md line %2 gives the meaning \"%3\", fieldHelp() gives \"%4\"")
                        .arg(key)
                        .arg(r.line)
                        .arg(r.meaningCell, QString::fromStdString(help->second));
      for (const auto& choice : fieldChoices(key.toStdString())) {
        const QString named = "`" + QString::fromStdString(choice) + "`";
        if (!r.allowedCell.contains(named))
          problems << QString("%1: docs/profiles.md line %2 does not name the allowed value %3")
                          .arg(key)
                          .arg(r.line)
                          .arg(named);
      }
    }
    for (const auto& [path, text] : fieldHelp())
      if (!fields.count(QString::fromStdString(path)))
        problems << QString("%1: fieldHelp() has help for a field the profile does not have")
                        .arg(QString::fromStdString(path));
    for (const auto& [key, row] : doc)
      if (!fields.count(key))
        problems << QString("%1: docs/profiles.md line %2 lists a field the profile does not have; remove the row")
                        .arg(key)
                        .arg(row.line);
    QVERIFY2(problems.isEmpty(),
             qPrintable("docs/profiles.md is out of step with the profile:\n  " + problems.join("\n  ")));
  }

  // run.keep_every and run.keep_all_until: which steps' records the store keeps; by
  // default every one, and they travel in the profile's JSON.
  void keptStepsFollowTheProfile() {
    Profile p = defaultProfile();
    for (std::int64_t s : {1, 2, 3, 1000001}) QVERIFY(keepsStep(p.run, s));
    p = applyOverrides(p, {"run.keep_every=100", "run.keep_all_until=250"});
    QCOMPARE(p.run.keepEvery, std::int64_t(100));
    QCOMPARE(p.run.keepAllUntil, std::int64_t(250));
    std::vector<std::int64_t> kept;
    for (std::int64_t s = 1; s <= 1000; ++s)
      if (keepsStep(p.run, s)) kept.push_back(s);
    QCOMPARE(kept.size(), std::size_t(250 + 8));  // 1..250, then 300, 400, .., 1000
    QCOMPARE(kept[250], std::int64_t(300));
    QCOMPARE(kept.back(), std::int64_t(1000));
    QTemporaryDir dir;
    saveProfile(p, dir.filePath("p.json").toStdString());
    QVERIFY(loadProfile(dir.filePath("p.json").toStdString()) == p);
  }

  void invalidProfilesAreRejected_data() {
    QTest::addColumn<QString>("json");
    QTest::addColumn<QString>("expected");
    QTest::newRow("bad JSON names line and column") << "{\n  \"strategy\": {\n    \"ranks\": 2,,\n  }\n}"
                                                    << "p.json:3:16: invalid JSON";
    QTest::newRow("unknown strategy")
        << R"({"strategy": {"kind": "horovod"}})"
        << "strategy.kind: expected one of single, dataparallel, ddp, pool, command, got \"horovod\"";
    QTest::newRow("too many ranks") << R"({"strategy": {"ranks": 256}})"
                                    << "strategy.ranks: must be <= 255, got 256";
    QTest::newRow("too many synthetic ranks") << R"({"strategy": {"kind": "synthetic", "ranks": 20000}})"
                                              << "strategy.ranks: must be <= 16384, got 20000";
    QTest::newRow("synthetic ranks counting epochs")
        << R"({"strategy": {"kind": "synthetic"}, "hyper": {"max_steps": 0, "epochs": 2}})"
        << "hyper.max_steps: synthetic ranks run hyper.max_steps steps: set it to a positive number";
    QTest::newRow("negative learning rate") << R"({"hyper": {"lr": -1}})"
                                            << "hyper.lr: must be > 0, got -1";
    QTest::newRow("zero ranks") << R"({"strategy": {"ranks": 0}})"
                                << "strategy.ranks: must be >= 1, got 0";
    QTest::newRow("wrong type") << R"({"strategy": {"ranks": "two"}})"
                                << "strategy.ranks: expected an integer, got \"two\"";
    QTest::newRow("fractional integer") << R"({"hyper": {"batch_size": 1.5}})"
                                        << "hyper.batch_size: expected an integer, got 1.5";
    QTest::newRow("unknown field") << R"({"hyper": {"learning_rate": 0.1}})"
                                   << "hyper.learning_rate: unknown field";
    QTest::newRow("unknown section") << R"({"hyperparams": {}})"
                                     << "hyperparams: unknown section";
    QTest::newRow("not an object") << "[1, 2]"
                                   << "expected a JSON object at the top level";
    QTest::newRow("more ranks than samples") << R"({"strategy": {"ranks": 8}, "data": {"samples": 4}})"
                                             << "strategy.ranks: more ranks (8) than training samples (4)";
    QTest::newRow("no steps") << R"({"hyper": {"max_steps": 0, "epochs": 0}})"
                              << "hyper.max_steps: set hyper.max_steps";
    QTest::newRow("nccl on cpu") << R"({"strategy": {"backend": "nccl"}})"
                                 << "strategy.backend: nccl needs";
    QTest::newRow("number beyond double range") << R"({"hyper": {"lr": 1e999}})"
                                                << "p.json: invalid JSON: number overflow";
    QTest::newRow("unknown pool mode") << R"({"strategy": {"kind": "pool", "pool_mode": "async"}})"
                                       << "strategy.pool_mode: expected one of sync, hogwild, got \"async\"";
    QTest::newRow("pool on cuda") << R"({"strategy": {"kind": "pool", "device": "cuda"}})"
                                  << "strategy.device: the process pool shares CPU memory";
    QTest::newRow("gpus on cpu") << R"({"strategy": {"gpus": [0, 1]}})"
                                 << "strategy.gpus: lists GPUs, but strategy.device is \"cpu\"";
    QTest::newRow("gpus fewer than ranks") << R"({"strategy": {"device": "cuda", "ranks": 3, "gpus": [1, 2]}})"
                                           << "strategy.gpus: lists 2 GPU(s) for 3 rank(s)/lane(s)";
    QTest::newRow("gpu listed twice") << R"({"strategy": {"device": "cuda", "gpus": [1, 1]}})"
                                      << "strategy.gpus: cuda:1 is listed twice";
    QTest::newRow("negative gpu") << R"({"strategy": {"device": "cuda", "gpus": [0, -1]}})"
                                  << "strategy.gpus: every index must be >= 0, got -1";
    QTest::newRow("gpus not integers") << R"({"strategy": {"device": "cuda", "gpus": ["cuda:0", 1]}})"
                                       << "strategy.gpus[0]: expected an integer";
    QTest::newRow("mixed precision on cpu") << R"({"hyper": {"precision": "bf16"}})"
                                            << "hyper.precision: mixed precision runs on cuda";
    QTest::newRow("nesterov without momentum") << R"({"hyper": {"nesterov": true}})"
                                               << "hyper.nesterov: needs optimizer sgd and momentum > 0";
    QTest::newRow("zero accumulation") << R"({"hyper": {"accumulate": 0}})"
                                       << "hyper.accumulate: must be >= 1, got 0";
    QTest::newRow("unknown schedule") << R"({"hyper": {"schedule": "cyclic"}})"
                                      << "hyper.schedule: expected one of constant, step, cosine";
    QTest::newRow("eval without split") << R"({"run": {"eval_every": 5}})"
                                        << "run.eval_every: validation needs a held-out split";
    QTest::newRow("keep no records") << R"({"run": {"keep_every": 0}})"
                                     << "run.keep_every: must be >= 1 (1 keeps every step's records), got 0";
    QTest::newRow("negative loader threads")
        << R"({"run": {"loader_threads": -1}})"
        << "run.loader_threads: must be in 0..16 (0 prepares each batch in the step), got -1";
    QTest::newRow("too many loader threads")
        << R"({"run": {"loader_threads": 17}})"
        << "run.loader_threads: must be in 0..16 (0 prepares each batch in the step), got 17";
    QTest::newRow("keep until a negative step") << R"({"run": {"keep_every": 5, "keep_all_until": -1}})"
                                                << "run.keep_all_until: must be >= 0, got -1";
    QTest::newRow("csv without path") << R"({"data": {"kind": "csv", "target": "y"}})"
                                      << "data.path: csv needs the file";
    QTest::newRow("csv without target") << R"({"data": {"kind": "csv", "path": "d.csv"}})"
                                        << "data.target: csv needs the name of the target column";
    QTest::newRow("npy without labels") << R"({"data": {"kind": "npy", "path": "x.npy"}, "model": {"out_features": 2}})"
                                        << "data.labels_path: npy needs the labels' .npy file";
    QTest::newRow("cifar10 without path") << R"({"data": {"kind": "cifar10"}, "model": {"out_features": 10}})"
                                          << "data.path: cifar10 needs the folder holding data_batch_*.bin";
    QTest::newRow("mean without std")
        << R"({"data": {"kind": "cifar10", "path": "c", "mean": [0.5, 0.5, 0.5]}, "model": {"out_features": 10}})"
        << "data.std: needs one value per channel, like data.mean: 3 mean(s), 0 std(s)";
    QTest::newRow("zero std")
        << R"({"data": {"kind": "cifar10", "path": "c", "mean": [0.5], "std": [0]}, "model": {"out_features": 10}})"
        << "data.std: every value must be > 0, got 0";
    QTest::newRow("negative crop padding")
        << R"({"data": {"kind": "image-folder", "path": "f", "crop_padding": -1}, "model": {"out_features": 2}})"
        << "data.crop_padding: must be >= 0, got -1";
    QTest::newRow("augmenting a csv") << R"({"data": {"kind": "csv", "path": "d.csv", "target": "y", "flip": true}})"
                                      << "data.kind: normalisation and augmentation (data.mean, data.std, "
                                         "data.crop_padding, data.flip) need image data";
    QTest::newRow("torchscript without file") << R"({"model": {"kind": "torchscript"}})"
                                              << "model.path: torchscript needs the .pt file";
    QTest::newRow("cnn on the wrong input") << R"({"model": {"kind": "cnn", "in_features": 10}})"
                                            << "model.in_features: cnn takes 1×28×28 images: must be 784";
    QTest::newRow("validation split too large") << R"({"data": {"val_fraction": 1.0}})"
                                                << "data.val_fraction: must be in [0, 1), got 1";
    QTest::newRow("steps at 2^63 as a float") << R"({"hyper": {"max_steps": 9223372036854775807.0}})"
                                              << "hyper.max_steps: integer out of range for this field";
    QTest::newRow("steps past int64") << R"({"hyper": {"max_steps": 9223372036854775808}})"
                                      << "hyper.max_steps: integer out of range for this field";
    QTest::newRow("ranks past int")
        << R"({"strategy": {"ranks": 4294967296}})"
        << "strategy.ranks: integer out of range for this field (-2147483648 to 2147483647)";
    QTest::newRow("hogwild with clipping")
        << R"({"strategy": {"kind": "pool", "pool_mode": "hogwild"}, "hyper": {"clip_norm": 1}})"
        << "hyper.clip_norm: hogwild workers step on their own: must be 0, got 1";
    QTest::newRow("hogwild with accumulation")
        << R"({"strategy": {"kind": "pool", "pool_mode": "hogwild"}, "hyper": {"accumulate": 2}})"
        << "hyper.accumulate: hogwild workers step on their own: must be 1, got 2";
    QTest::newRow("timeout beyond a week") << R"({"run": {"timeout_s": 1e12}})"
                                           << "run.timeout_s: must be > 0 and at most 604800 (a week)";
    // The hosts section (docs/multihost.md).
    QTest::newRow("ssh without hosts") << R"({"hosts": {"launcher": "ssh"}})"
                                       << "hosts.hosts: the ssh launcher needs at least one host";
    QTest::newRow("zero slots") << R"({"hosts": {"launcher": "ssh", "hosts": ["a:0", "b:2"]}})"
                                << "hosts.hosts: entry 0: expected host:slots (a host name or IPv4 address, slots "
                                   ">= 1), got \"a:0\"";
    QTest::newRow("slots not a number") << R"({"hosts": {"launcher": "ssh", "hosts": ["a:two"]}})"
                                        << "hosts.hosts: entry 0: expected host:slots";
    QTest::newRow("a host that is an option") << R"({"hosts": {"launcher": "ssh", "hosts": ["-oProxyCommand=x:2"]}})"
                                              << "hosts.hosts: entry 0: expected host:slots";
    QTest::newRow("a host with shell syntax") << R"({"hosts": {"launcher": "ssh", "hosts": ["a;rm -rf x:1", "b:1"]}})"
                                              << "hosts.hosts: entry 0: expected host:slots";
    QTest::newRow("a host with a user") << R"({"hosts": {"launcher": "ssh", "hosts": ["root@a:2"]}})"
                                        << "hosts.hosts: entry 0: expected host:slots";
    QTest::newRow("a host twice") << R"({"hosts": {"launcher": "ssh", "hosts": ["a:1", "a:1"]}})"
                                  << "hosts.hosts: entry 1: host a is listed twice";
    QTest::newRow("slots and ranks differ")
        << R"({"strategy": {"ranks": 4}, "hosts": {"launcher": "ssh", "hosts": ["a:2", "b:1"]}})"
        << "hosts.hosts: the hosts' slots add up to 3, but the run has 4 ranks (strategy.ranks); make them equal";
    QTest::newRow("pool across hosts")
        << R"({"strategy": {"kind": "pool", "ranks": 1}, "hosts": {"launcher": "ssh", "hosts": ["a:2"]}})"
        << "strategy.kind: \"pool\" runs on one host only; across hosts (hosts.launcher \"ssh\") use \"ddp\"";
    QTest::newRow("shm across hosts")
        << R"({"strategy": {"backend": "shm"}, "hosts": {"launcher": "ssh", "hosts": ["a:1", "b:1"]}})"
        << "strategy.backend: \"shm\" needs every rank on one host";
    QTest::newRow("run.port across hosts")
        << R"({"run": {"port": 29500}, "hosts": {"launcher": "ssh", "hosts": ["a:1", "b:1"]}})"
        << "run.port: across hosts the ranks meet at hosts.address:hosts.port; set hosts.port instead";
    QTest::newRow("hosts with the local launcher") << R"({"hosts": {"hosts": ["a:2"]}})"
                                                   << "hosts.hosts: lists hosts, but hosts.launcher is \"local\"";
    QTest::newRow("slurm with a strategy of one host")
        << R"({"strategy": {"kind": "pool", "ranks": 1}, "hosts": {"launcher": "slurm"}})"
        << "strategy.kind: \"pool\" runs on one host only; across hosts (hosts.launcher \"slurm\")";
    QTest::newRow("slurm nodes that do not fit")
        << R"({"strategy": {"ranks": 4}, "hosts": {"launcher": "slurm", "hosts": ["n1:2", "n2:1"]}})"
        << "hosts.hosts: the hosts' slots add up to 3, but the run has 4 ranks (strategy.ranks); make them equal";
    QTest::newRow("command nodes that do not fit")
        << R"({"strategy": {"kind": "command", "ranks": 4}, "command": {"program": "python3"},
               "hosts": {"launcher": "slurm", "hosts": ["n1:2", "n2:1"]}})"
        << "hosts.hosts: the hosts' slots add up to 3, but the run has 4 ranks (strategy.ranks); make them equal";
    QTest::newRow("command slots and ranks differ")
        << R"({"strategy": {"kind": "command", "ranks": 4}, "command": {"program": "python3"},
               "hosts": {"launcher": "ssh", "hosts": ["a:2", "b:1"]}})"
        << "hosts.hosts: the hosts' slots add up to 3, but the run has 4 ranks (strategy.ranks); make them equal";
    QTest::newRow("unknown launcher") << R"({"hosts": {"launcher": "pdsh"}})"
                                      << "hosts.launcher: expected one of local, ssh, slurm, got \"pdsh\"";
    QTest::newRow("interface with a space")
        << R"({"hosts": {"launcher": "ssh", "hosts": ["a:1", "b:1"], "interface": "eth 0"}})"
        << "hosts.interface: expected a network interface's name";
    QTest::newRow("relative worker")
        << R"({"hosts": {"launcher": "ssh", "hosts": ["a:1", "b:1"], "worker": "bin/ptw-worker"}})"
        << "hosts.worker: expected an absolute path of ptw-worker on the hosts";
    QTest::newRow("user with shell syntax")
        << R"j({"hosts": {"launcher": "ssh", "hosts": ["a:1", "b:1"], "ssh_user": "$(id)"}})j"
        << "hosts.ssh_user: expected a user name";
    QTest::newRow("address with a port") << R"({"hosts": {"launcher": "ssh", "hosts": ["a:2"], "address": "a:29500"}})"
                                         << "hosts.address: expected a host name or IPv4 address";
    QTest::newRow("keep-alive of zero") << R"({"hosts": {"launcher": "ssh", "hosts": ["a:2"], "alive_interval_s": 0}})"
                                        << "hosts.alive_interval_s: must be in 1..600 seconds, got 0";
  }
  // Ranks fill the hosts in order; auto on CPU ranks across hosts is Gloo (shared memory needs one host).
  void hostsPlaceRanksInOrder() {
    Profile p = parseProfile(
        R"({"strategy": {"ranks": 3}, "hosts": {"launcher": "ssh", "hosts": ["node-1.example:2", "10.0.0.7"]}})");
    QCOMPARE(rankHosts(p), (std::vector<std::string>{"node-1.example", "node-1.example", "10.0.0.7"}));
    QCOMPARE(collectiveBackend(p, false), std::string("gloo"));
    QVERIFY(rankHosts(parseProfile("{}")).empty());
    QCOMPARE(collectiveBackend(parseProfile("{}"), false), std::string("shm"));
    // slurm with no hosts: the allocation's nodes, known once the job runs (launch/slurm_job.h).
    const Profile slurm = parseProfile(R"({"strategy": {"ranks": 2}, "hosts": {"launcher": "slurm"}})");
    QVERIFY(validate(slurm).empty());
    QVERIFY(rankHosts(slurm).empty());
    QCOMPARE(collectiveBackend(slurm, false), std::string("gloo"));
    // Your own script under slurm: each rank is placed on its node as under ssh.
    const Profile script = parseProfile(R"({"strategy": {"kind": "command", "ranks": 2},
        "command": {"program": "python3"}, "hosts": {"launcher": "slurm"}})");
    QVERIFY(validate(script).empty());
  }
  // Every launcher name parses to its kind and back, and an unknown one reads as validation says it.
  void launcherNamesParseToTheirKind_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("kind");
    QTest::addColumn<bool>("remote");
    QTest::newRow("local") << "local" << static_cast<int>(LauncherKind::Local) << false;
    QTest::newRow("ssh") << "ssh" << static_cast<int>(LauncherKind::Ssh) << true;
    QTest::newRow("slurm") << "slurm" << static_cast<int>(LauncherKind::Slurm) << true;
  }
  void launcherNamesParseToTheirKind() {
    QFETCH(QString, name);
    QFETCH(int, kind);
    QFETCH(bool, remote);
    Profile p;
    p.hosts.launcher = name.toStdString();
    const LauncherInfo& row = launcherOf(p);
    QCOMPARE(static_cast<int>(row.kind), kind);
    QCOMPARE(launcherInfo(row.kind).name, name.toStdString());
    QCOMPARE(row.remoteRanks, remote);
    QCOMPARE(ranksMayBeRemote(p), remote);
  }
  void launcherTableIsTheChoices() {
    std::vector<std::string> names;
    for (const auto& l : launchers()) names.push_back(l.name);
    QCOMPARE(names, fieldChoices("hosts.launcher"));
    QCOMPARE(names.size(), std::size_t(3));
    Profile p;
    p.hosts.launcher = "pdsh";
    QString thrown;
    try {
      launcherOf(p);
    } catch (const Error& e) {
      thrown = e.what();
    }
    QCOMPARE(thrown, QString("hosts.launcher: expected one of local, ssh, slurm, got \"pdsh\""));
    const auto errors = validate(p);
    QVERIFY(!errors.empty());
    QCOMPARE(QString::fromStdString(errors.front().text()), thrown);
    QVERIFY(ranksMayBeRemote(p));  // nothing is known of it
  }

  // Every data kind of the table is accepted with what its row says it needs, and refused
  // without it, with the message its row words.
  void dataKindsAreWhatValidationRequires_data() {
    QTest::addColumn<QString>("name");
    for (const auto& k : dataKinds()) QTest::newRow(k.name.c_str()) << QString::fromStdString(k.name);
  }
  void dataKindsAreWhatValidationRequires() {
    QFETCH(QString, name);
    const DataKindInfo* kind = findDataKind(name.toStdString());
    QVERIFY(kind);
    Profile p;
    p.data.kind = kind->name;
    QCOMPARE(&dataKindOf(p.data), kind);
    p.model.outFeatures = 2;  // a classification's classes; a regression's two outputs
    if (kind->readsFiles) p.data.path = "data";
    if (kind->readsColumns) p.data.target = "y";
    if (kind->readsLabelsFile) p.data.labelsPath = "labels.npy";
    auto firstError = [](const Profile& q) {
      const auto errors = validate(q);
      return errors.empty() ? std::string("none") : errors.front().text();
    };
    QCOMPARE(firstError(p), std::string("none"));
    QCOMPARE(readsDataFiles(p.data), kind->readsFiles);
    QCOMPARE(isClassification(p.data), kind->classification);

    Profile noPath = p;
    noPath.data.path.clear();
    QCOMPARE(firstError(noPath), kind->readsFiles ? "data.path: " + kind->name + " needs " + kind->pathHint : "none");
    Profile noTarget = p;
    noTarget.data.target.clear();
    QCOMPARE(firstError(noTarget) != "none", kind->readsColumns);
    Profile noLabels = p;
    noLabels.data.labelsPath.clear();
    QCOMPARE(firstError(noLabels) != "none", kind->readsLabelsFile);
    Profile flipped = p;
    flipped.data.flip = true;
    QCOMPARE(firstError(flipped) == "none", kind->images);
    Profile noSamples = p;
    noSamples.data.samples = 0;  // files: every sample; generated: none
    QCOMPARE(firstError(noSamples) == "none", kind->readsFiles);
    Profile oneOutput = p;
    oneOutput.model.outFeatures = 1;
    QCOMPARE(firstError(oneOutput) != "none", kind->classification);
    Profile classes = p;
    classes.data.task = "classification";
    QCOMPARE(isClassification(classes.data), kind->classification || kind->readsTask);
  }
  void dataKindTableIsTheChoices() {
    std::vector<std::string> names;
    for (const auto& k : dataKinds()) names.push_back(k.name);
    QCOMPARE(names, fieldChoices("data.kind"));
    QCOMPARE(names, (std::vector<std::string>{"synthetic-regression", "synthetic-classification", "csv", "mnist",
                                              "cifar10", "image-folder", "npy"}));
    QCOMPARE(Profile().data.kind, names.front());
  }

  // Synthetic ranks (Note [Synthetic ranks]): 512 a process, as many as a data set would
  // never allow, each reporting; a hidden strategy a profile may name but no list offers.
  void syntheticRanksFillTheirProcesses_data() {
    QTest::addColumn<int>("ranks");
    QTest::addColumn<int>("processes");
    QTest::newRow("one") << 1 << 1;
    QTest::newRow("a process full") << 512 << 1;
    QTest::newRow("one more") << 513 << 2;
    QTest::newRow("4096") << 4096 << 8;
  }
  void syntheticRanksFillTheirProcesses() {
    QFETCH(int, ranks);
    QFETCH(int, processes);
    const Profile p = parseProfile(R"({"strategy": {"kind": "synthetic", "ranks": )" + std::to_string(ranks) +
                                   R"(}, "hyper": {"max_steps": 5}})");
    QCOMPARE(processCount(p), processes);
    QCOMPARE(reportingRanks(p), ranks);
    const auto kinds = fieldChoices("strategy.kind");
    QVERIFY(std::find(kinds.begin(), kinds.end(), "synthetic") == kinds.end());
  }

  // A strategy runs across hosts exactly when its row says so.
  void strategiesAcrossHostsFollowTheirRow_data() {
    QTest::addColumn<QString>("name");
    for (const auto& s : strategies()) QTest::newRow(s.name.c_str()) << QString::fromStdString(s.name);
  }
  void strategiesAcrossHostsFollowTheirRow() {
    QFETCH(QString, name);
    const StrategyInfo* info = findStrategy(name.toStdString());
    QVERIFY(info);
    Profile p;
    p.strategy.kind = info->name;
    p.strategy.ranks = 1;
    p.strategy.backend = info->backends.empty() ? p.strategy.backend : "gloo";
    p.hosts.launcher = "ssh";
    p.hosts.hosts = {"a:" + std::to_string(processCount(p))};
    bool refused = false;
    for (const auto& e : validate(p)) refused = refused || e.path == "strategy.kind";
    QCOMPARE(refused, !info->acrossHosts);
    QCOMPARE(acrossHostsStrategies(), std::string("\"ddp\" or \"command\""));
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

  void recordFramesRoundTrip() {
    Record step;
    step.step = {3, 42, 2, 0.25, 1234.5, 1.5, 0.1, 0.9, 0.4, 0.1, 0.01, 123456789};
    Record val;
    val.kind = Record::Kind::Validation;
    val.step.rank = 0;
    val.step.step = 40;
    val.valLoss = 0.5;
    val.valAccuracy = 0.875;
    Record beat;
    beat.kind = Record::Kind::Heartbeat;
    beat.step.rank = 1;
    beat.step.step = 41;
    beat.setState("comm");
    beat.parameters = 11173962;  // the model's size, which the window's rank table shows
    Record done;
    done.kind = Record::Kind::Done;
    done.step.rank = 1;
    done.step.step = 42;
    std::string stream;
    for (const Record* r : {&step, &val, &beat, &done}) encodeRecord(*r, stream);
    QCOMPARE(stream.size(), 4 * kRecordFrameBytes);

    // Whole frames decode; a partial one is left for the next read.
    std::vector<Record> out;
    bool malformed = false;
    QCOMPARE(decodeRecords(std::string_view(stream).substr(0, stream.size() - 1), out, malformed),
             3 * kRecordFrameBytes);
    QVERIFY(!malformed);
    QCOMPARE(out.size(), std::size_t(3));
    out.clear();
    QCOMPARE(decodeRecords(stream, out, malformed), stream.size());
    QVERIFY(out[0].kind == Record::Kind::Step);
    QVERIFY(out[0].step == step.step);  // every field, each with its own value
    QVERIFY(out[1].kind == Record::Kind::Validation);
    QVERIFY(out[1].step == val.step);
    QCOMPARE(out[1].valLoss, 0.5);
    QCOMPARE(out[1].valAccuracy, 0.875);
    QVERIFY(out[2].kind == Record::Kind::Heartbeat);
    QCOMPARE(QString::fromStdString(std::string(out[2].stateName())), QString("comm"));
    QCOMPARE(out[2].parameters, std::int64_t(11173962));
    QVERIFY(out[3].kind == Record::Kind::Done);
    QCOMPARE(out[3].step.step, std::int64_t(42));

    // Anything not ours stops decoding at the bad frame: a wrong magic, kind, rank, step,
    // a state that is not a word, bytes a kind leaves zero.
    auto corrupt = [&](std::size_t frame, std::size_t at, char byte) {
      std::string s = stream;
      s[frame * kRecordFrameBytes + at] = byte;
      std::vector<Record> got;
      bool bad = false;
      const std::size_t used = decodeRecords(s, got, bad);
      return bad && used == frame * kRecordFrameBytes && got.size() == frame;
    };
    QVERIFY(corrupt(0, 0, 'x'));      // magic
    QVERIFY(corrupt(1, 4, 'Q'));      // kind
    QVERIFY(corrupt(1, 5, 1));        // reserved
    QVERIFY(corrupt(2, 11, '\x80'));  // negative rank
    QVERIFY(corrupt(3, 23, '\x80'));  // negative step
    QVERIFY(corrupt(2, 32, 'C'));     // "Comm": not a word
    QVERIFY(corrupt(2, 33, '\x1b'));  // an escape in the state
    QVERIFY(corrupt(3, 60, 1));       // a Done frame carrying values
    QVERIFY(corrupt(2, 55, '\x80'));  // a negative parameter count
    QVERIFY(corrupt(2, 60, 1));       // a heartbeat carrying more than its state and parameters
    QVERIFY(!corrupt(0, 40, 1));      // a step's loss may be any double

    // A DDP rank's heartbeat carries its collective counts (Note [Collective positions]); a
    // heartbeat without them, as a build from before the counts wrote it, reads as a rank
    // that does not count; counts that cannot be (more completed than entered) are not ours.
    QVERIFY(!out[2].countsCollectives);
    Record counted = beat;
    counted.setCollectives(1043, 1042, "all-reduce");
    std::string frames;
    encodeRecord(counted, frames);
    QCOMPARE(frames.substr(0, 56), stream.substr(2 * kRecordFrameBytes, 56));  // the older fields where they were
    std::vector<Record> back;
    QCOMPARE(decodeRecords(frames, back, malformed), kRecordFrameBytes);
    QVERIFY(!malformed && back[0].countsCollectives);
    QCOMPARE(back[0].collectivesEntered, std::int64_t(1043));
    QCOMPARE(back[0].collectivesCompleted, std::int64_t(1042));
    QCOMPARE(QString::fromStdString(std::string(back[0].collectiveName())), QString("all-reduce"));
    QCOMPARE(back[0].parameters, std::int64_t(11173962));
    auto corruptCounts = [&](std::size_t at, char byte) {
      std::string f = frames;
      f[at] = byte;
      std::vector<Record> got;
      bool bad = false;
      return decodeRecords(f, got, bad) == 0 && bad && got.empty();
    };
    QVERIFY(corruptCounts(65, 5));    // 1298 completed of 1043 entered
    QVERIFY(corruptCounts(72, 'A'));  // a name that is not lower-case letters and '-'
    QVERIFY(corruptCounts(88, 2));    // a flag that is neither 0 nor 1
    QVERIFY(corruptCounts(100, 1));   // bytes past the counts
    QVERIFY(!corruptCounts(56, 20));  // more entered is still a count

    // The text form, for a worker run by hand.
    std::string line;
    formatRecord(step, line);
    QCOMPARE(QString::fromStdString(line), QString("S 3 42 2 0.25 1234.5 1.5 0.1 0.9 0.4 0.1 0.01 123456789 0\n"));
    line.clear();
    formatRecord(beat, line);
    QCOMPARE(QString::fromStdString(line), QString("H 1 41 comm 11173962\n"));
    line.clear();
    formatRecord(counted, line);
    QCOMPARE(QString::fromStdString(line), QString("H 1 41 comm 11173962 1043 1042 all-reduce\n"));
  }

  // A group of steps (Note [Step groups]) travels in a longer frame: every field comes back,
  // a frame cut anywhere waits for the rest, and a group of no steps, of more steps than its
  // first to its last, or one that starts after its last step, is not ours.
  void groupFramesRoundTrip() {
    Record g;
    g.kind = Record::Kind::Group;
    g.step = {1, 4100, 7, 0.25, 1234.5, 1.5, 0.1, 0.9, 0.4, 0.1, 0.01, 123456789};
    g.group = {4096, 5, 1.75, 0.125, 0.5, 6.5, 7.25, 0.5, 4.5, 2.0, 0.625};
    Record done;
    done.kind = Record::Kind::Done;
    done.step.rank = 1;
    done.step.step = 4100;
    std::string stream;
    encodeRecord(g, stream);
    encodeRecord(done, stream);
    QCOMPARE(stream.size(), kGroupFrameBytes + kRecordFrameBytes);
    for (std::size_t cut : {std::size_t(0), std::size_t(1), kRecordFrameBytes, kGroupFrameBytes - 1}) {
      std::vector<Record> out;
      bool malformed = false;
      QCOMPARE(decodeRecords(std::string_view(stream).substr(0, cut), out, malformed), std::size_t(0));
      QVERIFY(!malformed && out.empty());
    }
    std::vector<Record> out;
    bool malformed = false;
    QCOMPARE(decodeRecords(stream, out, malformed), stream.size());
    QVERIFY(!malformed);
    QCOMPARE(out.size(), std::size_t(2));
    QVERIFY(out[0].kind == Record::Kind::Group);
    QVERIFY(out[0].step == g.step);
    QVERIFY(out[0].group == g.group);
    QVERIFY(out[1].kind == Record::Kind::Done);
    auto corrupt = [&](std::size_t at, std::int64_t value) {
      std::string s = stream;
      std::memcpy(&s[at], &value, sizeof value);
      std::vector<Record> got;
      bool bad = false;
      return decodeRecords(s, got, bad) == 0 && bad && got.empty();
    };
    QVERIFY(corrupt(kRecordFrameBytes + 8, 0));  // no steps
    QVERIFY(corrupt(kRecordFrameBytes, 4101));   // first after last
    QVERIFY(corrupt(kRecordFrameBytes, -1));     // a negative first step
    QVERIFY(corrupt(kRecordFrameBytes, 4097));   // 5 steps from 4097 to 4100
    QVERIFY(!corrupt(kRecordFrameBytes, 4090));  // 5 of the steps from 4090 to 4100
    std::string line;
    formatRecord(g, line);
    QCOMPARE(QString::fromStdString(line),
             QString("G 1 4096 4100 5 1.75 0.125 0.5 6.5 7.25 0.5 4.5 2 0.625 7 0.25 1234.5 1.5 0.1 0.9 0.4 0.1 0.01 "
                     "123456789 0\n"));
  }

  // A step record is read as a group of one step (Note [Step groups]): its sums are the
  // step's own, so whoever sums steps adds steps and groups alike; a group is its own sums.
  void aStepIsAGroupOfOne() {
    Record step;
    step.step = {2, 40, 1, 0.75, 3200, 20, 2, 12, 4, 2, 0.01, 1024};
    const StepGroup one = asGroup(step);
    QCOMPARE(one.first, std::int64_t(40));
    QCOMPARE(one.count, std::int64_t(1));
    QCOMPARE(one.lossSum, 0.75);
    QCOMPARE(one.lossMin, 0.75);
    QCOMPARE(one.lossMax, 0.75);
    QCOMPARE(one.samples, 3200 * 0.02);  // samples/s over the step's 20 ms
    QCOMPARE(one.stepMs, 20.0);
    QCOMPARE(one.dataMs + one.computeMs + one.commMs + one.optMs, 20.0);
    QVERIFY(holdsSteps(step));
    QCOMPARE(samplesPerS(step), 3200.0);  // the rank's own figure, not samples over time

    Record group;
    group.kind = Record::Kind::Group;
    group.step = step.step;
    group.group = {37, 4, 3.0, 0.5, 1.0, 640, 80, 8, 48, 16, 8};
    QVERIFY(asGroup(group) == group.group);
    QVERIFY(holdsSteps(group));
    QCOMPARE(samplesPerS(group), 640 / 0.08);
    group.group.stepMs = 0;  // no time measured: the last step's rate
    QCOMPARE(samplesPerS(group), 3200.0);

    Record validation;
    validation.kind = Record::Kind::Validation;
    QVERIFY(!holdsSteps(validation));
    QCOMPARE(asGroup(validation).count, std::int64_t(0));
  }
};

QTEST_APPLESS_MAIN(TestProfile)
#include "test_profile.moc"
