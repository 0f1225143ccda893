// SPDX-License-Identifier: GPL-3.0-or-later
// Workloads: TorchScript round trip with Python, the shipped MNIST-format fixture, CSV
// columns, learning-rate schedules, gradients by hand against autograd's, and every
// bad-input case caught before training with a message that names the problem.
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QScopeGuard>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "common/error.h"
#include "common/strategies.h"
#include "engine/blas.h"
#include "engine/model.h"
#include "engine/strategy.h"
#include "engine/trainer.h"
#include "engine/workload.h"
#include "launch/launcher.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

Q_DECLARE_METATYPE(ptw::core::Profile)

namespace {

Profile singleProfile() {
  Profile p = defaultProfile();
  p.strategy.kind = "single";
  p.strategy.ranks = 1;
  return p;
}

// Builds a Trainer for `p` on one process; returns the error text, or "" when it built.
std::string trainerError(const Profile& p) {
  Profile single = p;
  single.strategy.kind = "single";
  single.strategy.ranks = 1;
  try {
    engine::SyncContext ctx{single, 0, 1, 0};
    engine::Trainer t(engine::TrainerOptions(p, 0, 1), engine::makeStrategy(ctx));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The parameters `p` ends with, trained on one process ({} when it did not train).
std::vector<torch::Tensor> trainedParameters(const Profile& p) {
  engine::SyncContext ctx{p, 0, 1, 0};
  engine::Trainer t(engine::TrainerOptions(p, 0, 1), engine::makeStrategy(ctx));
  std::atomic<bool> stop{false};
  return t.run(stop) == p.hyper.maxSteps ? t.parameters() : std::vector<torch::Tensor>{};
}

// The largest difference between two parameter lists, laid end to end; infinite when they
// do not hold as many values.
double largestDifference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  auto flat = [](const std::vector<torch::Tensor>& list) {
    std::vector<torch::Tensor> parts;
    for (const auto& t : list) parts.push_back(t.detach().flatten());
    return parts.empty() ? torch::Tensor() : torch::cat(parts);
  };
  const auto x = flat(a), y = flat(b);
  if (!x.defined() || !y.defined() || x.numel() != y.numel()) return std::numeric_limits<double>::infinity();
  return (x - y).abs().max().item<double>();
}

// Trains `byHand` by hand and a copy of it by autograd on the same micro-batches (9 samples,
// 5 classes or 5 regression outputs, of `weights`); "" when every loss is equal and every
// gradient within 1e-6 of the largest, and gradients that existed were added in place.
QString byHandAgainstAutograd(engine::Model& byHand, const std::vector<double>& weights, bool classification,
                              bool gradsExist, torch::Dtype dtype = torch::kFloat) {
  auto reference = byHand.replicate(torch::kCPU);
  auto ours = byHand.parameters(), theirs = reference->parameters();
  if (ours.size() != theirs.size() || ours.empty()) return "the copy lists other parameters";
  const auto in = ours.front().size(1);
  std::vector<void*> before;
  if (gradsExist) {
    for (auto& p : ours) p.mutable_grad() = torch::zeros_like(p);
    for (auto& p : theirs) p.mutable_grad() = torch::zeros_like(p);
    for (auto& p : ours) before.push_back(p.grad().data_ptr());
  }
  torch::manual_seed(11);
  for (double weight : weights) {
    const auto x = torch::randn({9, in}, dtype);
    const auto y = classification ? torch::randint(0, 5, {9}) : torch::randn({9, 5}, dtype);
    const auto loss = byHand.gradientsByHand(x, y, weight, classification);
    if (!loss) return "the chain did not take the batch";
    const auto expected = engine::computeLoss(reference->forward(x), y, classification);
    (expected * weight).backward();
    if (*loss != expected.item<double>())
      return QString("loss %1 by hand, %2 by autograd").arg(*loss, 0, 'g', 17).arg(expected.item<double>(), 0, 'g', 17);
  }
  for (std::size_t i = 0; i < ours.size(); ++i) {
    if (!ours[i].grad().defined()) return QString("parameter %1 has no gradient").arg(i);
    const double worst = (ours[i].grad() - theirs[i].grad()).abs().max().item<double>();
    const double scale = theirs[i].grad().abs().max().item<double>();
    if (!(scale > 0)) return QString("parameter %1: autograd's gradient is zero").arg(i);
    if (!(worst <= 1e-6 * scale))
      return QString("parameter %1: gradients differ by %2 (largest %3)").arg(i).arg(worst).arg(scale);
    if (gradsExist && ours[i].grad().data_ptr() != before[i]) return QString("parameter %1: a new gradient").arg(i);
  }
  return "";
}

void writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(bytes);
}

QByteArray be32(quint32 v) {
  QByteArray b(4, 0);
  b[0] = char(v >> 24);
  b[1] = char(v >> 16);
  b[2] = char(v >> 8);
  b[3] = char(v);
  return b;
}

// Each parameter's shape and values (in memory order), as Python's torch.jit.load sees the file.
struct PyParameter {
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};
std::vector<PyParameter> pythonParameters(const QString& path) {
  QProcess py;
  py.start("/usr/bin/python3", {"-c",
                                "import sys, torch\nm = torch.jit.load(sys.argv[1])\n"
                                "for p in m.parameters():\n"
                                "    print(' '.join(map(str, p.shape)) + ';' + ' '.join(repr(x) for x in "
                                "p.detach().double().flatten().tolist()))",
                                path});
  if (!py.waitForFinished(60000) || py.exitCode() != 0) {
    qWarning() << py.readAllStandardError();
    return {};
  }
  std::vector<PyParameter> out;
  for (const auto& line : QString::fromUtf8(py.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts)) {
    const auto parts = line.split(';');
    PyParameter p;
    for (const auto& d : parts.value(0).split(' ', Qt::SkipEmptyParts)) p.shape.push_back(d.toLongLong());
    for (const auto& v : parts.value(1).split(' ', Qt::SkipEmptyParts)) p.values.push_back(v.toDouble());
    out.push_back(std::move(p));
  }
  return out;
}

// The largest difference between a parameter here and Python's; infinite when the shapes differ.
double differenceFrom(const torch::Tensor& t, const PyParameter& p) {
  if (t.sizes().vec() != p.shape) return std::numeric_limits<double>::infinity();
  const auto flat = t.detach().to(torch::kDouble).contiguous().flatten();
  const auto* v = flat.data_ptr<double>();
  double worst = 0;
  for (std::size_t i = 0; i < p.values.size(); ++i) worst = std::max(worst, std::abs(v[i] - p.values[i]));
  return worst;
}

}  // namespace

