// SPDX-License-Identifier: GPL-3.0-or-later
// A rank's place from the variables torchrun, SLURM and Open MPI set: each launcher's
// mapping, which one wins when several are present, every error naming its variable, and
// SLURM hostlist expansion.
#include <QtTest>

#include <map>
#include <string>

#include "common/error.h"
#include "common/launcher_env.h"

using namespace ptw::core;

namespace {

// "K=V K=V" -> an environment.
std::map<std::string, std::string> envOf(const QString& spec) {
  std::map<std::string, std::string> env;
  for (const QString& kv : spec.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
    const auto eq = kv.indexOf(QLatin1Char('='));
    env[kv.left(eq).toStdString()] = kv.mid(eq + 1).toStdString();
  }
  return env;
}

// "rank/world local/localWorld addr:port launcher" of a place.
QString describe(const RankPlace& p) {
  return QStringLiteral("%1/%2 %3/%4 %5:%6 %7")
      .arg(p.rank)
      .arg(p.world)
      .arg(p.localRank)
      .arg(p.localWorld)
      .arg(QString::fromStdString(p.masterAddr))
      .arg(p.masterPort)
      .arg(QString::fromLatin1(launcherName(p.launcher)));
}

const char* kTorchrun = "RANK=3 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.0.0.5 MASTER_PORT=29400";
const char* kSlurm = "SLURM_PROCID=5 SLURM_NTASKS=8 SLURM_LOCALID=1 SLURM_JOB_NODELIST=gpu[07-10],login2";
const char* kMpi =
    "OMPI_COMM_WORLD_RANK=6 OMPI_COMM_WORLD_SIZE=8 OMPI_COMM_WORLD_LOCAL_RANK=2 "
    "OMPI_COMM_WORLD_LOCAL_SIZE=4 MASTER_ADDR=head MASTER_PORT=31000";

}  // namespace

class TestLauncherEnv : public QObject {
  Q_OBJECT
 private slots:
  void mapsEachLauncher_data() {
    QTest::addColumn<QString>("env");
    QTest::addColumn<QString>("place");
    const QString t = QString::fromLatin1(kTorchrun), s = QString::fromLatin1(kSlurm), m = QString::fromLatin1(kMpi);
    QTest::newRow("torchrun") << t << "3/8 1/2 10.0.0.5:29400 torchrun";
    QTest::newRow("env:// without the local variables: one host")
        << "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=5000"
        << "1/2 1/2 127.0.0.1:5000 torchrun";
    QTest::newRow("LOCAL_RANK without LOCAL_WORLD_SIZE")
        << "RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 MASTER_ADDR=h MASTER_PORT=1"
        << "5/8 1/0 h:1 torchrun";
    QTest::newRow("slurm: master from the node list, default port") << s << "5/8 1/0 gpu07:29500 SLURM";
    QTest::newRow("slurm: MASTER_ADDR and MASTER_PORT win") << s + " MASTER_ADDR=10.1.1.1 MASTER_PORT=4000"
                                                            << "5/8 1/0 10.1.1.1:4000 SLURM";
    QTest::newRow("slurm: one node, all local")
        << "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 SLURM_JOB_NUM_NODES=1 SLURM_JOB_NODELIST=n1"
        << "1/2 1/2 n1:29500 SLURM";
    QTest::newRow("slurm: --ntasks-per-node") << s + " SLURM_NTASKS_PER_NODE=2"
                                              << "5/8 1/2 gpu07:29500 SLURM";
    QTest::newRow("open mpi") << m << "6/8 2/4 head:31000 Open MPI";
    QTest::newRow("open mpi on one host needs no master")
        << "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2"
        << "1/2 1/2 127.0.0.1:29500 Open MPI";
    // Note [Launcher precedence]
    QTest::newRow("torchrun inside srun: torchrun's") << s + " " + t << "3/8 1/2 10.0.0.5:29400 torchrun";
    QTest::newRow("torchrun inside mpirun: torchrun's") << m + " RANK=3 WORLD_SIZE=8 LOCAL_RANK=1"
                                                        << "3/8 1/0 head:31000 torchrun";
    QTest::newRow("mpirun inside sbatch: Open MPI's") << s + " " + m << "6/8 2/4 head:31000 Open MPI";
  }
  void mapsEachLauncher() {
    QFETCH(QString, env);
    QFETCH(QString, place);
    const auto p = rankFromEnvironment(envOf(env));
    QVERIFY(p);
    QCOMPARE(describe(*p), place);
  }

