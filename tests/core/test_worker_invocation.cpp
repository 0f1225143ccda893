// SPDX-License-Identifier: GPL-3.0-or-later
// The worker's interface (common/worker_invocation.h): every flag written and read back to the
// same invocation, bad command lines refused with the flag named, the exit codes the protocol
// lists, and `--devices` lines read back to the devices written.
#include <QtTest>

#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/worker_invocation.h"

using namespace ptw::core;

using Setter = std::function<void(WorkerInvocation&)>;
using Args = std::vector<std::string>;
Q_DECLARE_METATYPE(Setter)
Q_DECLARE_METATYPE(Args)

namespace {

Args argv(std::initializer_list<std::string> flags) {
  Args a{"ptw-worker"};
  a.insert(a.end(), flags);
  return a;
}

// The message parse() or checkComplete() throws for `a`, or "" when it throws nothing.
std::string errorOf(const Args& a, bool complete = false) {
  try {
    const WorkerInvocation w = WorkerInvocation::parse(a);
    if (complete) w.checkComplete();
  } catch (const ptw::Error& e) {
    return e.what();
  }
  return "";
}

QString joined(const Args& a) {
  QStringList l;
  for (const auto& s : a) l << QString::fromStdString(s);
  return l.join(' ');
}

// Every flag the worker takes, each set away from its default.
void setEveryFlag(WorkerInvocation& w) {
  w.preflight = w.devices = w.blas = true;
  w.checkPort = 0;
  w.profile = "/runs/a b/profile.json";
  w.samples = "/tmp/samples.png";
  w.rank = 3;
  w.world = 4;
  w.port = 29500;
  w.out = "/runs/a b";
  w.store = "/runs/a b/ptw-store-29500";
  w.steps = "/runs/steps.ptwsteps";
  w.stepsLimit = 1LL << 40;
  w.attempt = 2;
  w.records = 3;
  w.remote = "node2";
  w.master = "node1";
  w.interface = "ib0";
  w.fault = {"kill-at-step", 1, 12};
  w.metricsPhases = "1000:/tmp/phases";
  w.autogradOnly = true;
  w.syntheticRate = 2.5;
}

}  // namespace

class TestWorkerInvocation : public QObject {
  Q_OBJECT