class TestWorkload : public QObject {
  Q_OBJECT
 private slots:
  // Adding a strategy is its engine file and its row in the table (common/strategies.h):
  // every row has an engine, every engine a row, and a profile names exactly those.
  void everyStrategyRowHasAnEngineAndEveryEngineARow() {
    // A row that runs the user's command has no engine of ptw's (Note [Script ranks]), nor one
    // whose ranks make up their records (Note [Synthetic ranks]); a hidden row is not offered.
    std::set<std::string> rows, engines, all;
    for (const auto& s : strategies()) {
      if (!s.hidden) all.insert(s.name);
      if (!s.runsCommand && !s.synthetic) rows.insert(s.name);
    }
    for (const auto& entry : engine::strategyRegistry()) engines.insert(entry.first);
    auto joined = [](const std::set<std::string>& names) {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      return all;
    };
    QVERIFY2(rows == engines,
             qPrintable(QString::fromStdString("table: " + joined(rows) + "; engines: " + joined(engines))));
    const auto kinds = fieldChoices("strategy.kind");
    QCOMPARE(std::set<std::string>(kinds.begin(), kinds.end()), all);
    for (const auto& v : sweepVariants()) QVERIFY2(rows.count(v.strategy) == 1, v.name.c_str());
  }

  // A layer applied twice (a tied weight) is one parameter here, as in Python: an optimizer
  // given it twice would step it twice.
  void aTiedWeightIsListedOnce() {
    const QString path = test::sourcePath("resources/data/tied-10-10-1.scripted.pt");
    Profile p = singleProfile();
    p.model.kind = "torchscript";
    p.model.path = path.toStdString();
    const auto params = engine::makeModel(p.model, p.hyper.seed)->parameters();
    const auto python = pythonParameters(path);
    QCOMPARE(python.size(), std::size_t(4));  // hidden.weight, hidden.bias, out.weight, out.bias
    QCOMPARE(params.size(), python.size());
    for (std::size_t i = 0; i < python.size(); ++i) QVERIFY(differenceFrom(params[i], python[i]) < 1e-6);
  }

  // A model made in Python with torch.jit.script trains here, is saved back as
  // TorchScript, and Python loads the trained parameters.
  void torchscriptTrainsAndIsSavedBack() {
    const QString original = test::sourcePath("resources/data/mlp-10-16-1.scripted.pt");
    Profile p = singleProfile();
    p.model.kind = "torchscript";
    p.model.path = original.toStdString();
    p.hyper.optimizer = "adam";
    p.hyper.maxSteps = 30;
    QTemporaryDir dir;
    LaunchOptions lo(test::workerPath(), test::writeProfile(dir, p), 1);
    lo.setOutDir(dir.path().toStdString());
    LaunchObserver quiet;
    RunReport report = Launcher(lo).run(quiet);
    QVERIFY2(report.status == RunReport::Status::Finished, report.message.c_str());

    std::vector<torch::Tensor> trained;
    torch::load(trained, dir.filePath("rank0.final.pt").toStdString());
    const auto saved = pythonParameters(dir.filePath("model.final.pt"));
    const auto before = pythonParameters(original);
    QCOMPARE(saved.size(), trained.size());
    QCOMPARE(before.size(), saved.size());
    double moved = 0;
    for (std::size_t i = 0; i < saved.size(); ++i) {
      const double difference = differenceFrom(trained[i], saved[i]);  // float32 values printed as doubles
      QVERIFY2(difference < 1e-7,
               qPrintable(QStringLiteral("parameter %1: python and ptw differ by %2").arg(i).arg(difference)));
      moved = std::max(moved, differenceFrom(trained[i], before[i]));
    }
    QVERIFY2(moved > 1e-3, "the saved model still holds the untrained parameters");
  }

  // LeNet-5 on the shipped MNIST-format fixture (IDX files) learns it.
  void cnnLearnsTheShippedMnistFixture() {
    Profile p = singleProfile();
    p.model.kind = "cnn";
    p.model.inFeatures = 784;
    p.model.outFeatures = 10;
    p.data.kind = "mnist";
    p.data.path = test::sourcePath("resources/data/mnist-tiny").toStdString();
    p.data.samples = 0;
    p.data.valFraction = 0.2;
    p.hyper.optimizer = "adam";
    p.hyper.lr = 0.002;
    p.hyper.maxSteps = 60;
    engine::SyncContext ctx{p, 0, 1, 0};
    engine::Trainer t(engine::TrainerOptions(p, 0, 1), engine::makeStrategy(ctx));
    const double accuracyBefore = t.validate().second;
    std::atomic<bool> stop{false};
    t.run(stop);
    auto [loss, accuracy] = t.validate();
    QVERIFY2(
        accuracy >= 0.9,
        qPrintable(QStringLiteral("val accuracy %1 (before %2), loss %3").arg(accuracy).arg(accuracyBefore).arg(loss)));
    QVERIFY(accuracyBefore < 0.5);
  }

