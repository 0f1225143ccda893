// SPDX-License-Identifier: GPL-3.0-or-later
// Export to TensorBoard (Note [Event files], Note [TensorBoard export]): CRC-32C against the
// published vectors, and a stored run's event files read back by an independent reader
// (tests/core/read_tfevents.py: protobuf's decoder, python3-crc32c's CRC) that must find every
// stored value, as float32, at its rank, tag and step, and nothing else.
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/crc32c.h"
#include "common/profile.h"
#include "common/record.h"
#include "launch/event_file_writer.h"
#include "launch/run_store.h"
#include "test_support.h"

using namespace ptw::core;

namespace {

struct Result {
  int code = -1;
  QString out, err;
};

Result run(const QString& program, const QStringList& args) {
  QProcess p;
  p.start(program, args);
  if (!p.waitForFinished(120000)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError())};
}

Result runPtw(const QStringList& args) { return run(ptw::test::binDir() + "/ptw", args); }

// The independent reader: one line per scalar, "FOLDER TAG STEP FLOAT32_BITS WALL".
Result readEvents(const QString& dir) {
  return run("/usr/bin/python3", {ptw::test::sourcePath("tests/core/read_tfevents.py"), dir});
}

// A record whose every field is its own function of (rank, step, attempt), none of them a
// float32 exactly, one loss NaN and one -0.
Record stepRecord(int rank, std::int64_t step, int attempt = 0) {
  Record r;
  auto& s = r.step;
  s.rank = rank;
  s.step = step;
  s.epoch = step / 7;
  const double k = static_cast<double>(step) + 1000.0 * rank + 0.5 * attempt;
  s.loss = step == 13 ? std::nan("") : 1.0 / (k + 3.0);
  s.samplesPerS = 1e6 / 3 + k;
  s.stepMs = 0.03 + k * 1e-6;
  s.dataMs = 0.001 * k;
  s.computeMs = 0.002 * k;
  s.commMs = step == 5 ? -0.0 : 0.003 * k;
  s.optMs = 0.004 * k;
  s.lr = 0.01 / (1 + k * 1e-3);
  s.memBytes = 123'456'789'012 + step;
  return r;
}

Record validation(std::int64_t step, double loss, double accuracy) {
  Record v;
  v.kind = Record::Kind::Validation;
  v.step.step = step;
  v.valLoss = loss;
  v.valAccuracy = accuracy;
  return v;
}

// Every field the same to the bit (the NaN loss included).
bool sameBits(const StepRecord& a, const StepRecord& b) {
  bool same = a.rank == b.rank;
  StepRecord::forEachField([&](const char*, auto m) { same = same && !std::memcmp(&(a.*m), &(b.*m), sizeof(a.*m)); });
  return same;
}

std::uint32_t bitsOf(double v) {
  const float f = static_cast<float>(v);
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

struct Scalar {
  std::uint32_t bits = 0;
  double wall = 0;
};
using Key = std::tuple<QString, QString, std::int64_t>;  // folder, tag, step

// 2 ranks x 300 steps; attempt 1 restarted from step 200 and replays to 300 with other
// values (the export must take them); validation every 50 steps, 200 and 250 again in
// attempt 1, one without accuracy (a regression's).
std::int64_t storeARun(const std::string& runs) {
  RunStore store(runs);
  const auto id = store.beginRun(runs, defaultProfile());
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<Record> batch;
    for (std::int64_t s = attempt == 0 ? 1 : 200; s <= (attempt == 0 ? 260 : 300); ++s)
      for (int rank = 0; rank < 2; ++rank) batch.push_back(stepRecord(rank, s, attempt));
    for (std::int64_t s = attempt == 0 ? 50 : 200; s <= (attempt == 0 ? 250 : 300); s += 50)
      batch.push_back(validation(s, 0.5 / static_cast<double>(s) + attempt, s == 100 ? -1 : 1.0 / 3 + attempt));
    store.append(id, attempt, batch);
    store.flush();
  }
  store.endRun(id, "finished", "", std::nan(""), std::nan(""), 2);
  return id;
}