 private slots:
  // Each flag is written as its row says, and read back to the invocation it was written from.
  void everyFlagIsWrittenAndReadBack_data() {
    QTest::addColumn<Setter>("set");
    QTest::addColumn<Args>("expected");
    QTest::newRow("nothing set") << Setter([](WorkerInvocation&) {}) << argv({});
    QTest::newRow("--profile") << Setter([](WorkerInvocation& w) { w.profile = "/runs/a b/profile.json"; })
                               << argv({"--profile", "/runs/a b/profile.json"});
    QTest::newRow("--rank") << Setter([](WorkerInvocation& w) { w.rank = 0; }) << argv({"--rank", "0"});
    QTest::newRow("--world") << Setter([](WorkerInvocation& w) { w.world = 8; }) << argv({"--world", "8"});
    QTest::newRow("--port") << Setter([](WorkerInvocation& w) { w.port = 29500; }) << argv({"--port", "29500"});
    QTest::newRow("--out") << Setter([](WorkerInvocation& w) { w.out = "/runs/r"; }) << argv({"--out", "/runs/r"});
    QTest::newRow("--store") << Setter([](WorkerInvocation& w) { w.store = "/tmp/s"; }) << argv({"--store", "/tmp/s"});
    QTest::newRow("--steps") << Setter([](WorkerInvocation& w) { w.steps = "/r/st"; }) << argv({"--steps", "/r/st"});
    QTest::newRow("--steps-limit, past 32 bits")
        << Setter([](WorkerInvocation& w) { w.stepsLimit = 1LL << 40; }) << argv({"--steps-limit", "1099511627776"});
    QTest::newRow("--attempt") << Setter([](WorkerInvocation& w) { w.attempt = 2; }) << argv({"--attempt", "2"});
    QTest::newRow("--records") << Setter([](WorkerInvocation& w) { w.records = 3; }) << argv({"--records", "3"});
    QTest::newRow("--master") << Setter([](WorkerInvocation& w) { w.master = "10.0.0.1"; })
                              << argv({"--master", "10.0.0.1"});
    QTest::newRow("--master, the default") << Setter([](WorkerInvocation& w) { w.master = "127.0.0.1"; }) << argv({});
    QTest::newRow("--remote, with the default --master") << Setter([](WorkerInvocation& w) { w.remote = "node2"; })
                                                         << argv({"--remote", "node2", "--master", "127.0.0.1"});
    QTest::newRow("--interface") << Setter([](WorkerInvocation& w) { w.interface = "ib0"; })
                                 << argv({"--interface", "ib0"});
    QTest::newRow("--preflight --samples")
        << Setter([](WorkerInvocation& w) { w.preflight = true, w.profile = "p.json", w.samples = "s.png"; })
        << argv({"--preflight", "--profile", "p.json", "--samples", "s.png"});
    QTest::newRow("--devices") << Setter([](WorkerInvocation& w) { w.devices = true; }) << argv({"--devices"});
    QTest::newRow("--blas") << Setter([](WorkerInvocation& w) { w.blas = true; }) << argv({"--blas"});
    QTest::newRow("--check-port, any port")
        << Setter([](WorkerInvocation& w) { w.checkPort = 0; }) << argv({"--check-port", "0"});
    QTest::newRow("--help") << Setter([](WorkerInvocation& w) { w.help = true; }) << argv({"--help"});
    QTest::newRow("--version") << Setter([](WorkerInvocation& w) { w.version = true; }) << argv({"--version"});
    QTest::newRow("--fault at a step") << Setter([](WorkerInvocation& w) {
      w.fault = {"kill-at-step", 1, 12};
    }) << argv({"--fault", "kill-at-step:1:12"});
    QTest::newRow("--fault at start") << Setter([](WorkerInvocation& w) {
      w.fault = {"hang-at-start", 3, -1};
    }) << argv({"--fault", "hang-at-start:3"});
    QTest::newRow("--fault slowing a rank") << Setter([](WorkerInvocation& w) {
      w.fault = {"slow-at-step", 2, 100, 1.5};
    }) << argv({"--fault", "slow-at-step:2:100:1.5"});
    QTest::newRow("--metrics-phases") << Setter([](WorkerInvocation& w) { w.metricsPhases = "1000:/tmp/p"; })
                                      << argv({"--metrics-phases", "1000:/tmp/p"});
    QTest::newRow("--synthetic-rate") << Setter([](WorkerInvocation& w) { w.syntheticRate = 2.5; })
                                      << argv({"--synthetic-rate", "2.5"});
    QTest::newRow("--gradients") << Setter([](WorkerInvocation& w) { w.autogradOnly = true; })
                                 << argv({"--gradients", "autograd"});
    // The probes first, then the launcher's flags, the hidden ones, and the starter's last.
    QTest::newRow("every flag but --help and --version") << Setter(setEveryFlag)
                                                         << argv({"--preflight",
                                                                  "--devices",
                                                                  "--blas",
                                                                  "--check-port",
                                                                  "0",
                                                                  "--profile",
                                                                  "/runs/a b/profile.json",
                                                                  "--samples",
                                                                  "/tmp/samples.png",
                                                                  "--rank",
                                                                  "3",
                                                                  "--world",
                                                                  "4",
                                                                  "--port",
                                                                  "29500",
                                                                  "--out",
                                                                  "/runs/a b",
                                                                  "--store",
                                                                  "/runs/a b/ptw-store-29500",
                                                                  "--steps",
                                                                  "/runs/steps.ptwsteps",
                                                                  "--steps-limit",
                                                                  "1099511627776",
                                                                  "--attempt",
                                                                  "2",
                                                                  "--fault",
                                                                  "kill-at-step:1:12",
                                                                  "--metrics-phases",
                                                                  "1000:/tmp/phases",
                                                                  "--synthetic-rate",
                                                                  "2.5",
                                                                  "--gradients",
                                                                  "autograd",
                                                                  "--records",
                                                                  "3",
                                                                  "--remote",
                                                                  "node2",
                                                                  "--master",
                                                                  "node1",
                                                                  "--interface",
                                                                  "ib0"});
  }
  void everyFlagIsWrittenAndReadBack() {
    QFETCH(Setter, set);
    QFETCH(Args, expected);
    WorkerInvocation w("ptw-worker");
    set(w);
    const Args written = w.toArgs();
    QCOMPARE(joined(written), joined(expected));
    QCOMPARE(Args(written.begin() + 1, written.end()), w.flags());
    const WorkerInvocation read = WorkerInvocation::parse(written);
    QVERIFY2(read == w, qPrintable(joined(read.toArgs())));
  }