  // Validation is the model's loss (and, classifying, its accuracy) at that step over the
  // last data.val_fraction of the data: each Validation record equals the same computed here,
  // from the full data and the parameters the model has when the record is made, at steps
  // 10, 20 and 30 (the last also the run's end, not validated twice).
  void validationRecordsAreTheHeldOutRowsAtTheirStep() {
    for (const bool classification : {false, true}) {
      Profile p = classification ? test::mlpProfile(10, {16}, 3, 200) : defaultProfile();
      p.strategy.kind = "single";
      p.strategy.ranks = 1;
      p.data.samples = 200;
      p.data.valFraction = 0.25;
      p.run.evalEvery = 10;
      p.hyper.maxSteps = 30;
      Profile whole = p;
      whole.data.valFraction = 0;
      const engine::Dataset all = engine::makeDataset(whole.data, whole.model);
      const auto x = all.x.narrow(0, 150, 50), y = all.y.narrow(0, 150, 50);
      std::vector<std::tuple<std::int64_t, double, double, double, double>>
          seen;  // step, ours, theirs (loss, accuracy)
      engine::Trainer* trainer = nullptr;
      engine::SyncContext ctx{p, 0, 1, 0};
      engine::Trainer t(engine::TrainerOptions(p, 0, 1), engine::makeStrategy(ctx), [&](const Record& r) {
        if (r.kind != Record::Kind::Validation) return;
        torch::NoGradGuard noGrad;
        const auto out = trainer->model().forward(x);
        const double loss = classification ? torch::nn::functional::cross_entropy(out, y).item<double>()
                                           : torch::mse_loss(out, y).item<double>();
        const double accuracy = classification ? out.argmax(1).eq(y).to(torch::kDouble).mean().item<double>() : -1;
        seen.emplace_back(r.step.step, r.valLoss, loss, r.valAccuracy, accuracy);
      });
      trainer = &t;
      std::atomic<bool> stop{false};
      t.run(stop);
      QCOMPARE(seen.size(), std::size_t(3));
      for (std::size_t k = 0; k < seen.size(); ++k) {
        const auto& [step, valLoss, loss, valAccuracy, accuracy] = seen[k];
        QCOMPARE(step, std::int64_t(10 * (k + 1)));
        QVERIFY2(std::abs(valLoss - loss) <= 1e-6 * std::abs(loss),
                 qPrintable(QString("%1 vs %2").arg(valLoss).arg(loss)));
        QCOMPARE(valAccuracy, accuracy);
      }
      QVERIFY(std::get<2>(seen.back()) < std::get<2>(seen.front()));  // it learned, seen on rows it never trained on
    }
  }

