// SPDX-License-Identifier: GPL-3.0-or-later
// The run store: step records are packed in blocks and appended to the run's step file
// while it goes (Note [Step blocks]), read back exactly from the file, chunks or both, and
// packed into compressed `step_chunks` when the run ends or is found interrupted; the rows
// of stores of earlier builds are still read.
#include <QTemporaryDir>
#include <QTest>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "common/profile.h"
#include "common/step_block.h"
#include "common/version.h"
#include "launch/chunk_archive.h"
#include "launch/follow_stream.h"
#include "launch/run_follower.h"
#include "launch/run_store.h"
#include "launch/step_chunk.h"
#include "sql_support.h"

using namespace ptw::core;
using ptw::test::Sql;

namespace {

// The step records a store holds in chunks (Note [Step blocks]), with a WHERE clause to follow.
const std::string kChunked = "SELECT ifnull(sum(count), 0) FROM step_chunks";

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

// Every field the same to the bit (NaNs and negative zeros included).
bool sameBits(const StepRecord& a, const StepRecord& b) {
  bool same = a.rank == b.rank;
  StepRecord::forEachField([&](const char*, auto m) { same = same && std::memcmp(&(a.*m), &(b.*m), 8) == 0; });
  return same;
}

// The schema of a store written before step chunks, verbatim.
constexpr const char* kRowsSchema = R"sql(
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY,
  dir TEXT NOT NULL,
  name TEXT NOT NULL,
  strategy TEXT NOT NULL,
  world INTEGER NOT NULL,
  status TEXT NOT NULL,
  started_at TEXT NOT NULL,
  ended_at TEXT,
  message TEXT,
  final_loss REAL,
  samples_per_s REAL,
  attempts INTEGER NOT NULL DEFAULT 1,
  pid INTEGER NOT NULL,
  host TEXT NOT NULL,
  profile TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  epoch INTEGER NOT NULL,
  loss REAL,
  samples_per_s REAL,
  step_ms REAL,
  data_ms REAL,
  compute_ms REAL,
  comm_ms REAL,
  opt_ms REAL,
  lr REAL,
  mem_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps (run_id, rank, step);
CREATE TABLE IF NOT EXISTS step_blocks (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  count INTEGER NOT NULL,
  records BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS step_blocks_by_run ON step_blocks (run_id, rank, first_step);
CREATE TABLE IF NOT EXISTS step_files (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id),
  unpacked_bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS validation (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  val_loss REAL,
  val_accuracy REAL
);
)sql";

// A store of an earlier build, made with its schema `schema` (kRowsSchema, or the same
// without `mem_bytes` when `memBytes` is false) and run 1, to which steps of that build's
// forms are added: `steps` rows, or `step_blocks` rows of the first block layout.
class EarlierStore {
 public:
  EarlierStore(const std::string& runsDir, bool memBytes) {
    std::string schema = kRowsSchema;
    if (!memBytes) schema.replace(schema.find(",\n  mem_bytes INTEGER"), std::strlen(",\n  mem_bytes INTEGER"), "");
    sqlite3_open((runsDir + "/runs.sqlite").c_str(), &m_db);
    exec(schema);
    exec(
        "INSERT INTO runs (id, dir, name, strategy, world, status, started_at, ended_at, pid, host, profile) VALUES "
        "(1, '/old', 'old', 'ddp', 2, 'finished', '2026-01-01T00:00:00Z', '2026-01-01T00:01:00Z', 1, 'h', '{}')");
    m_memBytes = memBytes;
  }
  ~EarlierStore() { sqlite3_close(m_db); }
  void exec(const std::string& sql) { QCOMPARE(sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK); }
  // Steps [first, last] of `rank` and `attempt` as `steps` rows; returns their records as read back.
  std::vector<StepRecord> rows(int rank, std::int64_t first, std::int64_t last, int attempt) {
    sqlite3_stmt* insert = nullptr;
    const std::string sql =
        std::string("INSERT INTO steps VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?") + (m_memBytes ? ", ?)" : ")");
    sqlite3_prepare_v2(m_db, sql.c_str(), -1, &insert, nullptr);
    exec("BEGIN");
    std::vector<StepRecord> out;
    for (std::int64_t step = first; step <= last; ++step) {
      StepRecord r = stepRecord(rank, step, attempt).step;
      sqlite3_reset(insert);
      sqlite3_bind_int(insert, 1, attempt);
      sqlite3_bind_int(insert, 2, r.rank);
      sqlite3_bind_int64(insert, 3, r.step);
      sqlite3_bind_int64(insert, 4, r.epoch);
      int column = 5;
      for (double v : {r.loss, r.samplesPerS, r.stepMs, r.dataMs, r.computeMs, r.commMs, r.optMs, r.lr})
        sqlite3_bind_double(insert, column++, v);
      if (m_memBytes)
        sqlite3_bind_int64(insert, 13, r.memBytes);
      else
        r.memBytes = 0;  // a field the store has not: read as 0
      if (sqlite3_step(insert) != SQLITE_DONE) out.clear();
      out.push_back(r);
    }
    exec("COMMIT");
    sqlite3_finalize(insert);
    return out;
  }
  // Steps [first, last] of `rank` and `attempt` as one `step_blocks` row; returns their records.
  std::vector<StepRecord> block(int rank, std::int64_t first, std::int64_t last, int attempt) {
    std::string blob;
    std::vector<StepRecord> out;
    auto put = [&](const auto& v) {
      std::uint64_t u;
      std::memcpy(&u, &v, 8);
      for (int i = 0; i < 8; ++i) blob += static_cast<char>((u >> (8 * i)) & 0xff);
    };
    for (std::int64_t step = first; step <= last; ++step) {
      const StepRecord r = stepRecord(rank, step, attempt).step;
      put(r.step), put(r.epoch);
      for (double v : {r.loss, r.samplesPerS, r.stepMs, r.dataMs, r.computeMs, r.commMs, r.optMs, r.lr}) put(v);
      put(r.memBytes);
      out.push_back(r);
    }
    sqlite3_stmt* insert = nullptr;
    sqlite3_prepare_v2(m_db, "INSERT INTO step_blocks VALUES (1, ?, ?, ?, ?, ?, ?)", -1, &insert, nullptr);
    sqlite3_bind_int(insert, 1, attempt);
    sqlite3_bind_int(insert, 2, rank);
    sqlite3_bind_int64(insert, 3, first);
    sqlite3_bind_int64(insert, 4, last);
    sqlite3_bind_int64(insert, 5, last - first + 1);
    sqlite3_bind_blob(insert, 6, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(insert) != SQLITE_DONE) out.clear();
    sqlite3_finalize(insert);
    return out;
  }

 private:
  sqlite3* m_db = nullptr;
  bool m_memBytes = true;
};

// `records` by rank and step, the latest attempt's where attempts overlap (what readers read).
std::vector<StepRecord> latestByStep(std::vector<std::pair<int, StepRecord>> records) {
  std::stable_sort(records.begin(), records.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.rank, a.second.step, a.first) < std::tie(b.second.rank, b.second.step, b.first);
  });
  std::vector<StepRecord> out;
  for (const auto& [attempt, r] : records) {
    if (!out.empty() && out.back().rank == r.rank && out.back().step == r.step)
      out.back() = r;
    else
      out.push_back(r);
  }
  return out;
}

std::uint64_t little(const unsigned char* p, int bytes) {
  std::uint64_t u = 0;
  for (int i = bytes - 1; i >= 0; --i) u = (u << 8) | p[i];
  return u;
}