  // A value after '=' reads as one after a space; the last of a flag given twice wins; --help
  // ends the reading, so what follows it is never refused.
  void flagsReadAsTheWorkerAlwaysHas() {
    QCOMPARE(WorkerInvocation::parse(argv({"--rank=2", "--world", "4"})).rank, 2);
    QCOMPARE(WorkerInvocation::parse(argv({"--rank=2", "--rank", "5"})).rank, 5);
    QCOMPARE(WorkerInvocation::parse(argv({"--out=a=b"})).out, std::string("a=b"));
    QCOMPARE(WorkerInvocation::parse(argv({"--gradients=autograd"})).autogradOnly, true);
    const WorkerInvocation help = WorkerInvocation::parse(argv({"--rank", "1", "-h", "--bogus"}));
    QVERIFY(help.help);
    QCOMPARE(help.rank, 1);
    QVERIFY(WorkerInvocation::parse(argv({"--version", "--rank"})).version);
    QCOMPARE(WorkerInvocation::parse(Args{"/opt/ptw/ptw-worker"}).program, std::string("/opt/ptw/ptw-worker"));
  }

  // Flags passed on unread come after the launcher's and before the starter's, which so win.
  void passedOnFlagsComeBeforeTheStartersOwn() {
    WorkerInvocation w("w");
    w.rank = 0;
    w.records = 3;
    w.passOn = {"--fault=throw-at-start:1", "--records", "5"};
    QCOMPARE(joined(w.toArgs()), QStringLiteral("w --rank 0 --fault=throw-at-start:1 --records 5 --records 3"));
    const WorkerInvocation read = WorkerInvocation::parse(w.toArgs());
    QCOMPARE(read.fault, (InjectedFault{"throw-at-start", 1, -1}));
    QCOMPARE(read.records, 3);
    QVERIFY(read.passOn.empty());
  }

  // A bad command line is refused with the flag named and what it expected.
  void badFlagsAreNamed_data() {
    QTest::addColumn<Args>("args");
    QTest::addColumn<QString>("expected");
    const QString fault =
        "--fault: expected throw-at-start:RANK, hang-at-start:RANK, kill-at-step:RANK:STEP, hang-at-step:RANK:STEP "
        "or slow-at-step:RANK:STEP:FACTOR (FACTOR > 1)";
    QTest::newRow("unknown flag") << argv({"--bogus", "1"}) << "unknown argument --bogus (see --help)";
    QTest::newRow("unknown flag with =") << argv({"--bogus=1"}) << "unknown argument --bogus (see --help)";
    QTest::newRow("no flag at all") << argv({"profile.json", "x"}) << "unknown argument profile.json (see --help)";
    QTest::newRow("missing value") << argv({"--rank", "0", "--profile"}) << "--profile: missing value";
    QTest::newRow("bad number") << argv({"--rank", "two"}) << "--rank: expected an integer, got \"two\"";
    QTest::newRow("bad number after =") << argv({"--port=80x"}) << "--port: expected an integer, got \"80x\"";
    QTest::newRow("number past int") << argv({"--world", "99999999999"})
                                     << "--world: expected an integer, got \"99999999999\"";
    QTest::newRow("bad byte count") << argv({"--steps-limit", "1e9"})
                                    << "--steps-limit: expected an integer, got \"1e9\"";
    QTest::newRow("bad descriptor") << argv({"--records", ""}) << "--records: expected an integer, got \"\"";
    QTest::newRow("no port") << argv({"--check-port", "70000"}) << "--check-port: expected a port, 0-65535, got 70000";
    QTest::newRow("bad fault") << argv({"--fault", "explode:0"}) << fault + ", got \"explode:0\"";
    QTest::newRow("fault without its step") << argv({"--fault=kill-at-step:0"}) << fault + ", got \"kill-at-step:0\"";
    QTest::newRow("slowing without a factor")
        << argv({"--fault=slow-at-step:1:5"}) << fault + ", got \"slow-at-step:1:5\"";
    QTest::newRow("slowing by a factor of 1")
        << argv({"--fault=slow-at-step:1:5:1"}) << fault + ", got \"slow-at-step:1:5:1\"";
    QTest::newRow("slowing by no number")
        << argv({"--fault=slow-at-step:1:5:2x"}) << fault + ", got \"slow-at-step:1:5:2x\"";
    QTest::newRow("a step too many") << argv({"--fault=hang-at-step:1:5:2"}) << fault + ", got \"hang-at-step:1:5:2\"";
    QTest::newRow("no rate")
        << argv({"--synthetic-rate", "0"})
        << "--synthetic-rate: expected steps a second of each rank, > 0 and at most 100000, got \"0\"";
    QTest::newRow("bad gradients") << argv({"--gradients", "byhand"})
                                   << "--gradients: expected \"autograd\", got \"byhand\"";
  }
  void badFlagsAreNamed() {
    QFETCH(Args, args);
    QFETCH(QString, expected);
    QCOMPARE(QString::fromStdString(errorOf(args)), expected);
  }