  void csvColumnsArePickedByName() {
    Profile p = singleProfile();
    p.data.kind = "csv";
    p.data.path = test::sourcePath("resources/data/regression.csv").toStdString();
    p.data.target = "y";
    p.data.features = {"x3", "x1"};
    p.data.samples = 0;
    auto d = engine::makeDataset(p.data, p.model);
    QCOMPARE(d.size(), std::int64_t(240));
    QFile f(test::sourcePath("resources/data/regression.csv"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    f.readLine();
    auto cells = QString::fromUtf8(f.readLine()).trimmed().split(',');  // x1,x2,x3,x4,y
    QCOMPARE(d.x[0][0].item<float>(), cells[2].toFloat());
    QCOMPARE(d.x[0][1].item<float>(), cells[0].toFloat());
    QCOMPARE(d.y[0][0].item<float>(), cells[4].toFloat());
  }

  void learningRateSchedules() {
    HyperSpec h;
    h.lr = 0.1;
    QCOMPARE(engine::learningRate(h, 57), 0.1);
    h.schedule = "step";
    h.stepSize = 10;
    h.gamma = 0.5;
    QCOMPARE(engine::learningRate(h, 9), 0.1);
    QCOMPARE(engine::learningRate(h, 10), 0.05);
    QCOMPARE(engine::learningRate(h, 25), 0.025);
    h.schedule = "cosine";
    h.maxSteps = 100;
    QCOMPARE(engine::learningRate(h, 0), 0.1);
    QVERIFY(std::abs(engine::learningRate(h, 50) - 0.05) < 1e-12);
    QVERIFY(std::abs(engine::learningRate(h, 100)) < 1e-12);
    h.warmupSteps = 4;
    QVERIFY(std::abs(engine::learningRate(h, 0) - 0.025) < 1e-12);
    QVERIFY(std::abs(engine::learningRate(h, 3) - 0.1 * 0.5 * (1 + std::cos(M_PI * 0.03))) < 1e-12);
  }

  void badInputIsCaughtBeforeTraining_data() {
    QTest::addColumn<Profile>("profile");
    QTest::addColumn<QString>("expected");
    static QTemporaryDir dir;
    const auto at = [&](const char* name) { return dir.filePath(name).toStdString(); };

    writeFile(dir.filePath("garbage.pt"), "not a model");
    Profile badModel = singleProfile();
    badModel.model.kind = "torchscript";
    badModel.model.path = at("garbage.pt");
    QTest::newRow("model file that does not load") << badModel << "model.path: cannot load TorchScript from";

    writeFile(dir.filePath("ok.csv"), "a,b,y\n1,2,3\n4,5,6\n7,8,9\n");
    Profile csv = singleProfile();
    csv.data.kind = "csv";
    csv.data.path = at("ok.csv");
    csv.data.target = "y";
    csv.data.samples = 0;
    csv.model.inFeatures = 2;
    Profile wideOutput = csv;
    wideOutput.model.outFeatures = 2;
    QTest::newRow("output shape that does not fit the loss")
        << wideOutput << "model: output shape [2, 2] does not fit the target shape [2, 1] of the MSE loss";
    Profile scriptOnClasses = singleProfile();
    scriptOnClasses.model.kind = "torchscript";
    scriptOnClasses.model.path = test::sourcePath("resources/data/mlp-10-16-1.scripted.pt").toStdString();
    scriptOnClasses.data.kind = "synthetic-classification";
    scriptOnClasses.model.outFeatures = 3;
    QTest::newRow("torchscript output that does not fit the classes")
        << scriptOnClasses << "model: output shape [2, 1] does not fit cross-entropy over 3 classes";
    Profile wrongInputs = csv;
    wrongInputs.model.inFeatures = 5;
    QTest::newRow("inputs that do not fit the model")
        << wrongInputs << "model.in_features: the data has 2 features per sample";
    Profile missingColumn = csv;
    missingColumn.data.target = "z";
    QTest::newRow("csv missing column") << missingColumn
                                        << QString::fromStdString(
                                               "data.target: column \"z\" is not in " + csv.data.path +
                                               " (columns: a, b, y); set data.target to one of them");

    writeFile(dir.filePath("bad.csv"), "a,b,y\n1,2,3\n4,abc,6\n");
    Profile nonNumeric = csv;
    nonNumeric.data.path = at("bad.csv");
    QTest::newRow("csv non-numeric cell") << nonNumeric << "line 3, column \"b\": expected a number, got \"abc\"";
    writeFile(dir.filePath("ragged.csv"), "a,b,y\n1,2,3\n4,5\n");
    Profile ragged = csv;
    ragged.data.path = at("ragged.csv");
    QTest::newRow("csv short row") << ragged << "line 3: 2 cells, expected 3";

    QDir().mkpath(dir.filePath("badmagic"));
    writeFile(dir.filePath("badmagic/train-images-idx3-ubyte"), be32(0x801) + be32(1) + be32(28) + be32(28));
    writeFile(dir.filePath("badmagic/train-labels-idx1-ubyte"), be32(0x801) + be32(1) + QByteArray(1, 0));
    Profile mnist = singleProfile();
    mnist.model.kind = "cnn";
    mnist.model.inFeatures = 784;
    mnist.model.outFeatures = 10;
    mnist.data.kind = "mnist";
    mnist.data.samples = 0;
    mnist.data.path = at("badmagic");
    QTest::newRow("idx bad magic") << mnist << "bad magic number, expected 0x00000803";
    QDir().mkpath(dir.filePath("truncated"));
    writeFile(dir.filePath("truncated/train-images-idx3-ubyte"),
              be32(0x803) + be32(3) + be32(28) + be32(28) + QByteArray(784 * 2, 1));
    writeFile(dir.filePath("truncated/train-labels-idx1-ubyte"), be32(0x801) + be32(3) + QByteArray(3, 0));
    Profile truncated = mnist;
    truncated.data.path = at("truncated");
    QTest::newRow("idx truncated") << truncated << "is truncated: 3 images need 2368 bytes, the file has 1584";
    Profile missingFolder = mnist;
    missingFolder.data.path = at("nowhere");
    QTest::newRow("mnist folder missing")
        << missingFolder
        << QString::fromStdString("data.path: " + missingFolder.data.path +
                                  " is not a folder; set data.path to the folder that holds "
                                  "train-images-idx3-ubyte and train-labels-idx1-ubyte");

    Profile crowded = csv;
    crowded.strategy.kind = "ddp";
    crowded.strategy.ranks = 4;
    QTest::newRow("more ranks than samples") << crowded << "strategy.ranks: more ranks (4) than training samples (3)";
    Profile resume = singleProfile();
    resume.run.resumeFrom = at("garbage.pt");
    QTest::newRow("checkpoint that does not load") << resume << "run.resume_from: cannot read checkpoint";
    {
      torch::serialize::OutputArchive other;  // stamped by another LibTorch
      other.write("libtorch_version", c10::IValue(std::string("0.4.1")));
      other.save_to(at("other-libtorch.pt"));
    }
    Profile otherVersion = singleProfile();
    otherVersion.run.resumeFrom = at("other-libtorch.pt");
    QTest::newRow("checkpoint of another LibTorch")
        << otherVersion << "was written by a ptw built on LibTorch 0.4.1, this one is built on";
  }
  void sgdMatchesTorchSgdOptionByOption() {
    // makeOptimizer's SGD (Note [Fused SGD]) against torch::optim::SGD: same parameters and
    // momentum buffers after every step, for each option; a checkpoint of one loads into
    // the other and both go on identically.
    struct Case {
      double momentum, decay;
      bool nesterov;
    };
    for (const Case c : {Case{0, 0, false}, Case{0.9, 0, false}, Case{0.9, 1e-2, false}, Case{0.9, 1e-2, true},
                         Case{0, 1e-2, false}}) {
      core::HyperSpec h;
      h.optimizer = "sgd";
      h.lr = 0.05;
      h.momentum = c.momentum;
      h.weightDecay = c.decay;
      h.nesterov = c.nesterov;
      torch::manual_seed(3);
      std::vector<torch::Tensor> ours = {torch::randn({7, 5}).requires_grad_(), torch::randn({5}).requires_grad_(),
                                         torch::randn({3, 2, 2}).requires_grad_()};
      std::vector<torch::Tensor> theirs;
      for (const auto& p : ours) theirs.push_back(p.detach().clone().requires_grad_());
      auto fused = engine::makeOptimizer(h, ours);
      torch::optim::SGD reference(
          theirs, torch::optim::SGDOptions(h.lr).momentum(h.momentum).weight_decay(h.weightDecay).nesterov(h.nesterov));
      auto stepBoth = [&](torch::optim::Optimizer& a, torch::optim::Optimizer& b, int steps) {
        for (int s = 0; s < steps; ++s) {
          for (std::size_t k = 0; k < ours.size(); ++k) {
            auto g = torch::randn_like(ours[k]);
            ours[k].mutable_grad() = g.clone();
            theirs[k].mutable_grad() = g.clone();
          }
          a.step();
          b.step();
          for (std::size_t k = 0; k < ours.size(); ++k)
            QVERIFY2(torch::allclose(ours[k], theirs[k], 1e-5, 1e-6),
                     qPrintable(QStringLiteral("momentum %1 decay %2 nesterov %3: parameter %4 differs at step %5")
                                    .arg(c.momentum)
                                    .arg(c.decay)
                                    .arg(c.nesterov)
                                    .arg(k)
                                    .arg(s)));
        }
      };
      stepBoth(*fused, reference, 6);
      if (QTest::currentTestFailed()) return;
      // The fused state, saved, is torch's: a fresh torch SGD loaded from it continues the same.
      std::stringstream saved;
      {
        torch::serialize::OutputArchive out;
        fused->save(out);
        out.save_to(saved);
      }
      torch::optim::SGD reloaded(
          ours, torch::optim::SGDOptions(h.lr).momentum(h.momentum).weight_decay(h.weightDecay).nesterov(h.nesterov));
      torch::serialize::InputArchive in;
      in.load_from(saved);
      reloaded.load(in);
      stepBoth(reloaded, reference, 3);
    }
    // A gradient that is not dense float32 on the CPU takes torch's own step, with the same result.
    core::HyperSpec h;
    h.lr = 0.1;
    h.momentum = 0.5;
    auto p = torch::ones({4}, torch::kDouble).requires_grad_();
    auto opt = engine::makeOptimizer(h, {p});
    p.mutable_grad() = torch::full({4}, 2.0, torch::kDouble);
    opt->step();
    opt->step();
    QVERIFY(torch::allclose(p, torch::full({4}, 1.0 - 0.1 * 2.0 - 0.1 * (2.0 * 0.5 + 2.0), torch::kDouble)));
  }

  // Note [Gradients by hand]: the chain's gradients are autograd's, for each activation and
  // loss, into gradients that exist (in place, as shared-memory strategies need) or not yet,
  // and added over micro-batches of unequal weight. What the chain cannot take is left alone.
  // AdamW decays the weights apart from the gradient: one step of makeOptimizer's AdamW is
  // Adam without decay after p *= 1 - lr * decay (PyTorch's AdamW), step by step; Adam with
  // the same decay (added to the gradient) trains other parameters, and so does AdamW without it.
  void adamwDecaysTheWeightsApartFromTheGradient() {
    core::HyperSpec h;
    h.optimizer = "adamw";
    h.lr = 0.01;
    h.weightDecay = 0.1;
    torch::manual_seed(3);
    auto w = torch::randn({5, 4}).requires_grad_(true);
    auto reference = w.detach().clone().requires_grad_(true);
    auto adamw = engine::makeOptimizer(h, {w});
    torch::optim::Adam adam({reference}, torch::optim::AdamOptions(h.lr));
    for (int step = 0; step < 5; ++step) {
      const auto g = torch::randn({5, 4});
      w.mutable_grad() = g.clone();
      reference.mutable_grad() = g.clone();
      adamw->step();
      {
        torch::NoGradGuard noGrad;
        reference.mul_(1 - h.lr * h.weightDecay);
      }
      adam.step();
      const double diff = (w - reference).abs().max().item<double>();
      QVERIFY2(diff <= 1e-7, qPrintable(QString("step %1: |AdamW - hand| = %2").arg(step).arg(diff)));
    }
    // In a run: AdamW, Adam with the same decay, and AdamW without decay each end elsewhere.
    Profile p = test::mlpProfile(10, {16}, 3, 200);
    p.strategy.kind = "single";
    p.strategy.ranks = 1;
    p.hyper.optimizer = "adamw";
    p.hyper.momentum = 0;
    p.hyper.lr = 0.01;
    p.hyper.weightDecay = 0.5;
    Profile adamSame = p, noDecay = p;
    adamSame.hyper.optimizer = "adam";
    noDecay.hyper.weightDecay = 0;
    const auto decayed = trainedParameters(p);
    QVERIFY(!decayed.empty());
    QVERIFY2(largestDifference(decayed, trainedParameters(adamSame)) > 1e-4, "AdamW trained as Adam does");
    QVERIFY2(largestDifference(decayed, trainedParameters(noDecay)) > 1e-4, "AdamW's decay changed nothing");
  }

  // Clipping scales the gradient to the clip when its norm is above it (one SGD step on a
  // gradient of norm 5: lr * g * clip / 5), and leaves it when below; so does a run.
  void clippingScalesOnlyGradientsAboveTheClip() {
    core::HyperSpec h;
    h.optimizer = "sgd";
    h.lr = 0.1;
    h.momentum = 0;
    Profile single = singleProfile();
    engine::SyncContext ctx{single, 0, 1, 0};
    auto strategy = engine::makeStrategy(ctx);
    for (const double clip : {1.0, 10.0}) {
      auto w = torch::zeros({2}).requires_grad_(true);
      w.mutable_grad() = torch::tensor({3.0f, 4.0f});
      auto sgd = engine::makeOptimizer(h, {w});
      strategy->optimizerStep(*sgd, clip);
      const double scale = clip < 5 ? clip / 5 : 1.0;
      const auto expected = torch::tensor({3.0f, 4.0f}) * static_cast<float>(-h.lr * scale);
      QVERIFY2(torch::allclose(w.detach(), expected, 1e-5, 1e-6),
               qPrintable(QString("clip %1: got %2 %3").arg(clip).arg(w[0].item<double>()).arg(w[1].item<double>())));
    }
    Profile p = test::mlpProfile(10, {16}, 3, 200);
    p.strategy.kind = "single";
    p.strategy.ranks = 1;
    Profile above = p, below = p;
    above.hyper.clipNorm = 1e-3;  // far below any step's gradient norm
    below.hyper.clipNorm = 1e9;
    const auto plain = trainedParameters(p);
    QVERIFY(!plain.empty());
    QCOMPARE(largestDifference(plain, trainedParameters(below)), 0.0);
    QVERIFY2(largestDifference(plain, trainedParameters(above)) > 1e-4, "clipping below the norm changed nothing");
  }

  void gradientsByHandAreAutogradsGradients_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("activation");
    QTest::addColumn<bool>("classification");
    QTest::addColumn<QVector<double>>("weights");  // one micro-batch each
    QTest::addColumn<bool>("gradsExist");
    QTest::newRow("linear, cross-entropy") << "linear"
                                           << "relu" << true << QVector<double>{1.0} << true;
    QTest::newRow("linear, mse, no grads yet") << "linear"
                                               << "relu" << false << QVector<double>{1.0} << false;
    QTest::newRow("mlp relu, cross-entropy") << "mlp"
                                             << "relu" << true << QVector<double>{1.0} << true;
    QTest::newRow("mlp tanh, mse") << "mlp"
                                   << "tanh" << false << QVector<double>{1.0} << true;
    QTest::newRow("mlp gelu, cross-entropy") << "mlp"
                                             << "gelu" << true << QVector<double>{1.0} << false;
    QTest::newRow("mlp relu, 3 micro-batches") << "mlp"
                                               << "relu" << true << QVector<double>{0.5, 0.25, 0.25} << true;
    QTest::newRow("mlp gelu, mse, 2 micro-batches") << "mlp"
                                                    << "gelu" << false << QVector<double>{0.75, 0.25} << false;
  }
  void gradientsByHandAreAutogradsGradients() {
    QFETCH(QString, kind);
    QFETCH(QString, activation);
    QFETCH(bool, classification);
    QFETCH(QVector<double>, weights);
    QFETCH(bool, gradsExist);
    core::ModelSpec spec;
    spec.kind = kind.toStdString();
    spec.inFeatures = 12;
    spec.outFeatures = 5;
    if (kind == "mlp") spec.hidden = {24, 16};
    spec.activation = activation.toStdString();
    auto byHand = engine::makeModel(spec, 7);
    const QString differs =
        byHandAgainstAutograd(*byHand, std::vector<double>(weights.begin(), weights.end()), classification, gradsExist);
    QVERIFY2(differs.isEmpty(), qPrintable(differs));
  }

  // Networks makeModel does not build but the chain takes: a layer without bias, an in-place
  // ReLU, GELU's tanh approximation, two Linear layers in a row; and a float64 network.
  void gradientsByHandTakeAnyLinearChain() {
    namespace nn = torch::nn;
    for (bool classification : {true, false}) {
      auto model = engine::makeSequentialModel(nn::Sequential(
          nn::Linear(nn::LinearOptions(12, 10).bias(false)), nn::ReLU(nn::ReLUOptions(true)), nn::Linear(10, 8),
          nn::GELU(nn::GELUOptions().approximate("tanh")), nn::Linear(8, 6), nn::Linear(6, 5)));
      const QString differs = byHandAgainstAutograd(*model, {0.5, 0.5}, classification, true);
      QVERIFY2(differs.isEmpty(), qPrintable(differs));
    }
    nn::Sequential wide(nn::Linear(12, 7), nn::Tanh(), nn::Linear(7, 5));
    wide->to(torch::kDouble);
    auto doubles = engine::makeSequentialModel(wide);
    const QString differs = byHandAgainstAutograd(*doubles, {1.0}, true, false, torch::kDouble);
    QVERIFY2(differs.isEmpty(), qPrintable(differs));
  }

  void gradientsByHandLeaveWhatTheyCannotTake() {
    core::ModelSpec spec;
    spec.kind = "cnn";
    spec.outFeatures = 10;
    auto cnn = engine::makeModel(spec, 1);
    QVERIFY(!cnn->gradientsByHand(torch::randn({2, 784}), torch::randint(0, 10, {2}), 1.0, true).has_value());
    spec.kind = "linear";
    spec.inFeatures = 4;
    spec.outFeatures = 2;
    auto linear = engine::makeModel(spec, 1);
    // A regression target the loss would have to broadcast, labels that are not class indices, and
    // fewer labels than samples: autograd's path reports what is wrong.
    QVERIFY(!linear->gradientsByHand(torch::randn({3, 4}), torch::randn({3}), 1.0, false).has_value());
    QVERIFY(!linear->gradientsByHand(torch::randn({3, 4}), torch::randn({3, 2}), 1.0, true).has_value());
    QVERIFY(!linear->gradientsByHand(torch::randn({3, 4}), torch::randint(0, 2, {2}), 1.0, true).has_value());
    // Inputs or targets of another type than the network's, which autograd's path converts.
    QVERIFY(!linear->gradientsByHand(torch::randn({3, 4}, torch::kDouble), torch::randint(0, 2, {3}), 1.0, true));
    QVERIFY(!linear->gradientsByHand(torch::randn({3, 4}), torch::randn({3, 2}, torch::kDouble), 1.0, false));
    for (const auto& p : linear->parameters()) QVERIFY(!p.grad().defined());
    // A frozen layer, which autograd gives no gradient.
    torch::nn::Sequential net(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::Linear(3, 2));
    net->parameters().front().requires_grad_(false);
    auto frozen = engine::makeSequentialModel(net);
    QVERIFY(!frozen->gradientsByHand(torch::randn({3, 4}), torch::randint(0, 2, {3}), 1.0, true).has_value());
  }

  // Runs train the same by hand as with autograd (worker flag --gradients autograd): every
  // rank's loss at every step, for the strategies that take the chain's gradients; each rank's
  // log says which it used.
  void runsTrainTheSameByHandAsWithAutograd_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("ranks");
    QTest::newRow("single") << "single" << 1;
    QTest::newRow("dataparallel, 2 lanes") << "dataparallel" << 2;
    QTest::newRow("ddp over shared memory, 2 ranks") << "ddp" << 2;
    QTest::newRow("pool sync, 2 workers") << "pool" << 2;
  }
  void runsTrainTheSameByHandAsWithAutograd() {
    QFETCH(QString, kind);
    QFETCH(int, ranks);
    Profile p = test::mlpProfile(defaultProfile().model.inFeatures, {32, 32}, 4, 512);
    p.hyper.batchSize = 32;
    p.hyper.maxSteps = 40;
    p.strategy.kind = kind.toStdString();
    p.strategy.ranks = ranks;
    struct Losses final : LaunchObserver {
      std::map<std::pair<int, std::int64_t>, double> at;
      void onRecords(std::vector<Record>& batch) override {
        for (const auto& r : batch)
          if (r.kind == Record::Kind::Step) at[{r.step.rank, r.step.step}] = r.step.loss;
      }
    };
    auto train = [&](bool autograd) {
      QTemporaryDir dir;
      LaunchOptions lo(test::workerPath(), test::writeProfile(dir, p), processCount(p));
      lo.setOutDir(dir.path().toStdString());
      if (autograd) lo.extraWorkerArgs = {"--gradients", "autograd"};
      Losses losses;
      const auto status = Launcher(lo).run(losses).status;
      // The pool's rank 0 is its coordinator, which computes no gradients.
      QFile log(dir.filePath(kind == "pool" ? "rank1.log" : "rank0.log"));
      const QString said = log.open(QIODevice::ReadOnly) ? QString::fromUtf8(log.readAll()) : QString();
      const QString expected = autograd ? "; gradients autograd\n" : "; gradients by hand\n";
      if (!said.contains(expected))
        QTest::qFail(qPrintable(log.fileName() + " lacks \"" + expected.trimmed() + "\":\n" + said), __FILE__,
                     __LINE__);
      return status == RunReport::Status::Finished ? losses.at : decltype(losses.at){};
    };
    const auto byHand = train(false), autograd = train(true);
    if (QTest::currentTestFailed()) return;
    QVERIFY(!autograd.empty());
    QCOMPARE(byHand.size(), autograd.size());
    for (const auto& [key, loss] : autograd) {
      const auto it = byHand.find(key);
      QVERIFY(it != byHand.end());
      QVERIFY2(std::abs(it->second - loss) <= 1e-6 * std::max(1.0, std::abs(loss)),
               qPrintable(QString("rank %1 step %2: %3 by hand, %4 by autograd")
                              .arg(key.first)
                              .arg(key.second)
                              .arg(it->second, 0, 'g', 12)
                              .arg(loss, 0, 'g', 12)));
    }
  }