// Exports run `id` of `runs` to TensorBoard in `out` with `ptw export`, reads the files back
// with the independent reader, and checks that they hold every value the store holds, as
// float32, at its folder, tag and step, with its wall time, and nothing else; returns the
// scalars read (0 after a failure).
std::size_t exportAndCompare(const QString& runs, std::int64_t id, const QString& out) {
  const Result r = runPtw({"export", "--format", "tensorboard", QString::number(id), out, "--runs-dir", runs});
  [&] {
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("tensorboard --logdir " + out), qPrintable(r.out));
  }();
  if (QTest::currentTestFailed()) return 0;
  RunStore store(runs.toStdString());
  const double start = static_cast<double>(
      QDateTime::fromString(QString::fromStdString(store.run(id).startedAt), Qt::ISODate).toSecsSinceEpoch());

  // What the store holds, as the files should have it.
  std::map<Key, Scalar> expected;
  std::map<int, double> now;
  std::map<std::int64_t, double> rank0Wall;
  QStringList folders;
  for (const auto& s : store.steps(id)) {
    double& t = now.try_emplace(s.rank, start).first->second;
    t += s.stepMs / 1000.0;
    if (s.rank == 0) rank0Wall[s.step] = t;
    const QString folder = QString("rank%1").arg(s.rank);
    if (!folders.contains(folder)) folders << folder;
    // Note [Not reported]: what nobody reported is not exported; the step is the x axis and a
    // script's own counter (step_offset) the CSV's.
    StepRecord::forEachField([&](const char* name, auto m) {
      if (std::string(name) == "step" || std::string(name) == "step_offset") return;
      if constexpr (std::is_same_v<StepFieldType<decltype(m)>, std::int64_t>) {
        if (!isReported(s.*m)) return;
      } else if (m == &StepRecord::loss ? isNotReported(s.*m) : !isReported(s.*m)) {
        return;
      }
      expected[{folder, name, s.step}] = {bitsOf(static_cast<double>(s.*m)), t};
    });
  }
  for (const auto& v : store.validation(id)) {
    expected[{"rank0", "val_loss", v.step}] = {bitsOf(v.valLoss), -1};
    if (!std::isnan(v.valAccuracy)) expected[{"rank0", "val_accuracy", v.step}] = {bitsOf(v.valAccuracy), -1};
  }
  const std::size_t stored = expected.size();

  [&] {
    QCOMPARE(QDir(out).entryList(QDir::AllEntries | QDir::NoDotAndDotDot), folders);
    for (const QString& folder : folders) {
      const auto files = QDir(out + "/" + folder).entryList(QDir::Files | QDir::Hidden);
      QCOMPARE(files.size(), 1);  // no temporary file left
      QVERIFY2(files[0].startsWith(QString("events.out.tfevents.%1.").arg(static_cast<qint64>(start))) &&
                   files[0].endsWith(".ptw"),
               qPrintable(files[0]));
    }
    const Result read = readEvents(out);
    QVERIFY2(read.code == 0, qPrintable(read.err));
    for (const QString& line : read.out.split('\n', Qt::SkipEmptyParts)) {
      const QStringList c = line.split(' ');
      QCOMPARE(c.size(), 5);
      const Key key{c[0], c[1], c[2].toLongLong()};
      const auto found = expected.find(key);
      QVERIFY2(found != expected.end(), qPrintable("not stored, or written twice: " + line));
      bool ok = false;
      const std::uint32_t bits = c[3].toUInt(&ok, 16);
      QVERIFY(ok);
      float got, want;
      std::memcpy(&got, &bits, sizeof got);
      std::memcpy(&want, &found->second.bits, sizeof want);
      QVERIFY2(bits == found->second.bits || (std::isnan(got) && std::isnan(want)), qPrintable(line));
      const double wall = c[4].toDouble(&ok);
      QVERIFY(ok);
      if (found->second.wall >= 0) {
        QVERIFY2(wall == found->second.wall, qPrintable(line));
      } else {  // validation: at or before rank 0's time at its step, after the start
        QVERIFY2(wall >= start && wall <= rank0Wall.at(std::get<2>(key)), qPrintable(line));
      }
      expected.erase(found);
    }
    if (!expected.empty()) {
      const auto& [folder, tag, step] = expected.begin()->first;
      QFAIL(qPrintable(QString("%1 stored values not in the files, e.g. %2 %3 at step %4")
                           .arg(expected.size())
                           .arg(folder, tag)
                           .arg(step)));
    }
  }();
  return QTest::currentTestFailed() ? 0 : stored;
}

}  // namespace

