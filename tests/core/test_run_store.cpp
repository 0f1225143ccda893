// The run store: step records are packed in blocks while a run goes (Note [Step blocks]),
// read back exactly from blocks, rows or both, and unpacked into plain `steps` rows when
// the run ends or is found interrupted.
#include <QTemporaryDir>
#include <QTest>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
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

bool sameRecord(const StepRecord& a, const StepRecord& b) {
  return a.rank == b.rank && a.step == b.step && a.epoch == b.epoch && a.loss == b.loss &&
         a.samplesPerS == b.samplesPerS && a.stepMs == b.stepMs && a.dataMs == b.dataMs &&
         a.computeMs == b.computeMs && a.commMs == b.commMs && a.optMs == b.optMs && a.lr == b.lr &&
         a.memBytes == b.memBytes;
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
        QVERIFY2(sameRecord(all[i], expect), qPrintable(QString("record %1 differs").arg(i)));
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
    // Packed: nothing in `steps` yet, blocks of at most 8,192 records.
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks"), std::int64_t(8));
    QCOMPARE(sql.count("SELECT max(count) FROM step_blocks"), std::int64_t(8192));
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
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks"), std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE run_id = " + std::to_string(id)), 2 * steps);
    // Plain SQL sees the fields, and the run's summary came from them.
    QCOMPARE(sql.count("SELECT mem_bytes FROM steps WHERE rank = 1 AND step = 777"), std::int64_t(1'000'777));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE rank = 0 AND step = 20000 AND loss = " +
                       QString::number(stepRecord(0, 20000).step.loss, 'g', 17).toStdString()),
             std::int64_t(1));
    const auto row = store.run(id);
    QCOMPARE(row.finalLoss, (stepRecord(0, steps).step.loss + stepRecord(1, steps).step.loss) / 2);
    check();
  }

  // Note [Background checkpoints]: a store writing a run copies the WAL back into the
  // database on a thread of its own once the WAL passes 16 MiB, and everything written stays
  // readable by another connection throughout.
  void checkpointsRunOnTheirOwnThread() {
    QTemporaryDir dir;
    std::int64_t id = 0;
    const std::int64_t steps = 8192 * 16;  // 2 ranks: ~23 MiB of blocks, more than 16 MiB
    {
      RunStore store(dir.path().toStdString());
      id = store.beginRun(dir.path().toStdString(), defaultProfile());
      for (std::int64_t at = 1; at <= steps; at += 8192) {
        std::vector<Record> batch;
        for (std::int64_t s = at; s < at + 8192; ++s)
          for (int rank = 0; rank < 2; ++rank) batch.push_back(stepRecord(rank, s));
        store.append(id, 0, batch);
        store.flush();
      }
      QTRY_VERIFY_WITH_TIMEOUT(store.backgroundCheckpoints() >= 1, 20000);
      Sql sql(store.path());
      QCOMPARE(sql.count("SELECT sum(count) FROM step_blocks WHERE run_id = " + std::to_string(id)), 2 * steps);
    }
    RunStore reopened(dir.path().toStdString());
    QCOMPARE(reopened.stepCount(id), 2 * steps);
    const auto all = reopened.steps(id);
    QCOMPARE(all.size(), static_cast<std::size_t>(2 * steps));
    QVERIFY(sameRecord(all.back(), stepRecord(1, steps).step));
  }

  // A block is count x 88 bytes, little-endian: step, epoch, 8 doubles, mem_bytes (README).
  void blocksHaveTheDocumentedLayout() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    store.append(id, 3, {stepRecord(1, 41), stepRecord(1, 42)});
    store.flush();
    Sql sql(store.path());
    sqlite3_stmt* s = nullptr;
    QCOMPARE(sqlite3_prepare_v2(sql.db(),
                                "SELECT run_id, attempt, rank, first_step, last_step, count, records FROM step_blocks",
                                -1, &s, nullptr),
             SQLITE_OK);
    QCOMPARE(sqlite3_step(s), SQLITE_ROW);
    QCOMPARE(sqlite3_column_int64(s, 0), id);
    QCOMPARE(sqlite3_column_int(s, 1), 3);
    QCOMPARE(sqlite3_column_int(s, 2), 1);
    QCOMPARE(sqlite3_column_int64(s, 3), std::int64_t(41));
    QCOMPARE(sqlite3_column_int64(s, 4), std::int64_t(42));
    QCOMPARE(sqlite3_column_int64(s, 5), std::int64_t(2));
    QCOMPARE(sqlite3_column_bytes(s, 6), 2 * 88);
    const auto* b = static_cast<const unsigned char*>(sqlite3_column_blob(s, 6)) + 88;  // the second record
    auto le = [&](int at) {
      std::uint64_t u = 0;
      for (int i = 7; i >= 0; --i) u = (u << 8) | b[at + i];
      return u;
    };
    auto f64 = [&](int at) {
      const std::uint64_t u = le(at);
      double d;
      std::memcpy(&d, &u, 8);
      return d;
    };
    const auto expect = stepRecord(1, 42).step;
    QCOMPARE(static_cast<std::int64_t>(le(0)), expect.step);
    QCOMPARE(static_cast<std::int64_t>(le(8)), expect.epoch);
    const double values[8] = {expect.loss,      expect.samplesPerS, expect.stepMs, expect.dataMs,
                              expect.computeMs, expect.commMs,      expect.optMs,  expect.lr};
    for (int i = 0; i < 8; ++i) QCOMPARE(f64(16 + 8 * i), values[i]);
    QCOMPARE(static_cast<std::int64_t>(le(80)), expect.memBytes);
    QCOMPARE(sqlite3_step(s), SQLITE_DONE);
    sqlite3_finalize(s);
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
      QVERIFY2(sameRecord(all[i], stepRecord(0, step, step >= 600 ? 1 : 0).step),
               qPrintable(QString("step %1 is not the latest attempt's").arg(step)));
    }
    const auto part = store.series(id, 0, "step_ms", 598, 601);
    QCOMPARE(part.size(), std::size_t(4));
    QCOMPARE(part[1].second, stepRecord(0, 599, 0).step.stepMs);
    QCOMPARE(part[2].second, stepRecord(0, 600, 1).step.stepMs);

    // Unpacked, each row keeps its attempt, and the run reads the same.
    store.unpackBlocks(id);
    Sql sql(store.path());
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks"), std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE attempt = 1 AND step BETWEEN 600 AND 1200"),
             std::int64_t(601));
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE attempt = 0 AND step BETWEEN 1 AND 1000"),
             std::int64_t(1000));
    const auto again = store.steps(id);
    QCOMPARE(again.size(), all.size());
    for (std::size_t i = 0; i < all.size(); ++i) QVERIFY(sameRecord(again[i], all[i]));
  }

  // A store too full to unpack a run into rows at its end: nothing is lost, the run is not
  // failed for it, every record is still read, and a later store unpacks them.
  void unpackingIntoAFullStoreLosesNothing() {
    QTemporaryDir dir;
    std::int64_t id = 0;
    std::vector<StepRecord> before;
    {
      qputenv("PTW_STORE_MAX_KIB", "1280");  // 20 pages of 64 KiB: the blocks fit, their rows do not
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
      QVERIFY2(sql.count("SELECT count(*) FROM step_blocks") > 0, "the cap did not stop the unpacking");
      before = store.steps(id);
      QCOMPARE(before.size(), std::size_t(6000));
      QCOMPARE(store.stepCount(id), std::int64_t(6000));
    }
    RunStore again(dir.path().toStdString());
    again.unpackEndedRuns();
    Sql sql(again.path());
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks"), std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(6000));
    const auto after = again.steps(id);
    QCOMPARE(after.size(), before.size());
    for (std::size_t i = 0; i < after.size(); ++i) QVERIFY(sameRecord(after[i], before[i]));
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
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks WHERE run_id = " + std::to_string(dead)), std::int64_t(2));
    QCOMPARE(again.steps(dead).size(), std::size_t(3));
    again.unpackEndedRuns();
    QCOMPARE(sql.count("SELECT count(*) FROM steps WHERE run_id = " + std::to_string(dead)), std::int64_t(3));
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks WHERE run_id = " + std::to_string(dead)), std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks WHERE run_id = " + std::to_string(live)), std::int64_t(1));
    QCOMPARE(again.steps(dead).size(), std::size_t(3));
    QCOMPARE(again.steps(live).size(), std::size_t(1));
  }
};

QTEST_GUILESS_MAIN(TestRunStore)
#include "test_run_store.moc"