  // The worker's hidden flags take their value after a space or '=' (--gradients autograd
  // trains by autograd, as its log says), and a malformed one stops the rank with a message
  // that names the flag.
  void workerFlagsTakeTheirValueAndNameThemselves_data() {
    QTest::addColumn<QStringList>("flags");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("expected");
    const QString faultSyntax =
        "--fault: expected throw-at-start:RANK, hang-at-start:RANK, kill-at-step:RANK:STEP, hang-at-step:RANK:STEP or "
        "slow-at-step:RANK:STEP:FACTOR (FACTOR > 1)";
    QTest::newRow("--gradients=autograd") << QStringList{"--gradients=autograd"} << 0 << "; gradients autograd\n";
    QTest::newRow("no flag") << QStringList{} << 0 << "; gradients by hand\n";
    QTest::newRow("--gradients, another value")
        << QStringList{"--gradients", "byhand"} << 2 << "error: --gradients: expected \"autograd\", got \"byhand\"";
    QTest::newRow("--fault, another kind")
        << QStringList{"--fault", "explode:0"} << 2 << faultSyntax + ", got \"explode:0\"";
    QTest::newRow("--fault=, no step") << QStringList{"--fault=kill-at-step:0"} << 2
                                       << faultSyntax + ", got \"kill-at-step:0\"";
    QTest::newRow("--fault=, a rank that is no number")
        << QStringList{"--fault=throw-at-start:x"} << 2 << faultSyntax + ", got \"throw-at-start:x\"";
    QTest::newRow("--fault, this rank at start")
        << QStringList{"--fault", "throw-at-start:0"} << 1 << "error: injected fault at start (--fault)";
    QTest::newRow("--fault=, another rank") << QStringList{"--fault=throw-at-start:1"} << 0 << "finished after";
    QTest::newRow("--metrics-phases=, too short")
        << QStringList{"--metrics-phases=50"} << 2
        << "error: [rank 0] --metrics-phases: expected MS:FILE with MS >= 1000, got \"50\"";
  }
  void workerFlagsTakeTheirValueAndNameThemselves() {
    QFETCH(QStringList, flags);
    QFETCH(int, code);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    Profile p = singleProfile();
    p.model.kind = "mlp";  // trains by hand unless told otherwise
    p.model.hidden = {8};
    p.hyper.maxSteps = 5;
    QProcess w;
    w.start(QString::fromStdString(test::workerPath()),
            QStringList{"--profile", QString::fromStdString(test::writeProfile(dir, p)), "--rank", "0", "--world", "1",
                        "--port", "0"} +
                flags);
    QVERIFY(w.waitForFinished(60000));
    const QString err = QString::fromUtf8(w.readAllStandardError());
    QCOMPARE(w.exitStatus(), QProcess::NormalExit);
    QVERIFY2(w.exitCode() == code, qPrintable(QString("exit code %1:\n%2").arg(w.exitCode()).arg(err)));
    QVERIFY2(err.contains(expected), qPrintable(err));
  }