  // What each form of the command needs, named by its flag; the probes need no profile.
  void incompleteCommandLinesAreNamed_data() {
    QTest::addColumn<Args>("args");
    QTest::addColumn<QString>("expected");
    QTest::newRow("a rank") << argv({"--profile", "p", "--rank", "1", "--world", "2"}) << "";
    QTest::newRow("no profile") << argv({"--rank", "0", "--world", "1"}) << "--profile is required";
    QTest::newRow("a rank past the world")
        << argv({"--profile", "p", "--rank", "2", "--world", "2"}) << "--rank: expected 0..1, got 2";
    QTest::newRow("no world") << argv({"--profile", "p", "--rank", "0"}) << "--world: expected >= 1, got -1";
    QTest::newRow("preflight") << argv({"--preflight", "--profile", "p"}) << "";
    QTest::newRow("preflight, no profile") << argv({"--preflight"}) << "--profile is required";
    QTest::newRow("devices") << argv({"--devices"}) << "";
    QTest::newRow("blas") << argv({"--blas"}) << "";
    QTest::newRow("check-port") << argv({"--check-port", "0"}) << "";
  }
  void incompleteCommandLinesAreNamed() {
    QFETCH(Args, args);
    QFETCH(QString, expected);
    QCOMPARE(QString::fromStdString(errorOf(args, true)), expected);
  }

  // The codes docs/protocol.md lists, which the launcher reads back from the exit status.
  void exitCodesAreTheProtocols() {
    QCOMPARE(exitCode(WorkerExit::Finished), 0);
    QCOMPARE(exitCode(WorkerExit::Failed), 1);
    QCOMPARE(exitCode(WorkerExit::BadInput), 2);
    QCOMPARE(exitCode(WorkerExit::StoppedFromOutside), 5);
    QCOMPARE(exitCode(WorkerExit::CannotStoreMetrics), 6);
    QCOMPARE(kWorkerStoppedFromOutside, 5);
    QCOMPARE(kWorkerCannotStoreMetrics, 6);
  }

  // A device's line is what the worker has always printed, and reads back to the device;
  // what is no JSON object (an empty line, a stray message) is passed over.
  void deviceLinesReadBackToTheDevices() {
    DeviceInfo cpu{"cpu", 0, "CPU", 16, 137438953472LL, 0, "Haswell"};
    DeviceInfo gpu{"cuda", 1, "NVIDIA \"H200\"", 0, 150754820096LL, 1LL << 30, ""};
    QCOMPARE(QString::fromStdString(deviceLine(cpu)),
             QStringLiteral("{\"kind\": \"cpu\", \"index\": 0, \"name\": \"CPU\", \"cores\": 16, "
                            "\"memory_bytes\": 137438953472, \"openblas_core\": \"Haswell\"}\n"));
    QCOMPARE(QString::fromStdString(deviceLine(gpu)),
             QStringLiteral("{\"kind\": \"cuda\", \"index\": 1, \"name\": \"NVIDIA \\\"H200\\\"\", "
                            "\"memory_bytes\": 150754820096, \"used_bytes\": 1073741824}\n"));
    const auto read = parseDevices(deviceLine(cpu) + "\nptw-worker: cuda:0: no device\n[1, 2]\n" + deviceLine(gpu));
    QCOMPARE(read.size(), std::size_t(2));
    for (std::size_t i = 0; i < 2; ++i) {
      const DeviceInfo& want = i == 0 ? cpu : gpu;
      QCOMPARE(read[i].kind, want.kind);
      QCOMPARE(read[i].index, want.index);
      QCOMPARE(read[i].name, want.name);
      QCOMPARE(read[i].cores, want.cores);
      QCOMPARE(read[i].memoryBytes, want.memoryBytes);
      QCOMPARE(read[i].usedBytes, want.usedBytes);
      QCOMPARE(read[i].openblasCore, want.openblasCore);
    }
    QVERIFY(anyCudaDevice(read));
    QVERIFY(!anyCudaDevice(parseDevices(deviceLine(cpu))));
    QVERIFY(parseDevices("").empty());
    QCOMPARE(parseDevices("{\"kind\": 7, \"index\": \"x\"}").at(0).kind, std::string());  // wrong types: defaults
  }
};

QTEST_GUILESS_MAIN(TestWorkerInvocation)
#include "test_worker_invocation.moc"
