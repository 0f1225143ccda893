// The run store: step records are packed in blocks and appended to the run's step file
// while it goes (Note [Step blocks]), read back exactly from the file, rows or both, and
// unpacked into plain `steps` rows when the run ends or is found interrupted.
#include <QTemporaryDir>
#include <QTest>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/profile.h"
#include "launch/run_store.h"
#include "sql_support.h"

using namespace ptw::core;
using ptw::test::Sql;

namespace {

// A record whose every field is its own function of (rank, step, attempt).
Record stepRecord(int rank, std::int64_t step, int attempt = 0) {
  Record r;
  auto& s = r.step;
  s.rank = rank;
  s.step = step;
  s.epoch = step / 7;
  const double k = static_cast<double>(step) + 1000.0 * rank + 0.5 * attempt;
  s.loss = 1.0 / (k + 1.0);
  s.samplesPerS = 1e6 + k;
  s.stepMs = 0.03 + k * 1e-6;
  s.dataMs = 0.001 * k;
  s.computeMs = 0.002 * k;
  s.commMs = 0.003 * k;
  s.optMs = 0.004 * k;
  s.lr = 0.01 + k * 1e-9;
  s.memBytes = 1'000'000 + step;
  return r;
}

std::uint64_t le(const unsigned char* p, int bytes) {
  std::uint64_t u = 0;
  for (int i = bytes - 1; i >= 0; --i) u = (u << 8) | p[i];
  return u;
}

// A run's step file (Note [Step blocks]) and the blocks in it, as the README lays them out.
std::string stepFile(const QTemporaryDir& dir, std::int64_t id) {
  return dir.path().toStdString() + "/runs.blocks/" + std::to_string(id);
}
std::vector<unsigned char> fileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
struct BlockHeader {
  std::uint32_t magic, count;
  int rank, attempt;
  std::int64_t firstStep, lastStep;
  const unsigned char* records;
};
std::vector<BlockHeader> blocksOf(const std::vector<unsigned char>& f) {
  std::vector<BlockHeader> out;
  for (std::size_t at = 0; at + 40 <= f.size();) {
    const unsigned char* h = f.data() + at;
    BlockHeader b{static_cast<std::uint32_t>(le(h, 4)),
                  static_cast<std::uint32_t>(le(h + 4, 4)),
                  static_cast<int>(le(h + 8, 4)),
                  static_cast<int>(le(h + 12, 4)),
                  static_cast<std::int64_t>(le(h + 16, 8)),
                  static_cast<std::int64_t>(le(h + 24, 8)),
                  h + 40};
    out.push_back(b);
    at += 40 + 88 * std::size_t(b.count);
  }
  return out;
}


}  // namespace