  void noLauncherIsNoPlace() {
    QVERIFY(!rankFromEnvironment({}));
    QVERIFY(!rankFromEnvironment(envOf("LOCAL_RANK=0 MASTER_ADDR=h MASTER_PORT=1 SLURM_JOB_NODELIST=n1 PATH=/bin")));
  }

  void errorsNameTheVariable_data() {
    QTest::addColumn<QString>("env");
    QTest::addColumn<QString>("error");
    const QString addr = QStringLiteral(" MASTER_ADDR=h MASTER_PORT=1");
    QTest::newRow("RANK not a number") << "RANK=x WORLD_SIZE=2" + addr << "RANK: expected an integer >= 0, got \"x\"";
    QTest::newRow("RANK negative") << "RANK=-1 WORLD_SIZE=2" + addr << "RANK: expected an integer >= 0, got \"-1\"";
    QTest::newRow("RANK with a tail") << "RANK=1a WORLD_SIZE=2" + addr << "RANK: expected an integer >= 0, got \"1a\"";
    QTest::newRow("RANK empty") << "RANK= WORLD_SIZE=2" + addr << "RANK: expected an integer >= 0, got \"\"";
    QTest::newRow("WORLD_SIZE 0") << "RANK=0 WORLD_SIZE=0" + addr << "WORLD_SIZE: expected an integer >= 1, got \"0\"";
    QTest::newRow("WORLD_SIZE too large")
        << "RANK=0 WORLD_SIZE=99999999999" + addr << "WORLD_SIZE: expected an integer >= 1, got \"99999999999\"";
    QTest::newRow("WORLD_SIZE missing")
        << "RANK=0" + addr
        << "WORLD_SIZE: not set, but torchrun's other variables are (a rank needs its rank and the world's size; set "
           "it, or start ptw-worker with --rank and --world)";
    QTest::newRow("RANK missing") << "WORLD_SIZE=2" + addr << "RANK: not set, but torchrun's other variables are";
    QTest::newRow("RANK >= WORLD_SIZE") << "RANK=2 WORLD_SIZE=2" + addr
                                        << "RANK: 2 is not below WORLD_SIZE 2 (expected 0..1)";
    QTest::newRow("LOCAL_RANK >= LOCAL_WORLD_SIZE") << "RANK=3 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2" + addr
                                                    << "LOCAL_RANK: 2 is not below LOCAL_WORLD_SIZE 2 (expected 0..1)";
    QTest::newRow("LOCAL_WORLD_SIZE > WORLD_SIZE") << "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=4" + addr
                                                   << "LOCAL_WORLD_SIZE: 4 is more than WORLD_SIZE 2";
    QTest::newRow("LOCAL_RANK > RANK") << "RANK=0 WORLD_SIZE=4 LOCAL_RANK=1" + addr
                                       << "LOCAL_RANK: 1 is more than RANK 0";
    QTest::newRow("LOCAL_RANK not a number")
        << "RANK=0 WORLD_SIZE=4 LOCAL_RANK=one" + addr << "LOCAL_RANK: expected an integer >= 0, got \"one\"";
    QTest::newRow("torchrun without MASTER_ADDR")
        << "RANK=0 WORLD_SIZE=1 MASTER_PORT=1"
        << "MASTER_ADDR: not set, but torchrun sets it; start ptw-worker from torchrun or set it";
    QTest::newRow("torchrun without MASTER_PORT")
        << "RANK=0 WORLD_SIZE=1 MASTER_ADDR=h"
        << "MASTER_PORT: not set, but torchrun sets it; start ptw-worker from torchrun or set it";
    QTest::newRow("MASTER_PORT 0") << "RANK=0 WORLD_SIZE=1 MASTER_ADDR=h MASTER_PORT=0"
                                   << "MASTER_PORT: expected an integer >= 1, got \"0\"";
    QTest::newRow("MASTER_PORT above 65535") << "RANK=0 WORLD_SIZE=1 MASTER_ADDR=h MASTER_PORT=70000"
                                             << "MASTER_PORT: expected a port 1..65535, got \"70000\"";
    QTest::newRow("MASTER_ADDR empty") << "RANK=0 WORLD_SIZE=1 MASTER_ADDR= MASTER_PORT=1"
                                       << "MASTER_ADDR: expected a host name or address, got \"\"";
    QTest::newRow("SLURM_NTASKS not a number") << "SLURM_PROCID=0 SLURM_NTASKS=x SLURM_LOCALID=0 SLURM_JOB_NODELIST=n1"
                                               << "SLURM_NTASKS: expected an integer >= 1, got \"x\"";
    QTest::newRow("SLURM_NTASKS missing") << "SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_JOB_NODELIST=n1"
                                          << "SLURM_NTASKS: not set, but SLURM's other variables are";
    QTest::newRow("SLURM_LOCALID missing") << "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_JOB_NODELIST=n1"
                                           << "SLURM_LOCALID: not set, but SLURM's other variables are";
    QTest::newRow("SLURM_PROCID >= SLURM_NTASKS")
        << "SLURM_PROCID=4 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_JOB_NODELIST=n1"
        << "SLURM_PROCID: 4 is not below SLURM_NTASKS 4 (expected 0..3)";
    QTest::newRow("SLURM_LOCALID >= SLURM_NTASKS_PER_NODE")
        << "SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_LOCALID=2 SLURM_NTASKS_PER_NODE=2 SLURM_JOB_NODELIST=n1"
        << "SLURM_LOCALID: 2 is not below SLURM_NTASKS_PER_NODE 2 (expected 0..1)";
    QTest::newRow("SLURM without a node list or MASTER_ADDR")
        << "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0"
        << "SLURM_JOB_NODELIST: not set, and neither is MASTER_ADDR; start ptw-worker from srun, or set MASTER_ADDR "
           "to the host of rank 0";
    QTest::newRow("SLURM with a bad node list")
        << "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_JOB_NODELIST=n[1-"
        << "SLURM_JOB_NODELIST: expected a SLURM hostlist such as node[01-04,07],gpu3, got \"n[1-\" (a '[' with no "
           "']')";
    QTest::newRow("SLURM MASTER_PORT bad") << "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_JOB_NODELIST=n1 "
                                              "MASTER_PORT=http"
                                           << "MASTER_PORT: expected an integer >= 1, got \"http\"";
    QTest::newRow("OMPI_COMM_WORLD_SIZE missing")
        << "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0" + addr
        << "OMPI_COMM_WORLD_SIZE: not set, but Open MPI's other variables are";
    QTest::newRow("OMPI_COMM_WORLD_LOCAL_RANK missing")
        << "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2" + addr
        << "OMPI_COMM_WORLD_LOCAL_RANK: not set, but Open MPI's other variables are";
    QTest::newRow("OMPI rank >= size") << "OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0" +
                                              addr
                                       << "OMPI_COMM_WORLD_RANK: 2 is not below OMPI_COMM_WORLD_SIZE 2 (expected 0..1)";
    QTest::newRow("OMPI across hosts without MASTER_ADDR")
        << "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2"
        << "MASTER_ADDR: not set, and Open MPI does not set it; pass the host of rank 0 with mpirun -x "
           "MASTER_ADDR=HOST (and -x MASTER_PORT=PORT, else 29500)";
  }
  void errorsNameTheVariable() {
    QFETCH(QString, env);
    QFETCH(QString, error);
    try {
      rankFromEnvironment(envOf(env));
      QFAIL("no error");
    } catch (const ptw::Error& e) {
      const QString got = QString::fromUtf8(e.what());
      if (!got.startsWith(error)) QFAIL(qPrintable("got: " + got + "\nexpected: " + error));
    }
  }

