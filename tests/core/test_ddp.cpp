// Equivalence: DDP on N ranks ends with the parameters that one process reaches on the
// same global batches; every rank holds identical parameters.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <torch/torch.h>

#include "engine/strategy.h"
#include "engine/sampler.h"
#include "engine/trainer.h"
#include "launch/launcher.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

Q_DECLARE_METATYPE(ptw::core::Profile)

namespace {

// One process on the global batches of a `world`-rank run: the reference.
std::vector<torch::Tensor> referenceParameters(const Profile& p, int world) {
  Profile single = p;
  single.strategy.kind = "single";
  single.strategy.ranks = 1;
  engine::SyncContext ctx{single, 0, 1, 0};
  const std::int64_t samples = p.data.samples;
  engine::BatchPlan plan = [&](std::int64_t epoch) {
    engine::SamplerOptions o(samples, world, 0);
    o.seed = p.hyper.seed;
    o.epoch = epoch;
    o.shuffle = p.hyper.shuffle;
    o.dropLast = p.hyper.dropLast;
    return engine::globalBatches(o, p.hyper.batchSize);
  };
  engine::Trainer t(engine::TrainerOptions(single, 0, 1).setPlan(plan), engine::makeStrategy(ctx));
  std::atomic<bool> stop{false};
  t.run(stop);
  return t.parameters();
}

double maxAbsDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

}  // namespace

class TestDdp : public QObject {
  Q_OBJECT
 private slots:
  // tests/data/sampler_table.json was computed with torch.utils.data.DistributedSampler
  // (tests/data/make_sampler_table.py).
  void shardingMatchesPyTorchDistributedSampler() {
    QFile f(qEnvironmentVariable("PTW_SOURCE_DIR") + "/tests/data/sampler_table.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    QJsonArray rows = QJsonDocument::fromJson(f.readAll()).array();
    QVERIFY(rows.size() >= 8);
    for (const auto& rowValue : rows) {
      QJsonObject row = rowValue.toObject();
      const int world = row["world"].toInt();
      QJsonArray perRank = row["indices"].toArray();
      QCOMPARE(perRank.size(), world);
      for (int r = 0; r < world; ++r) {
        engine::SamplerOptions o(row["n"].toInt(), world, r);
        o.seed = static_cast<std::uint64_t>(row["seed"].toInt());
        o.epoch = row["epoch"].toInt();
        o.shuffle = row["shuffle"].toBool();
        o.dropLast = row["drop_last"].toBool();
        auto mine = engine::shardIndices(o);
        QJsonArray expected = perRank[r].toArray();
        QCOMPARE(static_cast<int>(mine.size()), expected.size());
        for (int i = 0; i < expected.size(); ++i)
          QVERIFY2(mine[static_cast<std::size_t>(i)] == expected[i].toInt(),
                   qPrintable(QStringLiteral("n=%1 world=%2 rank=%3 index %4").arg(row["n"].toInt()).arg(world).arg(r).arg(i)));
      }
    }
  }

  void ddpEqualsOneProcessOnTheFullBatch_data() {
    QTest::addColumn<Profile>("profile");
    Profile seed = defaultProfile();
    QTest::newRow("seed workload, 2 ranks, SGD") << seed;

    Profile mlp = defaultProfile();
    mlp.model.kind = "mlp";
    mlp.model.inFeatures = 8;
    mlp.model.hidden = {16, 16};
    mlp.model.outFeatures = 3;
    mlp.data.kind = "synthetic-classification";
    mlp.data.samples = 96;
    mlp.hyper.momentum = 0.9;
    mlp.hyper.lr = 0.05;
    mlp.strategy.ranks = 3;
    QTest::newRow("mlp, 3 ranks, SGD momentum") << mlp;

    Profile adam = mlp;
    adam.strategy.ranks = 2;
    adam.hyper.optimizer = "adam";
    adam.hyper.lr = 0.01;
    adam.hyper.momentum = 0;
    QTest::newRow("mlp, 2 ranks, Adam") << adam;

    Profile shm = mlp;
    shm.strategy.backend = "shm";
    QTest::newRow("mlp, 3 ranks, SGD momentum, shared-memory all-reduce") << shm;
    Profile shmSeed = seed;
    shmSeed.strategy.backend = "shm";
    QTest::newRow("seed workload, 2 ranks, shared-memory all-reduce") << shmSeed;
  }
  void ddpEqualsOneProcessOnTheFullBatch() {
    QFETCH(Profile, profile);
    const int world = profile.strategy.ranks;
    QCOMPARE(profile.hyper.maxSteps, std::int64_t(20));
    QTemporaryDir dir;
    LaunchOptions lo(test::workerPath(), test::writeProfile(dir, profile), world);
    lo.setOutDir(dir.path().toStdString());
    Launcher launcher(lo);
    LaunchObserver quiet;
    RunReport report = launcher.run(quiet);
    QVERIFY2(report.status == RunReport::Status::Finished, report.message.c_str());

    std::vector<std::vector<torch::Tensor>> ranks(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r)
      torch::load(ranks[static_cast<std::size_t>(r)], dir.filePath(QStringLiteral("rank%1.final.pt").arg(r)).toStdString());
    for (int r = 1; r < world; ++r) QCOMPARE(maxAbsDiff(ranks[0], ranks[static_cast<std::size_t>(r)]), 0.0);

    auto reference = referenceParameters(profile, world);
    double diff = maxAbsDiff(ranks[0], reference);
    QVERIFY2(diff < 1e-5, qPrintable(QStringLiteral("max |ddp - single| = %1").arg(diff)));
    // And training did something: the parameters moved away from their initial values.
    auto initial = engine::makeModel(profile.model, profile.hyper.seed)->parameters();
    QVERIFY(maxAbsDiff(reference, initial) > 1e-3);
  }
};

QTEST_APPLESS_MAIN(TestDdp)
#include "test_ddp.moc"