  void badInputIsCaughtBeforeTraining() {
    QFETCH(Profile, profile);
    QFETCH(QString, expected);
    QString got = QString::fromStdString(trainerError(profile));
    QVERIFY2(got.contains(expected), qPrintable("got: " + got));
  }

  // Note [BLAS kernels]: OpenBLAS's fallback for a CPU it does not know is replaced by the
  // best kernels the CPU's instruction sets allow; a CPU OpenBLAS knows keeps its choice.
  void openblasFallbackGivesWayToTheCpusKernels_data() {
    QTest::addColumn<QString>("core");
    QTest::addColumn<bool>("avx");
    QTest::addColumn<bool>("avx2");
    QTest::addColumn<bool>("avx512");
    QTest::addColumn<QString>("expected");
    QTest::newRow("Prescott on AVX-512") << "Prescott" << true << true << true << "SkylakeX";
    QTest::newRow("prescott, any case") << "PRESCOTT" << true << true << true << "SkylakeX";
    QTest::newRow("Prescott on AVX2") << "Prescott" << true << true << false << "Haswell";
    QTest::newRow("Prescott on AVX") << "Prescott" << true << false << false << "Sandybridge";
    QTest::newRow("Prescott on SSE3 only") << "Prescott" << false << false << false << "";
    QTest::newRow("a CPU OpenBLAS knows") << "Haswell" << true << true << true << "";
    QTest::newRow("Zen") << "Zen" << true << true << false << "";
    QTest::newRow("not OpenBLAS") << "" << true << true << true << "";
    QTest::newRow("a longer name") << "Prescott2" << true << true << true << "";
  }
  void openblasFallbackGivesWayToTheCpusKernels() {
    QFETCH(QString, core);
    QFETCH(bool, avx);
    QFETCH(bool, avx2);
    QFETCH(bool, avx512);
    QFETCH(QString, expected);
    engine::CpuFeatures cpu;
    cpu.avx = avx;
    cpu.avx2 = avx2;
    cpu.avx512 = avx512;
    QCOMPARE(QString::fromStdString(engine::betterOpenblasCore(core.toStdString(), cpu)), expected);
  }