class TestExport : public QObject {
  Q_OBJECT
 private slots:
  // RFC 3720 B.4 and TensorFlow's crc32c_test.
  void crc32cMatchesPublishedVectors_data() {
    QTest::addColumn<QByteArray>("data");
    QTest::addColumn<quint32>("crc");
    QByteArray up(32, 0), down(32, 0);
    for (int i = 0; i < 32; ++i) up[i] = char(i), down[i] = char(31 - i);
    QTest::newRow("empty") << QByteArray() << quint32(0);
    QTest::newRow("32 zeros") << QByteArray(32, '\0') << quint32(0x8a9136aa);
    QTest::newRow("32 0xff") << QByteArray(32, '\xff') << quint32(0x62a8ab43);
    QTest::newRow("0..31") << up << quint32(0x46dd794e);
    QTest::newRow("31..0") << down << quint32(0x113fdb5c);
    QTest::newRow("123456789") << QByteArray("123456789") << quint32(0xe3069283);
  }
  void crc32cMatchesPublishedVectors() {
    QFETCH(QByteArray, data);
    QFETCH(quint32, crc);
    const std::string_view bytes(data.constData(), static_cast<std::size_t>(data.size()));
    QCOMPARE(crc32c(bytes), crc);
    // Continued over a split, the same.
    const std::size_t half = bytes.size() / 2;
    QCOMPARE(crc32c(bytes.substr(half), crc32c(bytes.substr(0, half))), crc);
  }

  // The mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8, and TensorBoard's masked_crc.rs vector.
  void theMaskIsTensorFlows() {
    QCOMPARE(maskCrc32c(0), 0xa282ead8u);
    QCOMPARE(maskCrc32c(0x8a9136aa),
             static_cast<std::uint32_t>(((0x8a9136aau >> 15) | (0x8a9136aau << 17)) + 0xa282ead8u));
    QCOMPARE(maskCrc32c(crc32c(std::string_view("\x1a\x11"
                                                "CRC test, one two"))),
             0x5794d08au);
  }