  void expandsHostlists_data() {
    QTest::addColumn<QString>("list");
    QTest::addColumn<QString>("hosts");
    QTest::newRow("one name") << "n1"
                              << "n1";
    QTest::newRow("plain names") << "alpha,beta.example.org"
                                 << "alpha beta.example.org";
    QTest::newRow("a range") << "n[1-3]"
                             << "n1 n2 n3";
    QTest::newRow("padding kept") << "node[001-010]"
                                  << "node001 node002 node003 node004 node005 node006 node007 node008 node009 node010";
    QTest::newRow("padding to the low bound") << "n[8-10]"
                                              << "n8 n9 n10";
    QTest::newRow("the example") << "node[01-04,07],gpu3"
                                 << "node01 node02 node03 node04 node07 gpu3";
    QTest::newRow("several groups") << "a[1,3],b[2-4]"
                                    << "a1 a3 b2 b3 b4";
    QTest::newRow("facts' example") << "gnode[10,20,25-27]"
                                    << "gnode10 gnode20 gnode25 gnode26 gnode27";
    QTest::newRow("two brackets in one name") << "rack[1-2]-n[3-4]"
                                              << "rack1-n3 rack1-n4 rack2-n3 rack2-n4";
    QTest::newRow("suffix after brackets") << "n[1-2].ib"
                                           << "n1.ib n2.ib";
    QTest::newRow("a single number") << "n[5]"
                                     << "n5";
    QTest::newRow("only brackets") << "[1-2]"
                                   << "1 2";
  }
  void expandsHostlists() {
    QFETCH(QString, list);
    QFETCH(QString, hosts);
    QStringList got;
    for (const auto& h : expandHostlist(list.toStdString())) got << QString::fromStdString(h);
    QCOMPARE(got.join(QLatin1Char(' ')), hosts);
    QCOMPARE(QString::fromStdString(firstHost(list.toStdString())), hosts.section(QLatin1Char(' '), 0, 0));
  }