// The records of kFirstLayoutChunk: rank 3, steps 100 to 105, each field with values no
// transform fits besides the ones it does (an unreported loss, -1 integers, infinities).
std::vector<StepRecord> firstLayoutRecords() {
  std::vector<StepRecord> v;
  for (int i = 0; i < 6; ++i) {
    StepRecord s;
    s.rank = 3;
    s.step = 100 + i;
    s.epoch = i < 3 ? -1 : 2;
    s.loss = i == 1 ? notReported() : (i == 2 ? std::numeric_limits<double>::infinity() : 0.25 + i * 0.125);
    s.stepMs = (12345678 + 1000 * i) / 1e6;
    s.samplesPerS = i == 4 ? std::nan("") : 16 * 1000.0 / s.stepMs;
    s.dataMs = 1.5 + i;
    s.computeMs = -std::numeric_limits<double>::infinity();
    s.commMs = std::nan("");
    s.optMs = -0.0;
    s.lr = 0.01;
    s.memBytes = i % 2 ? -1 : 1LL << 40;
    s.stepOffset = i == 5 ? -7 : 0;
    v.push_back(s);
  }
  return v;
}
// firstLayoutRecords() as a chunk of codec 1 (a zstd frame a column), as the build before
// codec 2 wrote it: stores written then must still read.
const char* const kFirstLayoutChunk =
    "50545743060000000c0000000000000000070000001000000028b52ffd2007390000c801020202020200060000000f00"
    "000028b52ffd200631000001000006000001300000002500000028b52ffd2030e50000b0005757000000007e7e00d028"
    "08140c043f40004000000100364002030e0000001700000028b52ffd200e7100004000000001000000000000f87f0002"
    "0e0000001700000028b52ffd200e710000b88ac617a01fa01fa01fa01fa01f02180000001700000028b52ffd20187500"
    "0040809bee028092f4010100238e0b01300000001900000028b52ffd20308500004000f0ff0000000000020029828074"
    "5701300000001900000028b52ffd20308500004000f87f00000000000200298280745701300000001600000028b52ffd"
    "20306d000038008000000000000100809c1002080000001100000028b52ffd2008410000c0b802000000000000240000"
    "001700000028b52ffd2024750000208040818203002f55a40812383600060000000f00000028b52ffd20063100000000"
    "0000000d";

// The transform of each column of a chunk of codec 2 (layout in launch/step_chunk.h).
std::vector<int> transformsOf(const std::string& chunk) {
  std::vector<int> out;
  std::size_t at = 16;
  for (std::uint32_t f = 0; f < little(reinterpret_cast<const unsigned char*>(chunk.data()) + 8, 4); ++f) {
    out.push_back(static_cast<unsigned char>(chunk[at++]));
    while (static_cast<unsigned char>(chunk[at++]) & 0x80) {
    }
  }
  return out;
}