  // u64 length | masked CRC of it | data | masked CRC of the data, little-endian.
  void aRecordIsFramedAsTfRecord() {
    std::string out;
    EventFileWriter::appendRecord("abc", out);
    QCOMPARE(out.size(), std::size_t(8 + 4 + 3 + 4));
    QCOMPARE(out.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
    auto u32 = [&](std::size_t at) {
      std::uint32_t v = 0;
      for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(out[at + static_cast<std::size_t>(i)]);
      return v;
    };
    QCOMPARE(u32(8), maskCrc32c(crc32c(out.substr(0, 8))));
    QCOMPARE(out.substr(12, 3), std::string("abc"));
    QCOMPARE(u32(15), maskCrc32c(crc32c("abc")));
  }

  // Every step field but the step, and validation loss and accuracy, at their steps, in a
  // folder per rank: the values the store holds, as float32, exactly; nothing else. Wall times
  // are the run's start plus the rank's summed step_ms (Note [Export wall time]).
  void theEventFilesHoldWhatTheStoreHolds() {
    QTemporaryDir runs;
    const auto id = storeARun(runs.path().toStdString());
    RunStore store(runs.path().toStdString());
    const auto steps = store.steps(id);
    QCOMPARE(steps.size(), std::size_t(2 * 300));
    QCOMPARE(steps[250].loss, stepRecord(0, 251, 1).step.loss);  // attempt 1's, where they overlap
    const auto val = store.validation(id);
    QCOMPARE(val.size(), std::size_t(6));  // 50 .. 300, 200 and 250 from attempt 1
    QCOMPARE(val[3].valLoss, 0.5 / 200 + 1);
    QVERIFY(std::isnan(val[1].valAccuracy));
    const QString out = runs.filePath("tb/run1");  // made, with its parent
    QCOMPARE(exportAndCompare(runs.path(), id, out), std::size_t(2 * 300 * 10 + 6 + 5));
  }

  // The same for a real run: 2 ranks of the default profile, 25 steps.
  void aRealRunExportsWhatItStored() {
    QTemporaryDir runs;
    const Result r = runPtw({"--headless", "--runs-dir", runs.path(), "--set", "hyper.max_steps=25"});
    QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
    const auto val = RunStore(runs.path().toStdString()).validation(1);
    std::size_t validation = 0;
    for (const auto& v : val) validation += std::isnan(v.valAccuracy) ? 1 : 2;
    QCOMPARE(exportAndCompare(runs.path(), 1, runs.filePath("tb")), std::size_t(2 * 25 * 10) + validation);
  }

  // The reader is a check: a file whose framing, CRCs or events are wrong fails it.
  void theReaderRejectsDamage_data() {
    QTest::addColumn<int>("offset");  // from the start of the second record; -1: cut the last 3 bytes
    QTest::addColumn<QString>("error");
    QTest::newRow("length") << 0 << "length CRC";
    QTest::newRow("length CRC") << 9 << "length CRC";
    QTest::newRow("data") << 20 << "data CRC";
    QTest::newRow("data CRC") << -2 << "data CRC";
    QTest::newRow("cut short") << -1 << "cut short";
  }
  void theReaderRejectsDamage() {
    QFETCH(int, offset);
    QFETCH(QString, error);
    QTemporaryDir dir;
    QVERIFY(QDir(dir.path()).mkdir("rank0"));
    const std::string path = dir.filePath("rank0/events.out.tfevents.1.host.ptw").toStdString();
    {
      EventFileWriter w(path, 1.5);
      w.scalar("loss", 1, 0.25f, 2.5);
      w.close();
    }
    QVERIFY(readEvents(dir.path()).code == 0);
    QFile f(QString::fromStdString(path));
    QVERIFY(f.open(QIODevice::ReadWrite));
    QByteArray bytes = f.readAll();
    const int second = 12 + (1 + 8) + (2 + 13) + 4;  // after the file-version record: header, wall time, version, CRC
    QVERIFY(bytes.size() > second + 20);
    if (offset == -1) {
      bytes.chop(3);
    } else {
      const int at = offset >= 0 ? second + offset : static_cast<int>(bytes.size()) + offset;
      bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
    }
    QVERIFY(f.resize(0) && f.seek(0) && f.write(bytes) == bytes.size());
    f.close();
    const Result r = readEvents(dir.path());
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(error) && r.err.contains("record 1"), qPrintable(r.err));
  }

