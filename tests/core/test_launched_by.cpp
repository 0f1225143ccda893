// SPDX-License-Identifier: GPL-3.0-or-later
// ptw-worker started by a standard launcher, end to end on loopback: two ranks given only
// torchrun's, SLURM's or Open MPI's variables (or started by mpirun itself) end with the
// parameters that ptw's own 2-rank launch of the same DDP profile reaches.
#include <QProcess>
#include <QProcessEnvironment>
#include <QStandardPaths>
#include <QtTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <limits>

#include <torch/torch.h>

#include "engine_support.h"
#include "launch/launcher.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;
using ptw::test::maxAbsDiff;

namespace {

Profile ddpProfile() {
  Profile p = test::mlpProfile(8, {16, 16}, 3, 96);
  p.strategy.kind = "ddp";
  p.strategy.ranks = 2;
  p.strategy.backend = "gloo";
  p.hyper.maxSteps = 6;
  return p;
}

// A loopback port nothing listens on now.
int freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::vector<torch::Tensor> loadParameters(const QString& dir, int rank) {
  std::vector<torch::Tensor> t;
  torch::load(t, (dir + QStringLiteral("/rank%1.final.pt").arg(rank)).toStdString());
  return t;
}

// This process's environment without any launcher's variables (a test run under one).
QProcessEnvironment cleanEnvironment() {
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  for (const QString& k : env.keys())
    if (k.startsWith(QLatin1String("SLURM_")) || k.startsWith(QLatin1String("OMPI_")) ||
        k.startsWith(QLatin1String("PMIX_")) ||
        QStringList{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}.contains(k))
      env.remove(k);
  return env;
}

struct Quiet : LaunchObserver {};

// Waits for `p` to end; its exit code, or -1 with `why` set.
int finish(QProcess& p, QString& why) {
  if (!p.waitForFinished(180000)) {
    p.kill();
    p.waitForFinished(5000);
    why = QStringLiteral("did not finish in 180 s");
    return -1;
  }
  return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
}

}  // namespace

class TestLaunchedBy : public QObject {
  Q_OBJECT
  QTemporaryDir m_refDir;
  std::string m_profilePath;
  std::vector<torch::Tensor> m_reference;  ///< rank 0's final parameters in ptw's own launch