  // A worker on this machine trains with kernels its CPU supports, not OpenBLAS's SSE3
  // fallback, and one the user told a kernel set keeps it.
  void workersTrainWithTheKernelsTheirCpuSupports() {
    const QByteArray userChoice = qgetenv("OPENBLAS_CORETYPE");
    qunsetenv("OPENBLAS_CORETYPE");  // ranks inherit this process's environment
    auto restore = qScopeGuard([&] {
      if (!userChoice.isNull()) qputenv("OPENBLAS_CORETYPE", userChoice);
    });
    QString said;  // what the last --blas wrote on stderr
    auto coreOf = [&said](const QString& coretype) {
      QProcess w;
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      if (!coretype.isEmpty()) env.insert("OPENBLAS_CORETYPE", coretype);
      w.setProcessEnvironment(env);
      w.start(QString::fromStdString(test::workerPath()), {"--blas"});
      if (!w.waitForFinished(60000) || w.exitCode() != 0) return QString("failed: ") + w.readAllStandardError();
      said = QString::fromUtf8(w.readAllStandardError());
      return QJsonDocument::fromJson(w.readAllStandardOutput()).object().value("openblas_core").toString();
    };
    const QString chosen = coreOf("");
    QVERIFY2(!chosen.startsWith("failed"), qPrintable(chosen));
    if (chosen.isEmpty()) QSKIP("the BLAS LibTorch calls here is not OpenBLAS");
    const bool fellBack = said.contains("OpenBLAS does not know this CPU");
    const engine::CpuFeatures cpu = engine::cpuFeatures();
    if (cpu.avx) QVERIFY2(chosen.compare("prescott", Qt::CaseInsensitive) != 0, qPrintable(chosen));

    // A rank does as --blas did: where OpenBLAS fell back, its log says so and names the
    // kernels it trains with; elsewhere it says nothing of it.
    QTemporaryDir dir;
    Profile p = singleProfile();
    p.hyper.maxSteps = 5;
    LaunchOptions lo(test::workerPath(), test::writeProfile(dir, p), 1);
    lo.setOutDir(dir.path().toStdString());
    LaunchObserver quiet;
    QCOMPARE(Launcher(lo).run(quiet).status, RunReport::Status::Finished);
    QFile log(dir.filePath("rank0.log"));
    QVERIFY(log.open(QIODevice::ReadOnly));
    const QString rankLog = QString::fromUtf8(log.readAll());
    QCOMPARE(rankLog.contains("[rank 0] OpenBLAS does not know this CPU"), fellBack);
    if (fellBack) QVERIFY2(rankLog.contains("OPENBLAS_CORETYPE=" + chosen), qPrintable(rankLog));

    if (cpu.avx2) QCOMPARE(coreOf("Haswell"), QString("Haswell"));
    QCOMPARE(coreOf("Prescott"), QString("Prescott"));  // told, even the fallback
    QVERIFY(!said.contains("fell back"));
  }