  // The one-way doors: an unknown run, format or folder is named, exits 2 and writes nothing.
  void badExportsExitTwoAndWriteNothing_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("error");
    QTest::newRow("unknown run") << QStringList{"--format", "tensorboard", "9", "OUT"} << "no run with id 9";
    QTest::newRow("unknown format") << QStringList{"--format", "tensorflow", "1", "OUT"} << "tensorflow";
    QTest::newRow("folder is a file") << QStringList{"--format", "tensorboard", "1", "FILE"} << "is a file";
    QTest::newRow("under a file") << QStringList{"--format", "tensorboard", "1", "FILE/x"} << "is a file";
    QTest::newRow("no folder") << QStringList{"--format", "tensorboard", "1"} << "give the folder";
    QTest::newRow("--csv with tensorboard") << QStringList{"--format", "tensorboard", "1", "OUT", "--csv", "OUT.csv"}
                                            << "--csv OUT.csv: is for --format csv";
    QTest::newRow("csv twice") << QStringList{"1", "a.csv", "--csv", "b.csv"} << "given twice";
  }
  void badExportsExitTwoAndWriteNothing() {
    QFETCH(QStringList, args);
    QFETCH(QString, error);
    QTemporaryDir runs;
    storeARun(runs.path().toStdString());
    QFile file(runs.filePath("FILE"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.close();
    const auto before = QDir(runs.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden);
    for (auto& a : args) {
      if (a == "OUT" || a.startsWith("FILE") || a.endsWith(".csv")) a = runs.filePath(a);
    }
    const Result r = runPtw(QStringList{"export"} + args + QStringList{"--runs-dir", runs.path()});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(error.replace("OUT.csv", runs.filePath("OUT.csv"))), qPrintable(r.err));
    QCOMPARE(QDir(runs.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden), before);
  }

  // CSV stays the default, its file given as before (--csv) or after the run.
  void csvIsTheDefault_data() {
    QTest::addColumn<QStringList>("args");
    QTest::newRow("--csv") << QStringList{"1", "--csv", "OUT"};
    QTest::newRow("positional") << QStringList{"1", "OUT"};
    QTest::newRow("--format csv") << QStringList{"--format", "csv", "1", "OUT"};
  }
  void csvIsTheDefault() {
    QFETCH(QStringList, args);
    QTemporaryDir runs;
    storeARun(runs.path().toStdString());
    args.replaceInStrings("OUT", runs.filePath("run.csv"));
    const Result r = runPtw(QStringList{"export"} + args + QStringList{"--runs-dir", runs.path()});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QFile csv(runs.filePath("run.csv"));
    QVERIFY(csv.open(QIODevice::ReadOnly));
    const auto lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 1 + 2 * 300);
    QVERIFY(lines[0].startsWith("rank,step,epoch,loss,"));
  }

  // forEachStep reads a window of one rank's steps at a time and gives what steps() gives:
  // across windows, where a restart replays steps over a window's edge, and for a rank that
  // starts late.
  void forEachStepGivesWhatStepsGives() {
    QTemporaryDir dir;
    const std::string runs = dir.path().toStdString();
    RunStore store(runs);
    const auto id = store.beginRun(runs, defaultProfile());
    const std::int64_t last = RunStore::kStepWindow + 5000, edge = RunStore::kStepWindow;
    std::vector<Record> batch;
    for (std::int64_t s = 1; s <= last; ++s) {
      batch.push_back(stepRecord(0, s));
      if (s >= 30000) batch.push_back(stepRecord(1, s));
    }
    store.append(id, 0, batch);
    batch.clear();
    for (std::int64_t s = edge - 10; s <= edge + 10; ++s) batch.push_back(stepRecord(0, s, 1));
    store.append(id, 1, batch);
    store.flush();
    auto check = [&] {
      const auto all = store.steps(id);
      QCOMPARE(all.size(), static_cast<std::size_t>(last + (last - 30000 + 1)));
      std::size_t i = 0;
      bool same = true;
      store.forEachStep(id, [&](const StepRecord& r) {
        same = same && i < all.size() && sameBits(r, all[i]);
        ++i;
      });
      QVERIFY(same);
      QCOMPARE(i, all.size());
    };
    check();  // from the step file
    store.endRun(id, "finished", "", std::nan(""), std::nan(""), 2);
    check();  // from chunks
  }
};

QTEST_GUILESS_MAIN(TestExport)
#include "test_export.moc"