class TestRunStore : public QObject {
  Q_OBJECT
 private slots:
  // 2 ranks x 20,000 steps, committed in two batches of 10,000 a rank: more than a block
  // holds (8,192). Every reader sees every record, exactly, before and after unpacking.
  void everyRecordIsReadBackBeforeAndAfterUnpacking() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    const std::int64_t steps = 20000;
    for (std::int64_t at = 1; at <= steps; at += 10000) {
      std::vector<Record> batch;
      for (std::int64_t s = at; s < at + 10000; ++s)
        for (int rank = 0; rank < 2; ++rank) batch.push_back(stepRecord(rank, s));
      Record v;
      v.kind = Record::Kind::Validation;
      v.step.step = at;
      v.valLoss = 0.25;
      batch.push_back(v);
      store.append(id, 0, batch);
      store.flush();
    }
    Sql sql(store.path());
    auto check = [&] {
      QCOMPARE(store.stepCount(id), 2 * steps);
      const auto all = store.steps(id);
      QCOMPARE(all.size(), static_cast<std::size_t>(2 * steps));
      for (std::size_t i = 0; i < all.size(); ++i) {
        const auto expect = stepRecord(static_cast<int>(i / steps), static_cast<std::int64_t>(i % steps) + 1).step;
        QVERIFY2(all[i] == expect, qPrintable(QString("record %1 differs").arg(i)));
      }
      // Steps 8190..8195 of rank 1: across the end of a block (8,192 records) and the next.
      const auto part = store.series(id, 1, "loss", 8190.4, 8194.2);
      QCOMPARE(part.size(), std::size_t(6));
      for (std::size_t i = 0; i < part.size(); ++i) {
        QCOMPARE(part[i].first, 8190.0 + static_cast<double>(i));
        QCOMPARE(part[i].second, stepRecord(1, 8190 + static_cast<std::int64_t>(i)).step.loss);
      }
      QVERIFY(store.series(id, 1, "loss", std::nan(""), 100).empty());
      QVERIFY(store.series(id, -1, "loss", 0, 100).empty());
      QCOMPARE(sql.count("SELECT count(*) FROM validation WHERE run_id = " + std::to_string(id)), std::int64_t(2));
    };
    // Packed: nothing in `steps` yet; in the step file, blocks of at most 8,192 records.
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(0));
    const auto blocks = blocksOf(fileBytes(stepFile(dir, id)));
    QCOMPARE(blocks.size(), std::size_t(8));
    std::int64_t most = 0;
    for (const auto& b : blocks) most = std::max<std::int64_t>(most, b.count);
    QCOMPARE(most, std::int64_t(8192));
    check();

    // Progress: from 0 of all, once a block, to all of all.
    std::vector<std::pair<std::int64_t, std::int64_t>> shown;
    store.endRun(id, "finished", "", std::nan(""), std::nan(""), 1,
                 [&](std::int64_t done, std::int64_t total) { shown.emplace_back(done, total); });
    QCOMPARE(shown.size(), std::size_t(8 + 1));
    QCOMPARE(shown.front(), std::make_pair(std::int64_t(0), 2 * steps));
    QCOMPARE(shown.back(), std::make_pair(2 * steps, 2 * steps));
    for (std::size_t i = 1; i < shown.size(); ++i) {
      QVERIFY(shown[i].first > shown[i - 1].first);
      QVERIFY(shown[i].first - shown[i - 1].first <= 8192);
      QCOMPARE(shown[i].second, 2 * steps);
    }
    QCOMPARE(store.error(), std::string());
    QVERIFY(!std::filesystem::exists(stepFile(dir, id)));
    QCOMPARE(sql.count("SELECT count(*) FROM step_files"), std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE run_id = " + std::to_string(id)), 2 * steps);
    // Plain SQL sees the fields, and the run's summary came from them.
    QCOMPARE(sql.count("SELECT mem_bytes FROM steps WHERE rank = 1 AND step = 777"), std::int64_t(1'000'777));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE rank = 0 AND step = 20000 AND loss = " +
                       QString::number(stepRecord(0, 20000).step.loss, 'g', 17).toStdString()),
             std::int64_t(1));
    const auto row = store.run(id);
    QCOMPARE(row.finalLoss, (stepRecord(0, steps).step.loss + stepRecord(1, steps).step.loss) / 2);
    QVERIFY(std::isnan(row.samplesPerS));  // none given: left empty, not averaged over warm-up and all
    check();
  }

  // A step file is blocks of a 40-byte header (magic "PTWB", count, rank, attempt,
  // first_step, last_step, checksum) and count x 88 bytes, little-endian: step, epoch,
  // 8 doubles, mem_bytes (README).
  void blocksHaveTheDocumentedLayout() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    store.append(id, 3, {stepRecord(1, 41), stepRecord(1, 42)});
    store.flush();
    const auto bytes = fileBytes(stepFile(dir, id));
    QCOMPARE(bytes.size(), std::size_t(40 + 2 * 88));
    const auto blocks = blocksOf(bytes);
    QCOMPARE(blocks.size(), std::size_t(1));
    const BlockHeader& h = blocks[0];
    QCOMPARE(std::string(reinterpret_cast<const char*>(bytes.data()), 4), std::string("PTWB"));
    QCOMPARE(h.count, std::uint32_t(2));
    QCOMPARE(h.rank, 1);
    QCOMPARE(h.attempt, 3);
    QCOMPARE(h.firstStep, std::int64_t(41));
    QCOMPARE(h.lastStep, std::int64_t(42));
    const unsigned char* b = h.records + 88;  // the second record
    auto f64 = [&](int at) {
      const std::uint64_t u = le(b + at, 8);
      double d;
      std::memcpy(&d, &u, 8);
      return d;
    };
    const auto expect = stepRecord(1, 42).step;
    QCOMPARE(static_cast<std::int64_t>(le(b, 8)), expect.step);
    QCOMPARE(static_cast<std::int64_t>(le(b + 8, 8)), expect.epoch);
    const double values[8] = {expect.loss,      expect.samplesPerS, expect.stepMs, expect.dataMs,
                              expect.computeMs, expect.commMs,      expect.optMs,  expect.lr};
    for (int i = 0; i < 8; ++i) QCOMPARE(f64(16 + 8 * i), values[i]);
    QCOMPARE(static_cast<std::int64_t>(le(b + 80, 8)), expect.memBytes);
    // The checksum as the README gives it: 22 words, 5 fours and 2 left for lane 0.
    auto mix = [](std::uint64_t l, std::uint64_t w) { return ((l << 7) | (l >> 57)) + w; };
    std::uint64_t lane[4] = {2 * 88, 1, 2, 3};
    for (int w = 0; w < 22; ++w) lane[w < 20 ? w % 4 : 0] = mix(lane[w < 20 ? w % 4 : 0], le(h.records + 8 * w, 8));
    QCOMPARE(le(bytes.data() + 32, 8), mix(mix(mix(lane[0], lane[1]), lane[2]), lane[3]));
  }

  // A crash can leave a block cut short, or pages of the file as zeros: a block cut short
  // ends what is read, one whose records differ from its checksum is passed over, and every
  // reader reads, counts and unpacks the same records.
  void aBlockCutShortEndsWhatIsRead() {
    for (const char* damage : {"cut", "zeros", "flipped"}) {
      QTemporaryDir dir;
      RunStore store(dir.path().toStdString());
      const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
      for (std::int64_t at = 1; at <= 300; at += 100) {  // three commits of one block each
        std::vector<Record> batch;
        for (std::int64_t s = at; s < at + 100; ++s) batch.push_back(stepRecord(0, s));
        store.append(id, 0, batch);
        store.flush();
      }
      const std::string path = stepFile(dir, id);
      const auto whole = std::filesystem::file_size(path);
      QCOMPARE(whole, std::uintmax_t(3 * (40 + 100 * 88)));
      if (std::string(damage) == "cut") {
        std::filesystem::resize_file(path, whole - 500);
      } else {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(whole) - (std::string(damage) == "zeros" ? 4096 : 300));
        if (std::string(damage) == "zeros") f << std::string(4096, '\0');
        else f << 'x';
      }
      RunStore reader(dir.path().toStdString());
      QCOMPARE(reader.stepCount(id), std::int64_t(200));
      const auto read = reader.steps(id);
      QCOMPARE(read.size(), std::size_t(200));
      for (std::size_t i = 0; i < read.size(); ++i)
        QVERIFY(read[i] == stepRecord(0, std::int64_t(i) + 1).step);
      store.endRun(id, "finished", "", 0.5, 1.0, 1);
      QCOMPARE(store.stepCount(id), std::int64_t(200));
      Sql sql(store.path());
      QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(200));
      QVERIFY(!std::filesystem::exists(path));
    }
  }

  // Ranks append their own blocks to one file (Note [Ranks write their steps]): a rank killed
  // in the middle of its write leaves a block cut short, right behind which another rank's
  // next block starts. That block is passed over, and every block after it is read, counted
  // and unpacked; so is one whose header itself was cut. A block still being written at the
  // end is not read until it is whole.
  void aBlockCutShortAmongOthersIsPassedOver() {
    for (const std::size_t keep : {std::size_t(40 + 30 * 88 + 17), std::size_t(20)}) {
      QTemporaryDir dir;
      RunStore store(dir.path().toStdString());
      const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
      const std::pair<int, std::int64_t> blocks[] = {{0, 1}, {1, 1}, {0, 101}, {1, 101}};  // rank, first step
      for (const auto& [rank, first] : blocks) {
        std::vector<Record> batch;
        for (std::int64_t s = first; s < first + 100; ++s) batch.push_back(stepRecord(rank, s));
        store.append(id, 0, batch);
        store.flush();
      }
      const std::string path = stepFile(dir, id);
      const auto bytes = fileBytes(path);
      const std::size_t block = 40 + 100 * 88;
      QCOMPARE(bytes.size(), 4 * block);
      // Rank 1's first block cut to `keep` bytes, the others whole behind it; then rank 0's
      // next block half written.
      std::string damaged(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(block + keep));
      damaged.append(bytes.begin() + static_cast<std::ptrdiff_t>(2 * block), bytes.end());
      const std::string partial(bytes.begin() + static_cast<std::ptrdiff_t>(2 * block),
                                bytes.begin() + static_cast<std::ptrdiff_t>(2 * block + block / 2));
      std::vector<StepRecord> expected;
      for (std::int64_t s = 1; s <= 200; ++s) expected.push_back(stepRecord(0, s).step);
      for (std::int64_t s = 101; s <= 200; ++s) expected.push_back(stepRecord(1, s).step);
      for (const bool writing : {true, false}) {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged << (writing ? partial : "");
        RunStore reader(dir.path().toStdString());
        QCOMPARE(reader.stepCount(id), std::int64_t(300));
        const auto read = reader.steps(id);
        QCOMPARE(read.size(), expected.size());
        for (std::size_t i = 0; i < read.size(); ++i) QVERIFY2(read[i] == expected[i], qPrintable(QString::number(i)));
        QCOMPARE(reader.series(id, 1, "loss", 0, 1e9).size(), std::size_t(100));
      }
      store.endRun(id, "finished", "", 0.5, 1.0, 1);
      Sql sql(store.path());
      QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(300));
      QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE rank = 1 AND step <= 100"), std::int64_t(0));
      QVERIFY(!std::filesystem::exists(path));
    }
  }

  // Unpacking that stops part way (a crash, a full disk) resumes where it stopped: a
  // reader at any point sees every record once, and the rows end up each record once.
  void unpackingCutShortResumesWithoutDuplicates() {
    QTemporaryDir dir;
    std::int64_t id = 0;
    const std::int64_t steps = 3 * 8192;
    struct Stop {};
    {
      RunStore store(dir.path().toStdString());
      id = store.beginRun(dir.path().toStdString(), defaultProfile());
      for (int rank = 0; rank < 2; ++rank) {
        std::vector<Record> batch;
        for (std::int64_t s = 1; s <= steps; ++s) batch.push_back(stepRecord(rank, s));
        store.append(id, 0, batch);
      }
      store.flush();
      RunStore reader(dir.path().toStdString());
      int blocks = 0;
      try {
        store.unpackBlocks(id, [&](std::int64_t done, std::int64_t total) {
          QCOMPARE(total, 2 * steps);
          QCOMPARE(reader.stepCount(id), 2 * steps);
          QCOMPARE(reader.steps(id).size(), std::size_t(2 * steps));
          if (done > 0 && ++blocks == 2) throw Stop{};  // two of six blocks are rows
        });
        QFAIL("unpacking was not stopped");
      } catch (const Stop&) {
      }
      Sql sql(store.path());
      QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(2 * 8192));
    }
    RunStore again(dir.path().toStdString());
    QCOMPARE(again.stepCount(id), 2 * steps);
    again.unpackBlocks(id);
    Sql sql(again.path());
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), 2 * steps);
    QCOMPARE(sql.count("SELECT count(*) FROM (SELECT DISTINCT rank, step FROM steps)"), 2 * steps);
    QCOMPARE(sql.count("SELECT count(*) FROM step_files"), std::int64_t(0));
    const auto all = again.steps(id);
    QCOMPARE(all.size(), std::size_t(2 * steps));
    QVERIFY(all.back() == stepRecord(1, steps).step);
  }

  // Two stores unpacking the same ended run at once (`ptw runs` while another run ends): one
  // unpacks all of it in the middle of the other's unpacking, and every record is a row once.
  void twoUnpackersAtOnceWriteEachRowOnce() {
    QTemporaryDir dir;
    RunStore first(dir.path().toStdString());
    const auto id = first.beginRun(dir.path().toStdString(), defaultProfile());
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<Record> batch;
      for (std::int64_t s = 1; s <= 8192 + 100; ++s) batch.push_back(stepRecord(rank, s));
      first.append(id, 0, batch);
    }
    first.flush();
    RunStore second(dir.path().toStdString());
    bool otherDone = false;
    first.unpackBlocks(id, [&](std::int64_t done, std::int64_t) {
      if (done > 0 && !otherDone) {  // after the first of four blocks
        second.unpackBlocks(id);
        otherDone = true;
      }
    });
    QVERIFY(otherDone);
    Sql sql(first.path());
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(2 * (8192 + 100)));
    QCOMPARE(sql.count("SELECT count(*) FROM (SELECT DISTINCT rank, step FROM steps)"), std::int64_t(2 * (8192 + 100)));
    QCOMPARE(first.stepCount(id), std::int64_t(2 * (8192 + 100)));
    QVERIFY(!std::filesystem::exists(stepFile(dir, id)));
  }

  // A store writing a run whose file another store unpacked and removed (one that took the
  // run for interrupted) starts the file again: what it writes after is still read.
  void aStepFileRemovedUnderItsWriterIsStartedAgain() {
    QTemporaryDir dir;
    RunStore writer(dir.path().toStdString());
    const auto id = writer.beginRun(dir.path().toStdString(), defaultProfile());
    writer.append(id, 0, {stepRecord(0, 1), stepRecord(0, 2)});
    writer.flush();
    {
      RunStore other(dir.path().toStdString());
      other.unpackBlocks(id);
    }
    QVERIFY(!std::filesystem::exists(stepFile(dir, id)));
    writer.append(id, 0, {stepRecord(0, 3)});
    writer.flush();
    QCOMPARE(writer.stepCount(id), std::int64_t(3));
    const auto all = writer.steps(id);
    QCOMPARE(all.size(), std::size_t(3));
    QVERIFY(all[2] == stepRecord(0, 3).step);
  }

  // A database from before step files keeps a running run's blocks in `step_blocks` rows:
  // they are read, and unpacked, like a file's.
  void oldStepBlockRowsAreReadAndUnpacked() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    std::string blob;
    for (std::int64_t s = 1; s <= 3; ++s) {
      const auto r = stepRecord(1, s).step;
      auto put = [&](const auto& v) {
        std::uint64_t u;
        std::memcpy(&u, &v, 8);
        for (int i = 0; i < 8; ++i) blob += static_cast<char>((u >> (8 * i)) & 0xff);
      };
      put(r.step), put(r.epoch);
      for (double v : {r.loss, r.samplesPerS, r.stepMs, r.dataMs, r.computeMs, r.commMs, r.optMs, r.lr}) put(v);
      put(r.memBytes);
    }
    Sql sql(store.path());
    sqlite3_stmt* s = nullptr;
    QCOMPARE(sqlite3_prepare_v2(sql.db(), "INSERT INTO step_blocks VALUES (?, 0, 1, 1, 3, 3, ?)", -1, &s, nullptr),
             SQLITE_OK);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_blob(s, 2, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
    QCOMPARE(sqlite3_step(s), SQLITE_DONE);
    sqlite3_finalize(s);
    store.append(id, 0, {stepRecord(0, 1)});
    store.flush();
    auto check = [&] {
      QCOMPARE(store.stepCount(id), std::int64_t(4));
      const auto all = store.steps(id);
      QCOMPARE(all.size(), std::size_t(4));
      QVERIFY(all[0] == stepRecord(0, 1).step);
      for (std::int64_t k = 1; k <= 3; ++k) QVERIFY(all[std::size_t(k)] == stepRecord(1, k).step);
    };
    check();
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks"), std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(4));
    check();
  }

  // Attempt 0 ran steps 1-1000 and was unpacked; attempt 1 replays 600-1200, still packed.
  // The run's series is 1-1200, with 600-1200 from attempt 1; the count keeps both attempts.
  void laterAttemptWinsAcrossRowsAndBlocks() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    std::vector<Record> first, second;
    for (std::int64_t s = 1; s <= 1000; ++s) first.push_back(stepRecord(0, s, 0));
    for (std::int64_t s = 600; s <= 1200; ++s) second.push_back(stepRecord(0, s, 1));
    store.append(id, 0, first);
    store.flush();
    store.unpackBlocks(id);
    store.append(id, 1, second);
    store.flush();
    QCOMPARE(store.stepCount(id), std::int64_t(1601));
    const auto all = store.steps(id);
    QCOMPARE(all.size(), std::size_t(1200));
    for (std::size_t i = 0; i < all.size(); ++i) {
      const std::int64_t step = static_cast<std::int64_t>(i) + 1;
      QVERIFY2(all[i] == stepRecord(0, step, step >= 600 ? 1 : 0).step,
               qPrintable(QString("step %1 is not the latest attempt's").arg(step)));
    }
    const auto part = store.series(id, 0, "step_ms", 598, 601);
    QCOMPARE(part.size(), std::size_t(4));
    QCOMPARE(part[1].second, stepRecord(0, 599, 0).step.stepMs);
    QCOMPARE(part[2].second, stepRecord(0, 600, 1).step.stepMs);

    // Unpacked, each row keeps its attempt, and the run reads the same.
    store.unpackBlocks(id);
    Sql sql(store.path());
    QVERIFY(!std::filesystem::exists(stepFile(dir, id)));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE attempt = 1 AND step BETWEEN 600 AND 1200"),
             std::int64_t(601));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE attempt = 0 AND step BETWEEN 1 AND 1000"),
             std::int64_t(1000));
    const auto again = store.steps(id);
    QCOMPARE(again.size(), all.size());
    for (std::size_t i = 0; i < all.size(); ++i) QVERIFY(again[i] == all[i]);
  }

  // A store too full to unpack a run into rows at its end: nothing is lost, the run is not
  // failed for it, every record is still read, and a later store unpacks them.
  void unpackingIntoAFullStoreLosesNothing() {
    QTemporaryDir dir;
    std::int64_t id = 0;
    std::vector<StepRecord> before;
    {
      // 10 pages of 64 KiB, 8 of them the empty tables and indexes: the blocks fit in the
      // step file (528 KB), their rows do not fit in the database.
      qputenv("PTW_STORE_MAX_KIB", "640");
      RunStore store(dir.path().toStdString());
      qunsetenv("PTW_STORE_MAX_KIB");
      id = store.beginRun(dir.path().toStdString(), defaultProfile());
      for (int rank = 0; rank < 2; ++rank) {
        std::vector<Record> batch;
        for (std::int64_t s = 1; s <= 3000; ++s) batch.push_back(stepRecord(rank, s));
        store.append(id, 0, batch);
      }
      store.flush();
      QCOMPARE(store.error(), std::string());
      store.endRun(id, "finished", "", 0.5, 1.0, 1);
      QCOMPARE(store.error(), std::string());
      QCOMPARE(store.run(id).status, std::string("finished"));
      Sql sql(store.path());
      QVERIFY2(std::filesystem::exists(stepFile(dir, id)), "the cap did not stop the unpacking");
      QVERIFY(sql.count("SELECT count(*) FROM steps") < 6000);
      before = store.steps(id);
      QCOMPARE(before.size(), std::size_t(6000));
      QCOMPARE(store.stepCount(id), std::int64_t(6000));
    }
    RunStore again(dir.path().toStdString());
    again.unpackEndedRuns();
    Sql sql(again.path());
    QVERIFY(!std::filesystem::exists(stepFile(dir, id)));
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(6000));
    const auto after = again.steps(id);
    QCOMPARE(after.size(), before.size());
    for (std::size_t i = 0; i < after.size(); ++i) QVERIFY(after[i] == before[i]);
  }

  // A run whose supervisor died with records still packed: the next store to open the
  // database marks it interrupted and reads them as they are (opening is quick, whatever
  // the run's length); unpacking ended runs turns them into rows, and leaves a run still
  // going alone.
  void interruptedRunIsUnpackedWhenFound() {
    QTemporaryDir dir;
    std::int64_t dead = 0, live = 0;
    {
      RunStore store(dir.path().toStdString());
      dead = store.beginRun(dir.path().toStdString(), defaultProfile());
      live = store.beginRun(dir.path().toStdString(), defaultProfile());
      store.append(dead, 0, {stepRecord(0, 1), stepRecord(1, 1), stepRecord(0, 2)});
      store.append(live, 0, {stepRecord(0, 1)});
      store.flush();
    }
    // The first run's supervisor: a process that has exited.
    const pid_t gone = ::fork();
    if (gone == 0) ::_exit(0);
    ::waitpid(gone, nullptr, 0);
    {
      Sql sql(dir.path().toStdString() + "/runs.sqlite");
      sql.exec("UPDATE runs SET pid = " + std::to_string(gone) + " WHERE id = " + std::to_string(dead));
    }
    RunStore again(dir.path().toStdString());
    QCOMPARE(again.run(dead).status, std::string("interrupted"));
    QCOMPARE(again.run(live).status, std::string("running"));
    Sql sql(again.path());
    QCOMPARE(blocksOf(fileBytes(stepFile(dir, dead))).size(), std::size_t(2));
    QCOMPARE(again.steps(dead).size(), std::size_t(3));
    again.unpackEndedRuns();
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE run_id = " + std::to_string(dead)), std::int64_t(3));
    QVERIFY(!std::filesystem::exists(stepFile(dir, dead)));
    QCOMPARE(blocksOf(fileBytes(stepFile(dir, live))).size(), std::size_t(1));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE run_id = " + std::to_string(live)), std::int64_t(0));
    QCOMPARE(again.steps(dead).size(), std::size_t(3));
    QCOMPARE(again.steps(live).size(), std::size_t(1));
  }
};

QTEST_GUILESS_MAIN(TestRunStore)
#include "test_run_store.moc"