  void refusesMalformedHostlists_data() {
    QTest::addColumn<QString>("list");
    QTest::addColumn<QString>("why");
    QTest::newRow("empty") << ""
                           << "(empty)";
    QTest::newRow("empty name") << "a,,b"
                                << "(an empty or blank name)";
    QTest::newRow("unclosed") << "n[1-3"
                              << "(a '[' with no ']')";
    QTest::newRow("unopened") << "n1-3]"
                              << "(a ']' with no '[')";
    QTest::newRow("nested") << "n[1[2]]"
                            << "(brackets inside brackets)";
    QTest::newRow("empty brackets") << "n[]"
                                    << "(empty brackets)";
    QTest::newRow("letters") << "n[a-c]"
                             << "(\"a-c\" in brackets is not a number or a range N-M)";
    QTest::newRow("open range") << "n[1-]"
                                << "(\"1-\" in brackets is not a number or a range N-M)";
    QTest::newRow("empty item") << "n[1,,2]"
                                << "(\"\" in brackets is not a number or a range N-M)";
    QTest::newRow("backwards") << "n[5-3]"
                               << "(the range 5-3 runs backwards)";
    QTest::newRow("a bad name after a good one") << "n1,m[2"
                                                 << "(a '[' with no ']')";
  }
  void refusesMalformedHostlists() {
    QFETCH(QString, list);
    QFETCH(QString, why);
    const QString expected =
        "SLURM_JOB_NODELIST: expected a SLURM hostlist such as node[01-04,07],gpu3, got \"" + list + "\" " + why;
    for (int first = 0; first < 2; ++first) {
      try {
        first ? (void)firstHost(list.toStdString()) : (void)expandHostlist(list.toStdString());
        QFAIL("no error");
      } catch (const ptw::Error& e) {
        QCOMPARE(QString::fromUtf8(e.what()), expected);
      }
    }
  }

  void refusesHugeHostlists() {
    QVERIFY_THROWS_EXCEPTION(ptw::Error, expandHostlist("n[1-100000]"));
    QCOMPARE(firstHost("n[00001-100000]"), std::string("n00001"));  // the first needs no expansion
  }
};

QTEST_GUILESS_MAIN(TestLauncherEnv)
#include "test_launcher_env.moc"