  // Asserts that `dir` holds both ranks' final parameters, equal to the reference.
  void compareWithReference(const QString& dir) {
    const auto r0 = loadParameters(dir, 0), r1 = loadParameters(dir, 1);
    QCOMPARE(maxAbsDiff(r0, r1), 0.0);
    const double diff = maxAbsDiff(r0, m_reference);
    QVERIFY2(diff <= 1e-6, qPrintable(QStringLiteral("max |launched - ptw's launch| = %1").arg(diff)));
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_refDir.isValid());
    const Profile p = ddpProfile();
    m_profilePath = test::writeProfile(m_refDir, p);
    LaunchOptions lo(test::workerPath(), m_profilePath, processCount(p));
    lo.setOutDir(m_refDir.path().toStdString());
    Quiet quiet;
    const RunReport report = Launcher(lo).run(quiet);
    QVERIFY2(report.status == RunReport::Status::Finished, report.message.c_str());
    m_reference = loadParameters(m_refDir.path(), 0);
    QCOMPARE(maxAbsDiff(m_reference, loadParameters(m_refDir.path(), 1)), 0.0);
  }

  // %R is the rank, %P the port.
  void variablesOfEachLauncher_data() {
    QTest::addColumn<QStringList>("vars");
    QTest::newRow("torchrun") << QStringList{
        "RANK=%R", "WORLD_SIZE=2", "LOCAL_RANK=%R", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=%P"};
    QTest::newRow("SLURM, master from the node list") << QStringList{"SLURM_PROCID=%R",
                                                                     "SLURM_NTASKS=2",
                                                                     "SLURM_LOCALID=%R",
                                                                     "SLURM_JOB_NUM_NODES=1",
                                                                     "SLURM_JOB_NODELIST=localhost",
                                                                     "MASTER_PORT=%P"};
    QTest::newRow("Open MPI") << QStringList{"OMPI_COMM_WORLD_RANK=%R",       "OMPI_COMM_WORLD_SIZE=2",
                                             "OMPI_COMM_WORLD_LOCAL_RANK=%R", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                                             "MASTER_ADDR=127.0.0.1",         "MASTER_PORT=%P"};
  }
  void variablesOfEachLauncher() {
    QFETCH(QStringList, vars);
    QTemporaryDir out;
    const QString port = QString::number(freePort());
    QProcess ranks[2];
    for (int r = 0; r < 2; ++r) {
      QProcessEnvironment env = cleanEnvironment();
      for (QString kv : vars) {
        kv.replace(QLatin1String("%R"), QString::number(r)).replace(QLatin1String("%P"), port);
        env.insert(kv.section(QLatin1Char('='), 0, 0), kv.section(QLatin1Char('='), 1));
      }
      ranks[r].setProcessEnvironment(env);
      ranks[r].start(QString::fromStdString(test::workerPath()),
                     {"--profile", QString::fromStdString(m_profilePath), "--out", out.path()});
    }
    for (int r = 0; r < 2; ++r) {
      QString why;
      const int code = finish(ranks[r], why);
      const QByteArray err = ranks[r].readAllStandardError();
      QVERIFY2(
          code == 0,
          qPrintable(QStringLiteral("rank %1 ended with %2 %3: %4").arg(r).arg(code).arg(why, QString::fromUtf8(err))));
      QVERIFY2(err.contains("placed by "), err.constData());
      // Records as text lines on stdout (protocol.md), the rank's end among them: D RANK STEPS.
      const QByteArray stdOut = ranks[r].readAllStandardOutput();
      QVERIFY2(stdOut.split('\n').contains(QStringLiteral("D %1 6").arg(r).toUtf8()), stdOut.right(400).constData());
    }
    compareWithReference(out.path());
  }

  void withoutRankOrLauncherSaysWhatIsMissing() {
    QProcess p;
    p.setProcessEnvironment(cleanEnvironment());
    p.start(QString::fromStdString(test::workerPath()), {"--profile", QString::fromStdString(m_profilePath)});
    QString why;
    QCOMPARE(finish(p, why), 2);
    QVERIFY2(p.readAllStandardError().contains(
                 "--rank and --world are required, unless torchrun, srun or mpirun started ptw-worker"),
             "no explanation");
  }

  void aWorldTheProfileDoesNotRunIsRefused() {
    QProcess p;
    QProcessEnvironment env = cleanEnvironment();
    env.insert("RANK", "0");
    env.insert("WORLD_SIZE", "3");
    env.insert("MASTER_ADDR", "127.0.0.1");
    env.insert("MASTER_PORT", QString::number(freePort()));
    p.setProcessEnvironment(env);
    p.start(QString::fromStdString(test::workerPath()), {"--profile", QString::fromStdString(m_profilePath)});
    QString why;
    QCOMPARE(finish(p, why), 2);
    const QByteArray err = p.readAllStandardError();
    QVERIFY2(err.contains("torchrun started 3 rank(s), but the profile's strategy ddp runs 2 process(es)"),
             err.constData());
  }

  void mpirunStartsBothRanks() {
    const QString mpirun = QStandardPaths::findExecutable(QStringLiteral("mpirun"));
    if (mpirun.isEmpty())
      QSKIP("mpirun is not installed (Debian: openmpi-bin); the Open MPI variables are tested above");
    QTemporaryDir out;
    QProcessEnvironment env = cleanEnvironment();
    env.insert("OMPI_ALLOW_RUN_AS_ROOT", "1");
    env.insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    QProcess p;
    p.setProcessEnvironment(env);
    p.start(mpirun, {"--oversubscribe", "-np", "2", "-x", "MASTER_ADDR=127.0.0.1", "-x",
                     QStringLiteral("MASTER_PORT=%1").arg(freePort()), QString::fromStdString(test::workerPath()),
                     "--profile", QString::fromStdString(m_profilePath), "--out", out.path()});
    QString why;
    const int code = finish(p, why);
    const QByteArray err = p.readAllStandardError();
    QVERIFY2(code == 0,
             qPrintable(QStringLiteral("mpirun ended with %1 %2: %3").arg(code).arg(why, QString::fromUtf8(err))));
    QVERIFY2(err.contains("placed by Open MPI"), err.constData());
    compareWithReference(out.path());
  }
};

QTEST_GUILESS_MAIN(TestLaunchedBy)
#include "test_launched_by.moc"