  // A device that does not exist: every rank fails at start, and the run is reported
  // failed with the reason, not hung in rendezvous, and not run on the CPU instead.
  void missingDeviceFailsTheRunWithTheReason_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("ranks");
    QTest::newRow("ddp, 2 ranks") << "ddp" << 2;
    QTest::newRow("single") << "single" << 1;
    QTest::newRow("dataparallel, 2 lanes") << "dataparallel" << 2;
  }
  void missingDeviceFailsTheRunWithTheReason() {
    if (torch::cuda::is_available()) QSKIP("this machine has a CUDA device");
    QFETCH(QString, kind);
    QFETCH(int, ranks);
    Profile p = defaultProfile();
    p.strategy.kind = kind.toStdString();
    p.strategy.ranks = ranks;
    p.strategy.device = "cuda";
    QTemporaryDir dir;
    LaunchOptions lo(test::workerPath(), test::writeProfile(dir, p), processCount(p));
    lo.setOutDir(dir.path().toStdString());
    LaunchObserver quiet;
    RunReport report = Launcher(lo).run(quiet);
    QCOMPARE(report.status, RunReport::Status::Failed);
    QVERIFY(report.wallS < 30);
    std::string all;
    for (const auto& l : report.lastLines) all += l + "\n";
    QVERIFY2(all.find("strategy.device: \"cuda\" but LibTorch sees no CUDA device") != std::string::npos, all.c_str());
  }
};

QTEST_APPLESS_MAIN(TestWorkload)
#include "test_workload.moc"