std::string fromHex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// A run's step file (Note [Step blocks]) and the blocks in it, as the README lays them out.
std::string stepFile(const QTemporaryDir& dir, std::int64_t id) {
  return dir.path().toStdString() + "/runs.blocks/" + std::to_string(id);
}
std::vector<unsigned char> fileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
struct LaidOutBlock {
  std::uint32_t magic, count, fields;
  int rank, attempt;
  std::int64_t firstStep, lastStep;
  const unsigned char* records;
};
std::vector<LaidOutBlock> blocksOf(const std::vector<unsigned char>& f) {
  std::vector<LaidOutBlock> out;
  for (std::size_t at = 0; at + 40 <= f.size();) {
    const unsigned char* h = f.data() + at;
    LaidOutBlock b{static_cast<std::uint32_t>(little(h, 4)),     static_cast<std::uint32_t>(little(h + 4, 2)),
                   static_cast<std::uint32_t>(little(h + 6, 2)), static_cast<int>(little(h + 8, 4)),
                   static_cast<int>(little(h + 12, 4)),          static_cast<std::int64_t>(little(h + 16, 8)),
                   static_cast<std::int64_t>(little(h + 24, 8)), h + 40};
    out.push_back(b);
    at += 40 + 8 * std::size_t(b.fields) * std::size_t(b.count);
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
    // Packed: nothing in chunks yet; in the step file, blocks of at most 8,192 records.
    QCOMPARE(sql.count(kChunked), std::int64_t(0));
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
    QCOMPARE(sql.count(kChunked + " WHERE run_id = " + std::to_string(id)), 2 * steps);
    // The chunks are read back with the fields, and the run's summary came from them.
    const auto packed = store.steps(id);
    QCOMPARE(packed[steps + 776].memBytes, std::int64_t(1'000'777));
    QCOMPARE(packed[steps - 1].step, std::int64_t(20000));
    QCOMPARE(packed[steps - 1].loss, stepRecord(0, 20000).step.loss);
    const auto row = store.run(id);
    QCOMPARE(row.finalLoss, (stepRecord(0, steps).step.loss + stepRecord(1, steps).step.loss) / 2);
    QVERIFY(std::isnan(row.samplesPerS));  // none given: left empty, not averaged over warm-up and all
    check();
  }

  // A step file is blocks of a 40-byte header (magic "PTWB", count, fields, rank, attempt,
  // first_step, last_step, checksum) and count x 96 bytes, little-endian: step, epoch,
  // 8 doubles, mem_bytes, step_offset (README).
  void blocksHaveTheDocumentedLayout() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    store.append(id, 3, {stepRecord(1, 41), stepRecord(1, 42)});
    store.flush();
    const auto bytes = fileBytes(stepFile(dir, id));
    QCOMPARE(bytes.size(), std::size_t(40 + 2 * 96));
    const auto blocks = blocksOf(bytes);
    QCOMPARE(blocks.size(), std::size_t(1));
    const LaidOutBlock& h = blocks[0];
    QCOMPARE(std::string(reinterpret_cast<const char*>(bytes.data()), 4), std::string("PTWB"));
    QCOMPARE(h.count, std::uint32_t(2));
    QCOMPARE(h.fields, std::uint32_t(12));
    QCOMPARE(h.rank, 1);
    QCOMPARE(h.attempt, 3);
    QCOMPARE(h.firstStep, std::int64_t(41));
    QCOMPARE(h.lastStep, std::int64_t(42));
    const unsigned char* b = h.records + 96;  // the second record
    auto f64 = [&](int at) {
      const std::uint64_t u = little(b + at, 8);
      double d;
      std::memcpy(&d, &u, 8);
      return d;
    };
    const auto expect = stepRecord(1, 42).step;
    QCOMPARE(static_cast<std::int64_t>(little(b, 8)), expect.step);
    QCOMPARE(static_cast<std::int64_t>(little(b + 8, 8)), expect.epoch);
    const double values[8] = {expect.loss,      expect.samplesPerS, expect.stepMs, expect.dataMs,
                              expect.computeMs, expect.commMs,      expect.optMs,  expect.lr};
    for (int i = 0; i < 8; ++i) QCOMPARE(f64(16 + 8 * i), values[i]);
    QCOMPARE(static_cast<std::int64_t>(little(b + 80, 8)), expect.memBytes);
    QCOMPARE(static_cast<std::int64_t>(little(b + 88, 8)), expect.stepOffset);
    // The checksum as the README gives it: XXH3-64 of the records.
    QCOMPARE(little(bytes.data() + 32, 8), std::uint64_t(XXH3_64bits(h.records, 2 * 96)));
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
      QCOMPARE(whole, std::uintmax_t(3 * (40 + 100 * 96)));
      if (std::string(damage) == "cut") {
        std::filesystem::resize_file(path, whole - 500);
      } else {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(whole) - (std::string(damage) == "zeros" ? 4096 : 300));
        if (std::string(damage) == "zeros")
          f << std::string(4096, '\0');
        else
          f << 'x';
      }
      RunStore reader(dir.path().toStdString());
      QCOMPARE(reader.stepCount(id), std::int64_t(200));
      const auto read = reader.steps(id);
      QCOMPARE(read.size(), std::size_t(200));
      for (std::size_t i = 0; i < read.size(); ++i) QVERIFY(read[i] == stepRecord(0, std::int64_t(i) + 1).step);
      store.endRun(id, "finished", "", 0.5, 1.0, 1);
      QCOMPARE(store.stepCount(id), std::int64_t(200));
      Sql sql(store.path());
      QCOMPARE(sql.count(kChunked), std::int64_t(200));
      QVERIFY(!std::filesystem::exists(path));
    }
  }

  // Ranks append their own blocks to one file (Note [Ranks write their steps]): a rank killed
  // in the middle of its write leaves a block cut short, right behind which another rank's
  // next block starts. That block is passed over, and every block after it is read, counted
  // and unpacked; so is one whose header itself was cut. A block still being written at the
  // end is not read until it is whole.
  void aBlockCutShortAmongOthersIsPassedOver() {
    for (const std::size_t keep : {std::size_t(40 + 30 * 96 + 17), std::size_t(20)}) {
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
      const std::size_t block = 40 + 100 * 96;
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
      QCOMPARE(sql.count(kChunked), std::int64_t(300));
      QCOMPARE(sql.count(kChunked + " WHERE rank = 1 AND first_step <= 100"), std::int64_t(0));
      QCOMPARE(store.steps(id).size(), expected.size());
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
      RunStore store(dir.path().toStdString(), RunStoreOptions().setPackRecords(8192));
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
        store.packSteps(id, [&](std::int64_t done, std::int64_t total) {
          QCOMPARE(total, 2 * steps);
          QCOMPARE(reader.stepCount(id), 2 * steps);
          QCOMPARE(reader.steps(id).size(), std::size_t(2 * steps));
          if (done > 0 && ++blocks == 2) throw Stop{};  // two of six blocks are chunks
        });
        QFAIL("unpacking was not stopped");
      } catch (const Stop&) {
      }
      Sql sql(store.path());
      QCOMPARE(sql.count(kChunked), std::int64_t(2 * 8192));
    }
    RunStore again(dir.path().toStdString());
    QCOMPARE(again.stepCount(id), 2 * steps);
    again.packSteps(id);
    Sql sql(again.path());
    // Each record once: as many in chunks as the run has, and that many (rank, step) pairs.
    QCOMPARE(sql.count(kChunked), 2 * steps);
    QCOMPARE(again.steps(id).size(), std::size_t(2 * steps));
    QCOMPARE(sql.count("SELECT count(*) FROM step_files"), std::int64_t(0));
    const auto all = again.steps(id);
    QCOMPARE(all.size(), std::size_t(2 * steps));
    QVERIFY(all.back() == stepRecord(1, steps).step);
  }

  // Two stores unpacking the same ended run at once (`ptw runs` while another run ends): one
  // unpacks all of it in the middle of the other's unpacking, and every record is a row once.
  void twoUnpackersAtOnceWriteEachRowOnce() {
    QTemporaryDir dir;
    RunStore first(dir.path().toStdString(), RunStoreOptions().setPackRecords(8192));
    const auto id = first.beginRun(dir.path().toStdString(), defaultProfile());
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<Record> batch;
      for (std::int64_t s = 1; s <= 8192 + 100; ++s) batch.push_back(stepRecord(rank, s));
      first.append(id, 0, batch);
    }
    first.flush();
    RunStore second(dir.path().toStdString());
    bool otherDone = false;
    first.packSteps(id, [&](std::int64_t done, std::int64_t) {
      if (done > 0 && !otherDone) {  // after the first of four blocks
        second.packSteps(id);
        otherDone = true;
      }
    });
    QVERIFY(otherDone);
    Sql sql(first.path());
    // Each record once: as many in chunks as the run has, and that many (rank, step) pairs.
    QCOMPARE(sql.count(kChunked), std::int64_t(2 * (8192 + 100)));
    QCOMPARE(first.steps(id).size(), std::size_t(2 * (8192 + 100)));
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
      other.packSteps(id);
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
  // opening it converts them into chunks, read and packed beside a file's.
  void oldStepBlockRowsAreReadAndUnpacked() {
    QTemporaryDir dir;
    std::int64_t id = 0;
    {
      RunStore first(dir.path().toStdString());
      id = first.beginRun(dir.path().toStdString(), defaultProfile());
    }
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
    {
      Sql old(dir.path().toStdString() + "/runs.sqlite");
      // The table as that build made it (a store made since has none).
      const std::string schema = kRowsSchema;
      const std::string table = schema.substr(schema.find("CREATE TABLE IF NOT EXISTS step_blocks"));
      QCOMPARE(sqlite3_exec(old.db(), table.substr(0, table.find("CREATE TABLE IF NOT EXISTS step_files")).c_str(),
                            nullptr, nullptr, nullptr),
               SQLITE_OK);
      sqlite3_stmt* s = nullptr;
      QCOMPARE(sqlite3_prepare_v2(old.db(), "INSERT INTO step_blocks VALUES (?, 0, 1, 1, 3, 3, ?)", -1, &s, nullptr),
               SQLITE_OK);
      sqlite3_bind_int64(s, 1, id);
      sqlite3_bind_blob(s, 2, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
      QCOMPARE(sqlite3_step(s), SQLITE_DONE);
      sqlite3_finalize(s);
    }
    RunStore store(dir.path().toStdString());
    Sql sql(store.path());
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
    QCOMPARE(sql.count(kChunked), std::int64_t(4));
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
    store.packSteps(id);
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

    // Packed, each chunk keeps its attempt, and the run reads the same.
    store.packSteps(id);
    Sql sql(store.path());
    QVERIFY(!std::filesystem::exists(stepFile(dir, id)));
    QCOMPARE(sql.count(kChunked + " WHERE attempt = 1 AND first_step >= 600 AND last_step <= 1200"), std::int64_t(601));
    QCOMPARE(sql.count(kChunked + " WHERE attempt = 0 AND first_step >= 1 AND last_step <= 1000"), std::int64_t(1000));
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
      // 18 pages of 32 KiB, 12 of them the empty tables and indexes: the blocks fit in the
      // step file (563 KiB), their chunks do not fit in the database (doubles of random bits
      // do not compress: the chunks take more than the 6 pages left).
      RunStore store(dir.path().toStdString(), RunStoreOptions().setSizeLimitKib(576));
      id = store.beginRun(dir.path().toStdString(), defaultProfile());
      std::uint64_t seed = 99;
      for (int rank = 0; rank < 2; ++rank) {
        std::vector<Record> batch;
        for (std::int64_t s = 1; s <= 3000; ++s) {
          batch.push_back(stepRecord(rank, s));
          StepRecord& r = batch.back().step;
          for (double* v : {&r.loss, &r.samplesPerS, &r.stepMs, &r.dataMs, &r.computeMs, &r.commMs, &r.optMs, &r.lr}) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            const std::uint64_t bits = (seed >> 12) | 0x3ff0000000000000ULL;  // in [1, 2)
            std::memcpy(v, &bits, 8);
          }
        }
        store.append(id, 0, batch);
      }
      store.flush();
      QCOMPARE(store.error(), std::string());
      store.endRun(id, "finished", "", 0.5, 1.0, 1);
      QCOMPARE(store.error(), std::string());
      QCOMPARE(store.run(id).status, std::string("finished"));
      Sql sql(store.path());
      QVERIFY2(std::filesystem::exists(stepFile(dir, id)), "the cap did not stop the unpacking");
      QVERIFY(sql.count(kChunked) < 6000);
      before = store.steps(id);
      QCOMPARE(before.size(), std::size_t(6000));
      QCOMPARE(store.stepCount(id), std::int64_t(6000));
    }
    RunStore again(dir.path().toStdString());
    again.packEndedRuns();
    Sql sql(again.path());
    QVERIFY(!std::filesystem::exists(stepFile(dir, id)));
    QCOMPARE(sql.count(kChunked), std::int64_t(6000));
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
    again.packEndedRuns();
    QCOMPARE(sql.count(kChunked + " WHERE run_id = " + std::to_string(dead)), std::int64_t(3));
    QVERIFY(!std::filesystem::exists(stepFile(dir, dead)));
    QCOMPARE(blocksOf(fileBytes(stepFile(dir, live))).size(), std::size_t(1));
    QCOMPARE(sql.count(kChunked + " WHERE run_id = " + std::to_string(live)), std::int64_t(0));
    QCOMPARE(again.steps(dead).size(), std::size_t(3));
    QCOMPARE(again.steps(live).size(), std::size_t(1));
  }

  // A store written by the build before chunks: its schema verbatim, one row per record in
  // `steps`. This build opens it, converts its rows into chunks, reads every record back
  // equal, and stores a new run beside it in chunks.
  void aStoreOfRowsIsReadBackWhole() {
    QTemporaryDir dir;
    const std::string db = dir.path().toStdString() + "/runs.sqlite";
    sqlite3* raw = nullptr;
    QCOMPARE(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
    QCOMPARE(sqlite3_exec(raw, kRowsSchema, nullptr, nullptr, nullptr), SQLITE_OK);
    QCOMPARE(sqlite3_exec(raw,
                          "INSERT INTO runs (id, dir, name, strategy, world, status, started_at, ended_at, pid, host, "
                          "profile) VALUES (1, '/old', 'old', 'ddp', 2, 'finished', '2026-01-01T00:00:00Z', "
                          "'2026-01-01T00:01:00Z', 1, 'h', '{}')",
                          nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_stmt* insert = nullptr;
    QCOMPARE(sqlite3_prepare_v2(raw, "INSERT INTO steps VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", -1, &insert,
                                nullptr),
             SQLITE_OK);
    std::vector<StepRecord> expected;
    for (int rank = 0; rank < 2; ++rank)
      for (std::int64_t step = 1; step <= 300; ++step) {
        // Attempt 1 replays steps 201-300: those rows are read, attempt 0's are not.
        for (int attempt = 0; attempt < (step > 200 ? 2 : 1); ++attempt) {
          const StepRecord r = stepRecord(rank, step, attempt).step;
          sqlite3_reset(insert);
          sqlite3_bind_int(insert, 1, attempt);
          sqlite3_bind_int(insert, 2, r.rank);
          sqlite3_bind_int64(insert, 3, r.step);
          sqlite3_bind_int64(insert, 4, r.epoch);
          int column = 5;
          for (double v : {r.loss, r.samplesPerS, r.stepMs, r.dataMs, r.computeMs, r.commMs, r.optMs, r.lr})
            sqlite3_bind_double(insert, column++, v);
          sqlite3_bind_int64(insert, 13, r.memBytes);
          QCOMPARE(sqlite3_step(insert), SQLITE_DONE);
        }
        expected.push_back(stepRecord(rank, step, step > 200 ? 1 : 0).step);
      }
    sqlite3_finalize(insert);
    sqlite3_close(raw);

    RunStore store(dir.path().toStdString());
    QCOMPARE(store.run(1).name, std::string("old"));
    QCOMPARE(store.run(1).ptwVersion, std::string());  // made before runs recorded their version
    QCOMPARE(store.stepCount(1), std::int64_t(2 * 300 + 2 * 100));
    auto check = [&] {
      const auto all = store.steps(1);
      QCOMPARE(all.size(), expected.size());
      for (std::size_t i = 0; i < all.size(); ++i) QVERIFY2(all[i] == expected[i], qPrintable(QString::number(i)));
      const auto part = store.series(1, 1, "samples_per_s", 199, 202);
      QCOMPARE(part.size(), std::size_t(4));
      QCOMPARE(part[3].second, stepRecord(1, 202, 1).step.samplesPerS);
    };
    check();
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    store.append(id, 0, {stepRecord(0, 1), stepRecord(0, 2)});
    store.endRun(id, "finished", "", std::nan(""), std::nan(""), 1);
    check();
    Sql sql(store.path());
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(0));
    QCOMPARE(sql.count(kChunked + " WHERE run_id = 1"), std::int64_t(2 * 300 + 2 * 100));
    QCOMPARE(sql.count(kChunked + " WHERE run_id = " + std::to_string(id)), std::int64_t(2));
    QCOMPARE(store.run(id).finalLoss, stepRecord(0, 2).step.loss);
    QCOMPARE(store.run(id).ptwVersion, std::string(ptw::kVersion));
  }

  // A store of each earlier form: `steps` rows (with every field, or one without mem_bytes,
  // which reads as 0), `step_blocks` rows, both, and a restart's attempt replaying steps in
  // the other form. Opening it converts every record into chunks, a transaction at a time
  // with progress from 0 to all, leaves the earlier tables empty, and reads back the
  // records written, the latest attempt's where attempts overlap.
  void aStoreOfEachEarlierFormIsConvertedWhenOpened_data() {
    QTest::addColumn<bool>("memBytes");
    QTest::addColumn<std::int64_t>("rowSteps");    // steps 1.. as rows, attempt 0, both ranks
    QTest::addColumn<std::int64_t>("blockSteps");  // steps after them as blocks of 8,192, attempt 0
    QTest::addColumn<bool>("replay");              // attempt 1 replays steps 101-400 of rank 1 as blocks
    QTest::newRow("steps rows") << true << std::int64_t(10000) << std::int64_t(0) << false;
    QTest::newRow("steps rows without mem_bytes") << false << std::int64_t(300) << std::int64_t(0) << false;
    QTest::newRow("step_blocks rows") << true << std::int64_t(0) << std::int64_t(9000) << false;
    QTest::newRow("rows, then blocks") << true << std::int64_t(5000) << std::int64_t(5000) << false;
    QTest::newRow("rows, and a replay as blocks") << true << std::int64_t(500) << std::int64_t(0) << true;
  }
  void aStoreOfEachEarlierFormIsConvertedWhenOpened() {
    QFETCH(bool, memBytes);
    QFETCH(std::int64_t, rowSteps);
    QFETCH(std::int64_t, blockSteps);
    QFETCH(bool, replay);
    QTemporaryDir dir;
    std::vector<std::pair<int, StepRecord>> written;
    auto add = [&](int attempt, const std::vector<StepRecord>& records) {
      for (const auto& r : records) written.emplace_back(attempt, r);
    };
    {
      EarlierStore old(dir.path().toStdString(), memBytes);
      for (int rank = 0; rank < 2; ++rank) {
        if (rowSteps > 0) add(0, old.rows(rank, 1, rowSteps, 0));
        for (std::int64_t at = rowSteps + 1; at <= rowSteps + blockSteps; at += 8192)
          add(0, old.block(rank, at, std::min(at + 8191, rowSteps + blockSteps), 0));
      }
      if (replay) add(1, old.block(1, 101, 400, 1));
    }
    const auto total = static_cast<std::int64_t>(written.size());
    std::vector<std::pair<std::int64_t, std::int64_t>> shown;
    RunStore store(dir.path().toStdString(),
                   RunStoreOptions().setConversionProgress([&](std::int64_t run, std::int64_t done, std::int64_t all) {
                     QCOMPARE(run, std::int64_t(1));
                     shown.emplace_back(done, all);
                   }));
    QVERIFY(shown.size() >= 2);
    QCOMPARE(shown.front(), std::make_pair(std::int64_t(0), total));
    QCOMPARE(shown.back(), std::make_pair(total, total));
    for (std::size_t i = 1; i < shown.size(); ++i) QVERIFY(shown[i].first > shown[i - 1].first);
    Sql sql(store.path());
    QCOMPARE(sql.count("SELECT count(*) FROM steps"), std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM step_blocks"), std::int64_t(0));
    QCOMPARE(sql.count(kChunked + " WHERE run_id = 1"), total);
    QCOMPARE(store.stepCount(1), total);
    const auto expected = latestByStep(written);
    const auto all = store.steps(1);
    QCOMPARE(all.size(), expected.size());
    for (std::size_t i = 0; i < all.size(); ++i)
      QVERIFY2(sameBits(all[i], expected[i]), qPrintable(QString("record %1 differs").arg(i)));
    const auto part = store.series(1, 1, "loss", 99, 102);
    QCOMPARE(part.size(), std::size_t(4));
    QCOMPARE(part[2].second, stepRecord(1, 101, replay ? 1 : 0).step.loss);
    // Opened again, nothing is left to convert.
    shown.clear();
    RunStore again(dir.path().toStdString(),
                   RunStoreOptions().setConversionProgress(
                       [&](std::int64_t, std::int64_t done, std::int64_t all) { shown.emplace_back(done, all); }));
    QVERIFY(shown.empty());
    QCOMPARE(again.steps(1).size(), expected.size());
  }

  // A conversion cut short (a crash, or a full disk between two transactions) leaves each
  // record in one form, the earlier one or a chunk; opening the store again finishes it,
  // and every record reads back once.
  void aConversionCutShortIsFinishedWhenOpenedAgain() {
    QTemporaryDir dir;
    std::vector<std::pair<int, StepRecord>> written;
    {
      EarlierStore old(dir.path().toStdString(), true);
      for (int rank = 0; rank < 2; ++rank) {
        for (const auto& r : old.rows(rank, 1, 20000, 0)) written.emplace_back(0, r);
        for (const auto& r : old.block(rank, 20001, 20100, 0)) written.emplace_back(0, r);
      }
    }
    const auto total = static_cast<std::int64_t>(written.size());
    struct Stop {};
    try {
      RunStore cut(dir.path().toStdString(),
                   RunStoreOptions().setConversionProgress([](std::int64_t, std::int64_t done, std::int64_t) {
                     if (done > 0) throw Stop{};
                   }));
      QFAIL("the conversion was not stopped");
    } catch (const Stop&) {
    }
    {
      Sql sql(dir.path().toStdString() + "/runs.sqlite");
      const std::int64_t rows = sql.count("SELECT count(*) FROM steps"), chunked = sql.count(kChunked);
      QVERIFY2(rows > 0 && chunked > 0, qPrintable(QString("%1 rows, %2 in chunks").arg(rows).arg(chunked)));
      QCOMPARE(rows + sql.count("SELECT ifnull(sum(count), 0) FROM step_blocks") + chunked, total);
    }
    RunStore store(dir.path().toStdString());
    Sql sql(store.path());
    QCOMPARE(sql.count("SELECT count(*) FROM steps") + sql.count("SELECT count(*) FROM step_blocks"), std::int64_t(0));
    QCOMPARE(sql.count(kChunked), total);
    QCOMPARE(store.stepCount(1), total);
    const auto expected = latestByStep(written);
    const auto all = store.steps(1);
    QCOMPARE(all.size(), expected.size());
    for (std::size_t i = 0; i < all.size(); ++i)
      QVERIFY2(sameBits(all[i], expected[i]), qPrintable(QString("record %1 differs").arg(i)));
  }

  // Each run records the ptw that made it (project()'s version); a store opened again keeps it,
  // and the column is there for plain SQL.
  void aRunRecordsTheVersionThatMadeIt() {
    QTemporaryDir dir;
    std::int64_t id = 0;
    {
      RunStore store(dir.path().toStdString());
      id = store.beginRun(dir.path().toStdString(), defaultProfile());
      store.endRun(id, "finished", "", std::nan(""), std::nan(""), 1);
    }
    QVERIFY(std::strlen(ptw::kVersion) > 0);
    RunStore again(dir.path().toStdString());
    QCOMPARE(again.run(id).ptwVersion, std::string(ptw::kVersion));
    Sql sql(again.path());
    QCOMPARE(sql.count("SELECT count(*) FROM runs WHERE ptw_version = '" + std::string(ptw::kVersion) + "'"),
             std::int64_t(1));
  }

  // Through a step file and into chunks, every field of every record comes back bit for bit,
  // whatever its value (NaN, infinities, negative zero, subnormals, extremes, and doubles
  // that no transform fits); a range reads exactly the records in it.
  void chunksKeepEveryBitAndReadRanges() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    const double odd[] = {std::nan(""),
                          -std::nan(""),
                          std::numeric_limits<double>::infinity(),
                          -std::numeric_limits<double>::infinity(),
                          -0.0,
                          0.0,
                          4.9e-324,
                          -1.7976931348623157e308,
                          1e-300,
                          0.1,
                          1e12,
                          -33.000001};
    const std::int64_t ints[] = {
        0, -1, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(), 42, 1LL << 40};
    std::vector<Record> batch;
    std::uint64_t seed = 12345;
    auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
    for (std::int64_t step = 1; step <= 20000; ++step) {
      Record r = stepRecord(static_cast<int>(step % 3), step);
      StepRecord& s = r.step;
      int k = 0;
      StepRecord::forEachField([&](const char*, auto m) {
        ++k;
        if constexpr (std::is_same_v<StepFieldType<decltype(m)>, std::int64_t>)
          if (m == &StepRecord::step) return;  // the step keeps the range meaningful
        const std::uint64_t pick = next() >> 33;
        if (pick % 5 != 0) return;
        if constexpr (std::is_same_v<StepFieldType<decltype(m)>, double>) {
          const std::uint64_t bits = next();
          double v;
          std::memcpy(&v, &bits, 8);
          s.*m = pick % 2 ? odd[(pick / 5 + k) % std::size(odd)] : v;
        } else {
          s.*m = ints[(pick / 5 + k) % std::size(ints)];
        }
      });
      batch.push_back(r);
    }
    store.append(id, 0, batch);
    store.flush();
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    Sql sql(store.path());
    QVERIFY(sql.count(kChunked) == 20000 && !std::filesystem::exists(stepFile(dir, id)));
    std::vector<StepRecord> expected;
    for (const auto& r : batch) expected.push_back(r.step);
    std::stable_sort(expected.begin(), expected.end(), [](const StepRecord& a, const StepRecord& b) {
      return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
    });
    const auto all = store.steps(id);
    QCOMPARE(all.size(), expected.size());
    for (std::size_t i = 0; i < all.size(); ++i)
      QVERIFY2(sameBits(all[i], expected[i]), qPrintable(QString("record %1 differs").arg(i)));
    // Ranges across chunk borders (a chunk holds up to 16,384 records over the ranks), at the ends, empty.
    const std::pair<double, double> ranges[] = {{1, 20000},    {5460, 5470}, {16383, 16390},
                                                {19999, 1e30}, {0, 0},       {7.5, 7.6}};
    for (const auto& [x0, x1] : ranges)
      for (int rank = 0; rank < 3; ++rank) {
        const auto got = store.series(id, rank, "step_ms", x0, x1);
        std::vector<std::pair<double, double>> want;
        for (const auto& r : expected)
          if (r.rank == rank && static_cast<double>(r.step) >= std::floor(x0) &&
              static_cast<double>(r.step) <= std::ceil(x1))  // series() reads the whole steps the range touches
            want.emplace_back(static_cast<double>(r.step), r.stepMs);
        QCOMPARE(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          QCOMPARE(got[i].first, want[i].first);
          QVERIFY(std::memcmp(&got[i].second, &want[i].second, 8) == 0);
        }
      }
  }

  // A chunk that is not one (cut short, a byte changed, a count that differs) is an error
  // that says so, never a crash or a wrong record.
  void aDamagedChunkIsAnError() {
    std::vector<StepRecord> records;
    for (std::int64_t s = 1; s <= 500; ++s) records.push_back(stepRecord(2, s).step);
    const std::string blob = packChunk(records);
    std::vector<StepRecord> out;
    unpackChunk(reinterpret_cast<const unsigned char*>(blob.data()), blob.size(), 500, 2, out);
    QCOMPARE(out.size(), records.size());
    for (std::size_t i = 0; i < out.size(); ++i) QVERIFY(sameBits(out[i], records[i]));
    auto fails = [&](const std::string& bytes, std::int64_t count) {
      std::vector<StepRecord> got;
      try {
        unpackChunk(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), count, 2, got);
      } catch (const ptw::Error& e) {
        return got.empty() && QString(e.what()).startsWith("run store: a step chunk");
      }
      // A change that still decodes must not be taken for the records written.
      bool same = got.size() == records.size();
      for (std::size_t i = 0; same && i < got.size(); ++i) same = sameBits(got[i], records[i]);
      return !same;
    };
    QVERIFY(fails(blob, 499));
    for (std::size_t cut = 0; cut < blob.size(); cut += 7)
      QVERIFY2(fails(blob.substr(0, cut), 500), qPrintable(QString::number(cut)));
    for (std::size_t at = 0; at < blob.size(); ++at) {
      std::string flipped = blob;
      flipped[at] = static_cast<char>(flipped[at] ^ 0x5a);
      fails(flipped, 500);  // must not crash; a flip in a compressed frame may still decode
    }
  }

  // A chunk of the first codec, as the build before wrote it, still reads to the bit, alone
  // and as a store's row among chunks of the current codec.
  void aChunkOfTheFirstCodecIsStillRead() {
    const std::string blob = fromHex(kFirstLayoutChunk);
    const auto expected = firstLayoutRecords();
    std::vector<StepRecord> out;
    unpackChunk(reinterpret_cast<const unsigned char*>(blob.data()), blob.size(), 6, 3, out);
    QCOMPARE(out.size(), expected.size());
    for (std::size_t i = 0; i < out.size(); ++i)
      QVERIFY2(sameBits(out[i], expected[i]), qPrintable(QString::number(i)));
    QVERIFY(isNotReported(out[1].loss));

    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    store.append(id, 0, {stepRecord(3, 106), stepRecord(3, 107)});
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    Sql sql(store.path());
    sql.exec("INSERT INTO step_chunks VALUES (" + std::to_string(id) + ", 0, 3, 100, 105, 6, 1, X'" +
             kFirstLayoutChunk + "')");
    QCOMPARE(sql.count("SELECT count(DISTINCT codec) FROM step_chunks"), std::int64_t(2));
    const auto all = store.steps(id);
    QCOMPARE(all.size(), std::size_t(8));
    for (std::size_t i = 0; i < 6; ++i) QVERIFY(sameBits(all[i], expected[i]));
    QVERIFY(sameBits(all[6], stepRecord(3, 106).step) && sameBits(all[7], stepRecord(3, 107).step));
    QCOMPARE(store.stepCount(id), std::int64_t(8));
  }

  // Each transform of the current codec gives back every bit: times of whole nanoseconds
  // (their spread in bits; step_ms as the rest of its parts), a float loss, samples_per_s
  // from step_ms; and, mixed in, values that do not fit one (an unreported loss, -1 integers,
  // NaN and infinite times), which the column then escapes or leaves to another transform.
  void chunksOfEachTransformKeepEveryBit_data() {
    QTest::addColumn<int>("odd");  // every odd-th record holds values no transform fits; 0: none
    QTest::addColumn<int>("lossTransform");
    QTest::addColumn<int>("dataTransform");
    QTest::addColumn<int>("stepTransform");
    QTest::newRow("realistic") << 0 << 6 << 5 << 4;
    QTest::newRow("an odd record in 50") << 50 << 1 << 2 << 4;
    QTest::newRow("every record odd") << 1 << 1 << 6 << 5;  // an infinity is a float
  }
  void chunksOfEachTransformKeepEveryBit() {
    QFETCH(int, odd);
    std::uint64_t seed = 99;
    auto noise = [&](std::int64_t range) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<std::int64_t>((seed >> 33) % static_cast<std::uint64_t>(range));
    };
    std::vector<StepRecord> records;
    for (std::int64_t step = 1; step <= 400; ++step) {
      StepRecord s;
      s.rank = 5, s.step = step, s.epoch = step / 50;
      const std::int64_t data = 7'000'000 + noise(1'500'000), compute = 30'000'000 + noise(6'000'000),
                         comm = 7'000'000 + noise(1'500'000), opt = 5'000'000 + noise(1'000'000);
      s.dataMs = static_cast<double>(data) / 1e6;
      s.computeMs = static_cast<double>(compute) / 1e6;
      s.commMs = static_cast<double>(comm) / 1e6;
      s.optMs = static_cast<double>(opt) / 1e6;
      s.stepMs = static_cast<double>(data + compute + comm + opt + noise(3000)) / 1e6;
      s.samplesPerS = 16 * 1000.0 / s.stepMs;
      s.loss = static_cast<float>(2.0 / static_cast<double>(step) + 1e-4 * static_cast<double>(noise(1000)));
      s.lr = 0.01, s.memBytes = 256 << 20, s.stepOffset = 0;
      if (odd > 0 && step % odd == 0) {
        s.loss = step % 3 ? notReported() : -std::numeric_limits<double>::infinity();
        s.epoch = -1, s.memBytes = -1, s.stepOffset = -1;
        s.commMs = std::nan("");
        s.dataMs = std::numeric_limits<double>::infinity();
        s.samplesPerS = std::nan("");
      }
      records.push_back(s);
    }
    const std::string blob = packChunk(records);
    const auto transforms = transformsOf(blob);
    QCOMPARE(transforms.size(), StepRecord::fieldCount());
    QTEST(transforms[2], "lossTransform");
    QTEST(transforms[5], "dataTransform");
    QTEST(transforms[4], "stepTransform");
    std::vector<StepRecord> out;
    unpackChunk(reinterpret_cast<const unsigned char*>(blob.data()), blob.size(), 400, 5, out);
    QCOMPARE(out.size(), records.size());
    for (std::size_t i = 0; i < out.size(); ++i) QVERIFY2(sameBits(out[i], records[i]), qPrintable(QString::number(i)));
  }

  // A run of many ranks of few records each, each writing a block a commit, is packed into
  // packs of several ranks (Note [Packs of ranks]), as many ranks a pack as fit kChunkRecords,
  // with a row a rank and attempt of its steps and count: what keeps a record at a few bytes.
  void manyRanksShareFewPacks() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    const int ranks = 300;
    const std::int64_t steps = 300;
    auto attemptOf = [](std::int64_t step) { return step > 280 ? 1 : 0; };  // a restart at step 281
    for (std::int64_t step = 1; step <= steps; step += 4) {                 // blocks of 4 records a rank
      std::vector<Record> batch;
      for (int rank = 0; rank < ranks; ++rank)
        for (std::int64_t s = step; s < step + 4; ++s) batch.push_back(stepRecord(rank, s, attemptOf(s)));
      store.append(id, attemptOf(step), batch);
      store.flush();
    }
    store.endRun(id, "finished", "", 0.5, 1.0, 2);
    Sql sql(store.path());
    QCOMPARE(ChunkArchive::kChunkRecords, std::int64_t(16384));
    QCOMPARE(sql.count(kChunked), std::int64_t(ranks) * steps);
    // Each rank: a row of steps 1-280 of the first attempt, one of 281-300 of the second.
    QCOMPARE(sql.count("SELECT count(*) FROM step_chunks"), std::int64_t(2 * ranks));
    for (const char* chunk : {"attempt = 0 AND first_step = 1 AND last_step = 280 AND count = 280",
                              "attempt = 1 AND first_step = 281 AND last_step = 300 AND count = 20"})
      QCOMPARE(sql.count(std::string("SELECT count(DISTINCT rank) FROM step_chunks WHERE ") + chunk +
                         " AND codec = " + std::to_string(kPackCodec)),
               std::int64_t(ranks));
    // 58 ranks of 280 records a pack (16,240 of 16,384): 6 packs; 300 ranks of 20: one.
    const std::int64_t packs = (ranks + 16384 / 280 - 1) / (16384 / 280) + 1;
    QCOMPARE(sql.count("SELECT count(*) FROM step_chunks WHERE hex(substr(records, 1, 1)) <> '52'"), packs);
    const auto all = store.steps(id);
    QCOMPARE(all.size(), std::size_t(ranks) * steps);
    for (std::size_t i = 0; i < all.size(); ++i) {
      const int rank = static_cast<int>(i / steps);
      const std::int64_t step = static_cast<std::int64_t>(i % steps) + 1;
      QVERIFY(sameBits(all[i], stepRecord(rank, step, attemptOf(step)).step));
    }
  }

  // Ranks of uneven records in one stretch: some in chunks of their own, the others in packs,
  // ranks missing between them; every record comes back to the bit (NaN payloads, -1
  // integers), a rank's range reads only its records, and a chunk of the codec before, as
  // the build before wrote it, is still read among them.
  void ranksOfUnevenRecordsReadBackExactly() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    auto recordsOf = [](int rank) -> std::int64_t { return rank % 5 == 4 ? 0 : rank == 7 ? 1500 : 1 + 37 * rank; };
    auto odd = [](int rank, std::int64_t step) {
      Record r = stepRecord(rank, step);
      if (step % 11 == 0) {
        const std::uint64_t payload =
            0x7ff8000000000000ULL | (0x1234ULL * std::uint64_t(rank + 1) + std::uint64_t(step));
        std::memcpy(&r.step.loss, &payload, 8);
        r.step.commMs = -std::numeric_limits<double>::infinity();
        r.step.epoch = -1, r.step.memBytes = -1;
      }
      return r;
    };
    const int ranks = 40;
    for (std::int64_t step = 1; step <= 1500; step += 50) {
      std::vector<Record> batch;
      for (int rank = 0; rank < ranks; ++rank)
        for (std::int64_t s = step; s < step + 50 && s <= recordsOf(rank); ++s) batch.push_back(odd(rank, s));
      store.append(id, 0, batch);
      store.flush();
    }
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    Sql sql(store.path());
    QCOMPARE(sql.count("SELECT count(*) FROM step_chunks WHERE rank = 7 AND codec = " + std::to_string(kChunkCodec)),
             std::int64_t(6));  // 1,500 records: chunks of 250 of its own
    QVERIFY(sql.count("SELECT count(*) FROM step_chunks WHERE hex(substr(records, 1, 1)) = '52'") > 0);
    // A chunk of codec 2 for a rank the run did not have.
    std::vector<StepRecord> before;
    for (std::int64_t s = 1; s <= 30; ++s) before.push_back(odd(ranks, s).step);
    const std::string blob = packChunk(before);
    std::string hex;
    for (const unsigned char c : blob) hex += QString::asprintf("%02x", c).toStdString();
    sql.exec("INSERT INTO step_chunks VALUES (" + std::to_string(id) + ", 0, " + std::to_string(ranks) +
             ", 1, 30, 30, " + std::to_string(kChunkCodec) + ", X'" + hex + "')");
    std::vector<StepRecord> expected;
    for (int rank = 0; rank <= ranks; ++rank)
      for (std::int64_t s = 1; s <= (rank == ranks ? 30 : recordsOf(rank)); ++s) expected.push_back(odd(rank, s).step);
    RunStore again(dir.path().toStdString());
    const auto all = again.steps(id);
    QCOMPARE(all.size(), expected.size());
    for (std::size_t i = 0; i < all.size(); ++i)
      QVERIFY2(sameBits(all[i], expected[i]), qPrintable(QString::number(i)));
    QCOMPARE(again.stepCount(id), static_cast<std::int64_t>(expected.size()));
    std::size_t seen = 0;
    again.forEachStep(id,
                      [&](const StepRecord& r) { QVERIFY(seen < expected.size() && sameBits(r, expected[seen++])); });
    QCOMPARE(seen, expected.size());
    for (const int rank : {0, 1, 7, 8, 13, 39, 40})
      for (const auto& [x0, x1] :
           std::vector<std::pair<double, double>>{{1, 1e9}, {100, 200}, {11, 11}, {5000, 6000}}) {
        const auto got = again.series(id, rank, "loss", x0, x1);
        std::vector<double> want;
        for (const auto& r : expected)
          if (r.rank == rank && r.step >= x0 && r.step <= x1) want.push_back(r.loss);
        QCOMPARE(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i) QVERIFY(std::memcmp(&got[i].second, &want[i], 8) == 0);
      }
  }

  // A follower of an ended run reads the packs' rows in the order they were written, each
  // pack decoded for its ranks, and prints every record to the bit (frames carry a double's
  // bits), each once.
  void aFollowerReadsPacksToTheBit() {
    QTemporaryDir dir;
    std::vector<StepRecord> expected;
    {  // the store closed before the follower opens it, as after a run
      RunStore store(dir.path().toStdString());
      const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
      std::vector<Record> batch;
      for (int rank = 0; rank < 60; ++rank)
        for (std::int64_t s = 1; s <= 3 + rank % 7 * 40; ++s) {
          Record r = stepRecord(rank, s);
          if (s % 5 == 0) {
            const std::uint64_t payload = 0xfff0000000000001ULL + std::uint64_t(rank * 1000 + s);
            std::memcpy(&r.step.stepMs, &payload, 8);
            r.step.memBytes = -1;
          }
          batch.push_back(r);
          expected.push_back(r.step);
        }
      store.append(id, 0, batch);
      store.endRun(id, "finished", "", 0.5, 1.0, 1);
      Sql sql(store.path());
      QVERIFY(sql.count("SELECT count(*) FROM step_chunks WHERE hex(substr(records, 1, 1)) = '52'") > 50);
    }
    RunFollower follower(FollowOptions(dir.path().toStdString(), "latest"));
    std::ostringstream text;
    FollowStream stream(text, FollowStream::Format::Frames);
    follower.follow(stream);
    const std::string out = text.str();
    const std::size_t newline = out.find('\n');
    QVERIFY(newline != std::string::npos);
    FollowStream::Decoded decoded;
    bool malformed = false;
    const std::string_view body(out.data() + newline + 1, out.size() - newline - 1);
    FollowStream::decode(body, decoded, malformed);
    QVERIFY(!malformed);
    std::vector<StepRecord> got;
    for (const auto& r : decoded.records)
      if (r.kind == Record::Kind::Step) got.push_back(r.step);
    std::stable_sort(got.begin(), got.end(), [](const StepRecord& a, const StepRecord& b) {
      return std::tie(a.rank, a.step) < std::tie(b.rank, b.step);
    });
    QCOMPARE(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      QVERIFY2(sameBits(got[i], expected[i]), qPrintable(QString::number(i)));
  }

  // A pack round trip at the codec: several ranks of uneven records (one of a single record),
  // their ranks kept; references read back as written; a pack cut short or a reference
  // malformed is an error that says so.
  void aPackKeepsEveryRankAndBit() {
    std::vector<StepRecord> records;
    for (const auto& [rank, n] : std::vector<std::pair<int, int>>{{0, 1}, {3, 100}, {4, 2}, {9, 37}, {70000, 5}})
      for (std::int64_t s = 1; s <= n; ++s) {
        StepRecord r = stepRecord(rank, 1000 + s).step;
        if (s % 3 == 0) r.loss = notReported(), r.epoch = -1, r.memBytes = -1, r.stepOffset = -1;
        records.push_back(r);
      }
    const std::string pack = packRanks(records, 123456789);
    const auto* bytes = reinterpret_cast<const unsigned char*>(pack.data());
    QCOMPARE(packSerial(bytes, pack.size()), std::optional<std::uint64_t>(123456789));
    QVERIFY(!readReference(bytes, pack.size()));
    std::vector<StepRecord> out;
    unpackRanks(bytes, pack.size(), out);
    QCOMPARE(out.size(), records.size());
    for (std::size_t i = 0; i < out.size(); ++i) QVERIFY2(sameBits(out[i], records[i]), qPrintable(QString::number(i)));
    for (std::size_t cut = 0; cut < pack.size(); cut += 5) {
      std::vector<StepRecord> got;
      QVERIFY_THROWS_EXCEPTION(ptw::Error, unpackRanks(bytes, cut, got));
      QVERIFY(got.empty());
    }
    const PackReference ref{987654321012ULL, 70000, -5, 16383};
    const std::string written = packReference(ref);
    const auto read = readReference(reinterpret_cast<const unsigned char*>(written.data()), written.size());
    QVERIFY(read && read->serial == ref.serial && read->rank == ref.rank && read->firstStep == ref.firstStep &&
            read->offset == ref.offset);
    QVERIFY(!packSerial(reinterpret_cast<const unsigned char*>(written.data()), written.size()));
    QVERIFY_THROWS_EXCEPTION(ptw::Error,
                             readReference(reinterpret_cast<const unsigned char*>(written.data()), written.size() - 1));
  }

  // A rank's row that refers to a pack no longer there is an error naming the rank and the
  // pack's row, not records of another rank.
  void aReferenceToAMissingPackIsAnError() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    std::vector<Record> batch;
    for (int rank = 0; rank < 4; ++rank)
      for (std::int64_t s = 1; s <= 10; ++s) batch.push_back(stepRecord(rank, s));
    store.append(id, 0, batch);
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    Sql sql(store.path());
    QCOMPARE(sql.count("SELECT count(*) FROM step_chunks WHERE codec = " + std::to_string(kPackCodec)),
             std::int64_t(4));
    sql.exec("DELETE FROM step_chunks WHERE rank = 0");
    RunStore again(dir.path().toStdString());
    try {
      again.series(id, 2, "loss", 1, 10);
      QFAIL("read a rank whose pack is gone");
    } catch (const ptw::Error& e) {
      QVERIFY2(QString(e.what()).contains("step chunk of rank 2 refers to a pack in the row of rank 0 at step 1"),
               e.what());
    }
  }

  // A packing transaction that would leave fewer than half its records for the last one
  // takes them too, so that a rank's records are not split into a chunk of a few records
  // more; every record is still read back to the bit.
  void theLastShortStretchIsPackedWithTheOneBefore_data() {
    QTest::addColumn<std::int64_t>("packRecords");
    QTest::addColumn<std::int64_t>("chunksARank");
    QTest::newRow("all in one") << std::int64_t(1600) << std::int64_t(1);
    QTest::newRow("400 left of 1200") << std::int64_t(1200) << std::int64_t(1);
    QTest::newRow("600 left of 1000") << std::int64_t(1000) << std::int64_t(2);
    QTest::newRow("400 left of 600, 600") << std::int64_t(600) << std::int64_t(3);
  }
  void theLastShortStretchIsPackedWithTheOneBefore() {
    QFETCH(std::int64_t, packRecords);
    QFETCH(std::int64_t, chunksARank);
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString(), RunStoreOptions().setPackRecords(packRecords));
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    const int ranks = 8;
    const std::int64_t steps = 200;
    for (std::int64_t step = 1; step <= steps; step += 4) {  // blocks of 4 records a rank
      std::vector<Record> batch;
      for (int rank = 0; rank < ranks; ++rank)
        for (std::int64_t s = step; s < step + 4; ++s) batch.push_back(stepRecord(rank, s));
      store.append(id, 0, batch);
      store.flush();
    }
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    Sql sql(store.path());
    QCOMPARE(sql.count(kChunked), std::int64_t(ranks) * steps);
    QCOMPARE(sql.count("SELECT count(*) FROM step_chunks"), chunksARank * ranks);
    const auto all = store.steps(id);
    QCOMPARE(all.size(), std::size_t(ranks) * steps);
    for (std::size_t i = 0; i < all.size(); ++i)
      QVERIFY(sameBits(all[i], stepRecord(static_cast<int>(i / steps), std::int64_t(i % steps) + 1).step));
  }

  // A new store has no tables of the earlier forms (each would take a page); a store that
  // has them is still converted (aStoreOfEachEarlierFormIsConvertedWhenOpened).
  void aNewStoreHasNoTablesOfEarlierForms() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    store.append(id, 0, {stepRecord(0, 1), stepRecord(0, 2)});
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    Sql sql(store.path());
    QCOMPARE(sql.count("SELECT count(*) FROM sqlite_schema WHERE name IN ('steps', 'steps_by_run', 'step_blocks', "
                       "'step_blocks_by_run')"),
             std::int64_t(0));
    QCOMPARE(sql.count("SELECT count(*) FROM sqlite_schema WHERE name IN ('step_chunks', 'step_chunks_by_run')"),
             std::int64_t(2));
    RunStore again(dir.path().toStdString());
    QCOMPARE(again.steps(id).size(), std::size_t(2));
  }

  // The store's cost per record, on records like the default profile's (2 ranks, timings of
  // whole nanoseconds, a float loss, a constant rate, samples_per_s from the step's time),
  // stays under kStoredRecordBytes: what the projection before a run counts on.
  void aRealisticRunCostsFewBytesARecord() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    const std::int64_t steps = 50000;
    std::uint64_t seed = 7;
    auto noise = [&](int range) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<std::int64_t>((seed >> 33) % static_cast<std::uint64_t>(range));
    };
    for (std::int64_t at = 1; at <= steps; at += 8000) {  // a commit's worth at a time, as a run's ranks write
      std::vector<Record> batch;
      for (std::int64_t step = at; step < std::min(at + 8000, steps + 1); ++step)
        for (int rank = 0; rank < 2; ++rank) {
          Record r;
          StepRecord& s = r.step;
          s.rank = rank, s.step = step, s.epoch = (step - 1) / 7;
          const std::int64_t data = 1500 + noise(400), compute = 9000 + noise(3000), comm = 4000 + noise(6000),
                             opt = 2000 + noise(300);
          const std::int64_t total = data + compute + comm + opt + noise(200);
          s.stepMs = static_cast<double>(total) / 1e6;
          s.dataMs = static_cast<double>(data) / 1e6;
          s.computeMs = static_cast<double>(compute) / 1e6;
          s.commMs = static_cast<double>(comm) / 1e6;
          s.optMs = static_cast<double>(opt) / 1e6;
          s.samplesPerS = 16 * 1000.0 / s.stepMs;
          s.loss = static_cast<float>(0.5 / (1.0 + 1e-4 * static_cast<double>(step)) +
                                      1e-3 * static_cast<double>(noise(1000)));
          s.lr = 0.01;
          s.memBytes = 150'000'000 + 4096 * (step / 4000);
          batch.push_back(r);
        }
      store.append(id, 0, batch);
      store.flush();
    }
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    Sql sql(store.path());
    const std::int64_t records = sql.count(kChunked);
    QCOMPARE(records, 2 * steps);
    const double bytes = static_cast<double>(sql.count("SELECT sum(length(records)) FROM step_chunks"));
    qInfo("%.2f bytes a record", bytes / static_cast<double>(records));
    QVERIFY2(bytes / static_cast<double>(records) <= kStoredRecordBytes, qPrintable(QString::number(bytes / records)));
  }

  // run.keep_every past run.keep_all_until: the store keeps the records of those steps only.
  void keepEveryNthRecordPastAStep() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    Profile p = defaultProfile();
    p.run.keepEvery = 10;
    p.run.keepAllUntil = 25;
    const auto id = store.beginRun(dir.path().toStdString(), p);
    std::vector<Record> batch;
    for (std::int64_t s = 1; s <= 100; ++s) batch.push_back(stepRecord(0, s));
    store.append(id, 0, batch);
    store.endRun(id, "finished", "", std::nan(""), 1.0, 1);
    std::vector<std::int64_t> kept;
    for (const auto& r : store.steps(id)) kept.push_back(r.step);
    std::vector<std::int64_t> expected;
    for (std::int64_t s = 1; s <= 25; ++s) expected.push_back(s);
    for (std::int64_t s = 30; s <= 100; s += 10) expected.push_back(s);
    QCOMPARE(kept, expected);
    QCOMPARE(store.run(id).finalLoss, stepRecord(0, 100).step.loss);
  }

  // The projection before a run: a run whose records would not fit in the free space is
  // warned of, with the figures and what to do; one that fits, or asks for fewer records, is not.
  void aRunThatWouldNotFitIsWarnedOf() {
    Profile p = defaultProfile();
    p.hyper.maxSteps = 1'000'000;  // 2 ranks: 2e6 records, 224 MB at the end of the run, 32 MB stored
    const std::string warning = storeSpaceWarning(p, "/runs", 100'000'000);
    QVERIFY2(QString::fromStdString(warning).contains("this run's 2000000 step records would take 0.2 GB of disk just "
                                                      "before it ends (0.0 GB once stored), and /runs has 0.1 GB free"),
             warning.c_str());
    QVERIFY2(QString::fromStdString(warning).contains("run.keep_every"), warning.c_str());
    QCOMPARE(storeSpaceWarning(p, "/runs", 300'000'000), std::string());
    p.run.keepEvery = 4;  // 2 x 250,000 records: 56 MB
    QCOMPARE(storeSpaceWarning(p, "/runs", 100'000'000), std::string());
    p.run.keepAllUntil = 900'000;  // 2 x (900,000 + 25,000)
    QVERIFY(!storeSpaceWarning(p, "/runs", 100'000'000).empty());
    p.hyper.maxSteps = 0;  // epochs: 100 samples in batches of 16, 7 steps an epoch at most
    p.hyper.epochs = 10;
    p.run = RunOptions();
    QCOMPARE(storeSpaceWarning(p, "/runs", 2 * 70 * 112), std::string());
    QVERIFY(!storeSpaceWarning(p, "/runs", 2 * 70 * 112 - 1).empty());
    // The free space of the runs folder itself (a folder not made yet: the nearest above it).
    QTemporaryDir dir;
    QCOMPARE(storeSpaceWarning(p, dir.path().toStdString() + "/not/yet"), std::string());
  }

  // A step file an earlier build wrote (an interrupted run, found by this build): its headers
  // leave the fields 0 and its checksum is the sum of the records' words with rotations in
  // four lanes. Its records are read and packed like this build's.
  void aStepFileOfAnEarlierBuildIsRead() {
    QTemporaryDir dir;
    RunStore store(dir.path().toStdString());
    const auto id = store.beginRun(dir.path().toStdString(), defaultProfile());
    store.append(id, 0, {stepRecord(1, 41), stepRecord(1, 42), stepRecord(1, 43)});
    store.flush();
    const std::string path = stepFile(dir, id);
    const auto written = fileBytes(path);
    QCOMPARE(written.size(), std::size_t(40 + 3 * kBlockRecordBytes));
    // The first layout's records hold the first 11 fields.
    auto bytes = decltype(written)(written.begin(), written.begin() + 40);
    for (int r = 0; r < 3; ++r) {
      const auto record = written.begin() + 40 + static_cast<std::ptrdiff_t>(r * kBlockRecordBytes);
      bytes.insert(bytes.end(), record, record + 88);
    }
    auto mix = [](std::uint64_t l, std::uint64_t w) { return ((l << 7) | (l >> 57)) + w; };
    std::uint64_t lane[4] = {3 * 88, 1, 2, 3};  // 33 words: 8 fours, then 1 left for lane 0
    for (int w = 0; w < 33; ++w)
      lane[w < 32 ? w % 4 : 0] = mix(lane[w < 32 ? w % 4 : 0], little(bytes.data() + 40 + 8 * w, 8));
    const std::uint64_t sum = mix(mix(mix(lane[0], lane[1]), lane[2]), lane[3]);
    for (int i = 0; i < 8; ++i) bytes[32 + i] = static_cast<unsigned char>(sum >> (8 * i));
    bytes[6] = bytes[7] = 0;
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    RunStore reader(dir.path().toStdString());
    QCOMPARE(reader.stepCount(id), std::int64_t(3));
    store.endRun(id, "finished", "", 0.5, 1.0, 1);
    const auto all = store.steps(id);
    QCOMPARE(all.size(), std::size_t(3));
    for (std::size_t i = 0; i < all.size(); ++i) QVERIFY(all[i] == stepRecord(1, 41 + std::int64_t(i)).step);
    // The same bytes with one of them changed are passed over, by either checksum.
    QVERIFY(!blockIsWhole(bytes.data() + 40, 3 * 88, sum + 1));
    QVERIFY(blockIsWhole(bytes.data() + 40, 3 * 88, sum));
  }
};

QTEST_GUILESS_MAIN(TestRunStore)
#include "test_run_store.moc"
