// SPDX-License-Identifier: GPL-3.0-or-later
// Data kinds read from files (cifar10, image-folder, npy): each loads to the tensors numpy, PIL
// and torchvision's ImageFolder read from the same files (tests/data/make_image_data.py writes
// both into a temporary folder), broken inputs fail with errors naming the file, and image
// normalisation and augmentation do what docs/data.md says, reproducibly.
#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "common/error.h"
#include "common/npy.h"
#include "common/profile.h"
#include "engine/batch_loader.h"
#include "engine/model.h"
#include "engine/sample_grid.h"
#include "engine/strategy.h"
#include "engine/trainer.h"
#include "engine/workload.h"

using namespace ptw;
using namespace ptw::engine;

class TestData : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  QJsonObject m_expected;

  std::string at(const QString& rel) const { return (m_dir.path() + "/" + rel).toStdString(); }

  core::DataSpec spec(const QString& kind) const {
    core::DataSpec d;
    d.kind = kind.toStdString();
    d.samples = 0;
    d.task = "classification";
    if (kind == "cifar10") d.path = at("cifar");
    if (kind == "image-folder") d.path = at("folder");
    if (kind == "npy") {
      d.path = at("npy/x.npy");
      d.labelsPath = at("npy/y.npy");
    }
    if (kind == "npy-images") {
      d.kind = "npy";
      d.path = at("npy/img.npy");
      d.labelsPath = at("npy/imgy.npy");
    }
    return d;
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    QProcess py;
    py.start("/usr/bin/python3", {QString(qgetenv("PTW_SOURCE_DIR")) + "/tests/data/make_image_data.py", m_dir.path()});
    QVERIFY(py.waitForFinished(120000));
    QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
    QFile f(m_dir.path() + "/expected.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    m_expected = QJsonDocument::fromJson(f.readAll()).object();
    QVERIFY(!m_expected.isEmpty());
  }

  // Every label, the sample shape, selected values exactly and the sum of all inputs.
  void loadsWhatPythonReads_data() {
    QTest::addColumn<QString>("kind");
    QTest::newRow("cifar10") << "cifar10";
    QTest::newRow("image-folder (torchvision's class order)") << "image-folder";
    QTest::newRow("npy features, float64") << "npy";
    QTest::newRow("npy images, float32") << "npy-images";
  }
  void loadsWhatPythonReads() {
    QFETCH(QString, kind);
    const auto want = m_expected[kind].toObject();
    Dataset d = makeDataset(spec(kind), core::ModelSpec{});
    QCOMPARE(d.size(), static_cast<std::int64_t>(want["n"].toInt()));
    QVERIFY(d.classification);
    std::vector<std::int64_t> shape;
    for (const auto v : want["shape"].toArray()) shape.push_back(v.toInt());
    QCOMPARE(d.sampleShape, shape);
    const auto labels = want["labels"].toArray();
    QCOMPARE(d.y.size(0), static_cast<std::int64_t>(labels.size()));
    for (int i = 0; i < labels.size(); ++i)
      QCOMPARE(d.y[i].item<std::int64_t>(), static_cast<std::int64_t>(labels[i].toInt()));
    for (const auto pick : want["picks"].toArray()) {
      const auto p = pick.toArray();
      QCOMPARE(d.x[p[0].toInt()][p[1].toInt()].item<float>(), static_cast<float>(p[2].toDouble()));
    }
    const double sum = d.x.to(torch::kFloat64).sum().item<double>();
    QVERIFY2(std::abs(sum - want["sum"].toDouble()) < 1e-6 * std::max(1.0, std::abs(sum)),
             qPrintable(QString("sum %1, Python %2").arg(sum).arg(want["sum"].toDouble())));
  }

  // The header parser on its own (tests/fuzz/fuzz_npy.cpp runs it on any bytes).
  void npyHeader_data() {
    QTest::addColumn<QByteArray>("file");
    QTest::addColumn<QString>("error");  // empty: parses
    auto v1 = [](const QByteArray& dict, int dataBytes) {
      QByteArray h = dict;
      while ((10 + h.size() + 1) % 64) h += ' ';
      h += '\n';
      QByteArray f("\x93NUMPY\x01\x00", 8);
      f += char(h.size() & 0xff);
      f += char(h.size() >> 8);
      return f + h + QByteArray(dataBytes, '\0');
    };
    const QByteArray ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    QTest::newRow("float32 2x3") << v1(ok, 24) << "";
    QTest::newRow("int64 scalar") << v1("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 8) << "";
    QTest::newRow("empty") << v1("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4), }", 0) << "";
    QTest::newRow("bad magic") << QByteArray("PK\x03\x04 not numpy") << "not a .npy file";
    QTest::newRow("version 3.0") << QByteArray("\x93NUMPY\x03\x00\x00\x00", 10) << "version 3.0";
    QTest::newRow("truncated data") << v1(ok, 23) << "truncated";
    QTest::newRow("trailing data") << v1(ok, 25) << "(trailing bytes)";
    QTest::newRow("big-endian") << v1("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24)
                                << "unsupported dtype '>f4'";
    QTest::newRow("no shape") << v1("{'descr': '<f4', 'fortran_order': False}", 4) << "lacks one of";
    QTest::newRow("unknown key") << v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4)
                                 << "unexpected or repeated key 'x'";
    QTest::newRow("huge dimension") << v1("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999,), }",
                                          4)
                                    << "dimension too large";
  }
  void npyHeader() {
    QFETCH(QByteArray, file);
    QFETCH(QString, error);
    try {
      const auto h =
          core::parseNpyHeader(std::string_view(file.constData(), static_cast<std::size_t>(file.size())), "t.npy");
      QVERIFY2(error.isEmpty(), qPrintable("parsed; expected: " + error));
      QCOMPARE(h.dataOffset % 64, std::size_t(0));
    } catch (const Error& e) {
      const QString what = QString::fromUtf8(e.what());
      QVERIFY2(!error.isEmpty() && what.contains(error) && what.contains("t.npy"), qPrintable(what));
    }
  }

  void samplesAndValidation() {
    auto s = spec("cifar10");
    s.valFraction = 80.0 / 300.0;  // the test batch, read last
    Dataset d = makeDataset(s, core::ModelSpec{});
    QCOMPARE(d.size(), std::int64_t(220));
    QCOMPARE(d.valSize(), std::int64_t(80));
    s.valFraction = 0;
    s.samples = 130;  // across the first two batches
    QCOMPARE(makeDataset(s, core::ModelSpec{}).size(), std::int64_t(130));
  }

  // Note [Every class in both splits]: an image folder's held-out part and a cap on its samples
  // take the last (first) images of every class, in proportion, each part in ImageFolder's order.
  void imageFolderSplitsEveryClass() {
    auto s = spec("image-folder");
    const Dataset all = makeDataset(s, core::ModelSpec{});  // Apple, mango, zebra: 70 each, in order
    QCOMPARE(all.size(), std::int64_t(210));
    auto rows = [&](std::int64_t first, std::int64_t count) {  // of every class: [first, first + count)
      std::vector<std::int64_t> idx;
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t i = first; i < first + count; ++i) idx.push_back(c * 70 + i);
      return torch::tensor(idx, torch::kInt64);
    };
    QCOMPARE(all.y.index_select(0, rows(0, 70)).equal(all.y), true);

    s.valFraction = 0.2;
    const Dataset d = makeDataset(s, core::ModelSpec{});
    QCOMPARE(d.size(), std::int64_t(168));
    QCOMPARE(d.valSize(), std::int64_t(42));
    QVERIFY(d.x.equal(all.x.index_select(0, rows(0, 56))));
    QVERIFY(d.y.equal(all.y.index_select(0, rows(0, 56))));
    QVERIFY(d.valX.equal(all.x.index_select(0, rows(56, 14))));
    QVERIFY(d.valY.equal(all.y.index_select(0, rows(56, 14))));

    s.valFraction = 0;
    s.samples = 30;
    const Dataset capped = makeDataset(s, core::ModelSpec{});
    QVERIFY(capped.x.equal(all.x.index_select(0, rows(0, 10))));
    QVERIFY(capped.y.equal(all.y.index_select(0, rows(0, 10))));

    s.samples = 31;  // one more than a whole share each: the first class's next image
    s.valFraction = 0.5;
    const Dataset odd = makeDataset(s, core::ModelSpec{});
    QCOMPARE(odd.size() + odd.valSize(), std::int64_t(31));
    QCOMPARE(odd.valSize(), std::int64_t(15));
    for (std::int64_t c = 0; c < 3; ++c) {
      QVERIFY2(odd.y.eq(c).sum().item<std::int64_t>() >= 5, "every class trains");
      QVERIFY2(odd.valY.eq(c).sum().item<std::int64_t>() >= 5, "every class is validated");
    }
  }

  void badInputNamesTheFile_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("folder");
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("says");
    QTest::newRow("truncated PNG") << "image-folder"
                                   << "truncated-png"
                                   << "a/1.png"
                                   << "cannot decode the PNG";
    QTest::newRow("truncated JPEG") << "image-folder"
                                    << "truncated-jpeg"
                                    << "a/1.jpg"
                                    << "cannot decode the JPEG";
    QTest::newRow("wrong size") << "image-folder"
                                << "wrong-size"
                                << "b/0.png"
                                << "is 3×9×8 (channels×height×width); expected 3×8×8";
    QTest::newRow("wrong channels") << "image-folder"
                                    << "wrong-channels"
                                    << "b/0.png"
                                    << "is 1×8×8 (channels×height×width); expected 3×8×8";
    QTest::newRow("class folder without images") << "image-folder"
                                                 << "empty-class"
                                                 << "b"
                                                 << "has no images";
    QTest::newRow("CIFAR file of the wrong length") << "cifar10"
                                                    << "cifar-length"
                                                    << "data_batch_1.bin"
                                                    << "expected a multiple of 3073";
    QTest::newRow("npy of an unsupported dtype") << "npy"
                                                 << "npy-dtype"
                                                 << "x.npy"
                                                 << "unsupported dtype '|u1'";
    QTest::newRow("npy in Fortran order") << "npy"
                                          << "npy-fortran"
                                          << "x.npy"
                                          << "Fortran order";
  }
  void badInputNamesTheFile() {
    QFETCH(QString, kind);
    QFETCH(QString, folder);
    QFETCH(QString, file);
    QFETCH(QString, says);
    core::DataSpec s;
    s.kind = kind.toStdString();
    s.samples = 0;
    s.task = "classification";
    s.path = at("bad/" + folder);
    if (kind == "npy") {
      s.path = at("bad/" + folder + "/x.npy");
      s.labelsPath = at("bad/" + folder + "/y.npy");
    }
    const std::string named = at("bad/" + folder + "/" + file);
    try {
      makeDataset(s, core::ModelSpec{});
      QFAIL("no error");
    } catch (const Error& e) {
      const QString what = QString::fromUtf8(e.what());
      QVERIFY2(what.contains(QString::fromStdString(named)), qPrintable(what));
      QVERIFY2(what.contains(says), qPrintable(what));
    }
  }

  void normalisesPerChannel() {
    auto s = spec("image-folder");
    const Dataset raw = makeDataset(s, core::ModelSpec{});
    s.mean = {0.5, 0.25, 0.125};
    s.std = {0.2, 0.4, 0.8};
    const Dataset norm = makeDataset(s, core::ModelSpec{});
    auto r = raw.x.view({raw.size(), 3, -1}), n = norm.x.view({norm.size(), 3, -1});
    for (int c = 0; c < 3; ++c)
      QVERIFY(torch::allclose(
          n.select(1, c), (r.select(1, c) - s.mean[static_cast<std::size_t>(c)]) / s.std[static_cast<std::size_t>(c)]));
    s.mean = {0.5};
    s.std = {0.2};
    QVERIFY_THROWS_EXCEPTION(Error, makeDataset(s, core::ModelSpec{}));
  }

  // Same seed, same batch; another epoch or rank, another; each sample a crop of the padded
  // image, maybe flipped.
  void augmentationReproduces() {
    auto s = spec("cifar10");
    s.cropPadding = 4;
    s.flip = true;
    QVERIFY(augments(s));
    const Dataset d = makeDataset(s, core::ModelSpec{});
    const auto batch = d.x.narrow(0, 0, 16);
    const auto a = augmentImages(batch, d.sampleShape, s, augmentSeed(7, 1, 2, 3));
    QVERIFY(torch::equal(a, augmentImages(batch, d.sampleShape, s, augmentSeed(7, 1, 2, 3))));
    QVERIFY(!torch::equal(a, augmentImages(batch, d.sampleShape, s, augmentSeed(7, 1, 3, 3))));
    QVERIFY(!torch::equal(a, augmentImages(batch, d.sampleShape, s, augmentSeed(7, 0, 2, 3))));
    QVERIFY(!torch::equal(a, augmentImages(batch, d.sampleShape, s, augmentSeed(8, 1, 2, 3))));
    QVERIFY(!torch::equal(a, batch));
    const auto images = batch.view({16, 3, 32, 32});
    const auto padded = torch::constant_pad_nd(images, {4, 4, 4, 4}, 0);
    int flipped = 0;
    for (std::int64_t i = 0; i < 16; ++i) {
      const auto got = a[i].view({3, 32, 32});
      bool found = false;
      for (std::int64_t dy = 0; dy <= 8 && !found; ++dy)
        for (std::int64_t dx = 0; dx <= 8 && !found; ++dx) {
          const auto crop = padded[i].narrow(1, dy, 32).narrow(2, dx, 32);
          if (torch::equal(got, crop)) found = true;
          if (!found && torch::equal(got, crop.flip({2}))) found = true, ++flipped;
        }
      QVERIFY2(found, qPrintable(QString("sample %1 is no crop of the padded image").arg(i)));
    }
    QVERIFY(flipped > 0 && flipped < 16);
  }

  // Check workload's sample images (sample_grid.h): a 4×4 grid of images spread over the
  // training set, the normalisation undone, so unaugmented each cell is the image as loaded;
  // augmented, values stay in [0, 1], the same seed gives the same grid and the padding shows
  // as the mean colour. The PNG reads back as the grid, to a byte.
  void sampleGridShowsTheImagesAsLoaded() {
    auto s = spec("cifar10");
    const Dataset raw = makeDataset(s, core::ModelSpec{});
    s.mean = {0.4, 0.5, 0.6};
    s.std = {0.2, 0.25, 0.3};
    const Dataset d = makeDataset(s, core::ModelSpec{});
    const auto grid = sampleGrid(d, s, SampleGridOptions(3));
    QCOMPARE(grid.sizes().vec(), (std::vector<std::int64_t>{3, 4 * 33 - 1, 4 * 33 - 1}));
    const std::int64_t n = d.size();
    for (std::int64_t k = 0; k < 16; ++k) {
      const auto cell = grid.narrow(1, (k / 4) * 33, 32).narrow(2, (k % 4) * 33, 32);
      const auto want = raw.x[k * n / 16].view({3, 32, 32});
      QVERIFY2(torch::allclose(cell, want, 0, 1e-5), qPrintable(QString("cell %1").arg(k)));
    }
    QVERIFY(torch::equal(grid.narrow(1, 32, 1), torch::ones({3, 1, grid.size(2)})));  // the gap

    s.cropPadding = 4;
    s.flip = true;
    const auto a = sampleGrid(d, s, SampleGridOptions(3));
    QCOMPARE(a.sizes().vec(), grid.sizes().vec());
    QVERIFY(a.min().item<float>() >= 0 && a.max().item<float>() <= 1);
    QVERIFY(torch::equal(a, sampleGrid(d, s, SampleGridOptions(3))));
    QVERIFY(!torch::equal(a, sampleGrid(d, s, SampleGridOptions(4))));
    QVERIFY(!torch::equal(a, grid));
    // Pixels of the mean colour: zeros after normalisation, as the crop pads.
    const auto mean = torch::tensor(std::vector<float>{0.4f, 0.5f, 0.6f}).view({3, 1});
    const auto padding = ((a.view({3, -1}) - mean).abs() < 1e-6).all(0).sum().item<std::int64_t>();
    QVERIFY2(padding >= 32, qPrintable(QString("%1 padding pixels").arg(padding)));

    // Fewer samples than asked for: as many cells; the last row part-filled.
    const auto few = sampleGrid(d, s, SampleGridOptions(3).count(6).columns(4));
    QCOMPARE(few.sizes().vec(), (std::vector<std::int64_t>{3, 2 * 33 - 1, 4 * 33 - 1}));

    // The PNG, read back by the image-folder loader, is the grid to within rounding.
    QDir(m_dir.path()).mkpath("grid/a");
    writePng(a, at("grid/a/0.png"));
    auto folder = spec("image-folder");
    folder.path = at("grid");
    const Dataset back = makeDataset(folder, core::ModelSpec{});
    QCOMPARE(back.sampleShape, (std::vector<std::int64_t>{3, a.size(1), a.size(2)}));
    QVERIFY((back.x[0] - a.reshape({-1})).abs().max().item<float>() <= 0.5f / 255 + 1e-6f);

    // Data that is not images has none to show; a mean per channel is needed to undo it; an
    // unwritable file is named.
    auto oneMean = s;
    oneMean.mean = {0.5};
    oneMean.std = {0.2};
    QVERIFY_THROWS_EXCEPTION(Error, sampleGrid(d, oneMean, SampleGridOptions(0)));
    QVERIFY_THROWS_EXCEPTION(
        Error, sampleGrid(makeDataset(spec("npy"), core::ModelSpec{}), spec("npy"), SampleGridOptions(0)));
    try {
      writePng(a, "/nonexistent/dir/grid.png");
      QFAIL("no error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("/nonexistent/dir/grid.png"), e.what());
    }
  }

  // Training augments: the same profile ends with the same parameters, and not with those of
  // the same run unaugmented.
  void trainingAugmentsReproducibly() {
    core::Profile p;
    p.model.inFeatures = 3072;
    p.model.outFeatures = 10;
    p.data = spec("cifar10");
    p.data.cropPadding = 4;
    p.data.flip = true;
    p.strategy.kind = "single";
    p.strategy.ranks = 1;
    p.hyper.maxSteps = 10;
    auto train = [](const core::Profile& profile) {
      engine::SyncContext ctx{profile, 0, 1, 0};
      engine::Trainer t(engine::TrainerOptions(profile, 0, 1), engine::makeStrategy(ctx));
      std::atomic<bool> stop{false};
      t.run(stop);
      return t.parameters();
    };
    const auto a = train(p), b = train(p);
    auto plain = p;
    plain.data.cropPadding = 0;
    plain.data.flip = false;
    const auto c = train(plain);
    QCOMPARE(a.size(), b.size());
    bool differs = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      QVERIFY(torch::equal(a[i], b[i]));
      differs = differs || !torch::equal(a[i], c[i]);
    }
    QVERIFY(differs);
  }

  // run.loader_threads: batches prepared ahead on loader threads train exactly what the inline
  // path trains (Note [Batches ahead]): augmented images, more than one epoch, accumulation, a
  // DataParallel's lanes, and a run resumed mid-epoch from a checkpoint written by one.
  void loaderTrainsWhatInlineTrains_data() {
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<int>("threads");
    QTest::addColumn<int>("accumulate");
    QTest::addColumn<int>("stopAt");  // > 0: stop after this step, then resume from the checkpoint
    QTest::newRow("1 thread") << "single" << 1 << 1 << 0;
    QTest::newRow("2 threads") << "single" << 2 << 1 << 0;
    QTest::newRow("2 threads, accumulate 3") << "single" << 2 << 3 << 0;
    QTest::newRow("2 threads, resumed mid-epoch") << "single" << 2 << 1 << 9;
    QTest::newRow("1 thread, resumed mid-epoch") << "single" << 1 << 1 << 25;
    QTest::newRow("2 threads, resumed at an epoch's end") << "single" << 2 << 1 << 19;
    QTest::newRow("dataparallel, 2 threads") << "dataparallel" << 2 << 1 << 0;
  }
  void loaderTrainsWhatInlineTrains() {
    QFETCH(QString, strategy);
    QFETCH(int, threads);
    QFETCH(int, accumulate);
    QFETCH(int, stopAt);
    core::Profile p;
    p.model.inFeatures = 3072;
    p.model.outFeatures = 10;
    p.data = spec("cifar10");
    p.data.cropPadding = 4;
    p.data.flip = true;
    p.strategy.kind = strategy.toStdString();
    p.strategy.ranks = strategy == "dataparallel" ? 2 : 1;
    p.hyper.batchSize = 16;  // 19 batches an epoch of 300 samples
    p.hyper.accumulate = accumulate;
    p.hyper.maxSteps = 0;
    p.hyper.epochs = 3;
    p.hyper.momentum = 0.9;
    QVERIFY(validate(p).empty());
    QTemporaryDir out;
    auto train = [&](const core::Profile& profile, std::int64_t& steps) {
      engine::SyncContext ctx{profile, 0, 1, 0};
      engine::Trainer t(engine::TrainerOptions(profile, 0, 1).setOutDir(out.path().toStdString()),
                        engine::makeStrategy(ctx));
      std::atomic<bool> stop{false};
      steps = t.run(stop);
      return t.parameters();
    };
    std::int64_t total = 0, steps = 0;
    const auto inline_ = train(p, total);
    QCOMPARE(total, 3 * ((300 / 16 / p.strategy.ranks + accumulate) / accumulate));
    auto loaded = p;
    loaded.run.loaderThreads = threads;
    if (stopAt > 0) {
      auto first = loaded;
      first.hyper.maxSteps = stopAt;
      train(first, steps);
      QCOMPARE(steps, std::int64_t(stopAt));
      loaded.run.resumeFrom = out.filePath("checkpoint.pt").toStdString();
    }
    const auto ahead = train(loaded, steps);
    QCOMPARE(steps, total);
    QCOMPARE(ahead.size(), inline_.size());
    for (std::size_t i = 0; i < ahead.size(); ++i)
      QVERIFY2(torch::equal(ahead[i], inline_[i]), qPrintable(QString("parameter %1 differs").arg(i)));
  }

  // A batch that cannot be prepared on a loader thread fails the run with what the inline path
  // says, naming the batch; the loader's threads stop with it (the test would hang otherwise).
  void loaderFailureIsReported_data() {
    QTest::addColumn<int>("threads");
    QTest::newRow("inline") << 0;
    QTest::newRow("1 thread") << 1;
    QTest::newRow("3 threads") << 3;
  }
  void loaderFailureIsReported() {
    QFETCH(int, threads);
    core::Profile p;
    p.model.inFeatures = 3072;
    p.model.outFeatures = 10;
    p.data = spec("cifar10");
    p.data.flip = true;
    p.strategy.kind = "single";
    p.hyper.batchSize = 4;
    p.hyper.maxSteps = 0;
    p.hyper.epochs = 1;
    p.run.loaderThreads = threads;
    BatchPlan plan = [](std::int64_t) {
      std::vector<std::vector<std::int64_t>> batches(8, std::vector<std::int64_t>{0, 1, 2, 3});
      batches[5][2] = 99999;
      return batches;
    };
    engine::SyncContext ctx{p, 0, 1, 0};
    engine::Trainer t(engine::TrainerOptions(p, 0, 1).setPlan(plan), engine::makeStrategy(ctx));
    std::atomic<bool> stop{false};
    QString error;
    try {
      t.run(stop);
    } catch (const Error& e) {
      error = e.what();
    }
    QCOMPARE(t.step(), std::int64_t(5));
    const QString says = "batch index 99999 out of range 0..299";
    QCOMPARE(error, threads == 0 ? says : "data loader: batch 5 of epoch 0: " + says);
  }

  // The loader hands batches over in order whatever order threads finish them in, holds at most
  // `depth` ahead of the trainer, raises a failure when its batch is taken, and stops at once
  // with batches queued.
  void loaderKeepsOrderAndBound() {
    std::atomic<int> prepared{0};
    std::atomic<int> taken{0};
    std::atomic<int> mostAhead{0};
    auto prepare = [&](std::int64_t, std::int64_t index, const std::vector<std::int64_t>& rows) {
      PTW_CHECK(rows.front() != 13, "row 13 is unreadable");
      // Later batches are quicker, so threads finish out of order.
      std::this_thread::sleep_for(std::chrono::milliseconds(index % 3 == 0 ? 6 : 1));
      const int ahead = ++prepared - taken.load();
      for (int seen = mostAhead.load(); ahead > seen && !mostAhead.compare_exchange_weak(seen, ahead);) {
      }
      LoadedBatch b;
      b.x = torch::full({1}, static_cast<double>(rows.front()));
      return b;
    };
    auto batches = [](std::int64_t first, std::int64_t n) {
      auto b = std::make_shared<BatchLoader::Batches>();
      for (std::int64_t i = 0; i < n; ++i) b->push_back({first + i});
      return std::shared_ptr<const BatchLoader::Batches>(b);
    };
    {
      BatchLoader loader(BatchLoaderOptions(3).setDepth(4), prepare);
      loader.queue(0, batches(100, 10), 2);
      loader.queue(1, batches(0, 14));
      QVERIFY(loader.isNext(0, 2));
      for (std::int64_t i = 2; i < 10; ++i) {
        auto b = loader.take();
        ++taken;
        QCOMPARE(b.epoch, std::int64_t(0));
        QCOMPARE(b.index, i);
        QCOMPARE(b.x.item<double>(), 100.0 + static_cast<double>(i));
      }
      QVERIFY(loader.isNext(1, 0));
      for (std::int64_t i = 0; i < 13; ++i) {
        auto b = loader.take();
        ++taken;
        QCOMPARE(b.epoch, std::int64_t(1));
        QCOMPARE(b.index, i);
      }
      QVERIFY(mostAhead.load() <= 4 + 1);  // `depth` ahead, counted before its taker's increment
      QVERIFY_EXCEPTION_THROWN(
          try { loader.take(); } catch (const Error& e) {
            QCOMPARE(QString(e.what()), QString("data loader: batch 13 of epoch 1: row 13 is unreadable"));
            throw;
          },
          Error);
      loader.clear();
      QVERIFY_EXCEPTION_THROWN(loader.take(), Error);  // nothing queued
      loader.queue(5, batches(0, 1000));
    }  // stops with 1000 batches queued, a few of them prepared
    QVERIFY(prepared.load() < 1000);
  }

  // A torchscript model gets [N, C, H, W]; a built-in one the flat rows.
  void modelsGetTheirInputShape() {
    const QString pt = m_dir.path() + "/conv.pt";  // made by make_image_data.py
    const Dataset d = makeDataset(spec("cifar10"), core::ModelSpec{});
    core::ModelSpec script;
    script.kind = "torchscript";
    script.path = pt.toStdString();
    auto m = makeModel(script, 0);
    m->setInputShape(d.sampleShape);
    QCOMPARE(m->forward(d.x.narrow(0, 0, 2)).sizes(), (c10::IntArrayRef{2, 10}));
    auto replica = m->replicate(torch::kCPU);
    QCOMPARE(replica->forward(d.x.narrow(0, 0, 3)).sizes(), (c10::IntArrayRef{3, 10}));
    core::ModelSpec linear;
    linear.inFeatures = 3072;
    linear.outFeatures = 10;
    auto l = makeModel(linear, 0);
    l->setInputShape(d.sampleShape);
    QCOMPARE(l->forward(d.x.narrow(0, 0, 2)).sizes(), (c10::IntArrayRef{2, 10}));
  }
};

QTEST_APPLESS_MAIN(TestData)
#include "test_data.moc"
