// SPDX-License-Identifier: GPL-3.0-or-later
// What this machine's network offers a run across hosts (core/common/network.h): its interfaces,
// and the rendezvous port check, by the function and by `ptw-worker --check-port` as rank 0's
// host runs it before a run. Only loopback is touched: listeners on 127.0.0.1 and port checks
// that open a port and close it at once.
#include <QProcess>
#include <QtTest>

#include "common/network.h"
#include "test_support.h"

using namespace ptw;
using namespace ptw::core;

namespace {

struct Answer {
  int code = -1;
  QString out;
};

// `ptw-worker --check-port ARG`, stdout and stderr together.
Answer checkPort(const QString& arg) {
  QProcess worker;
  worker.setProcessChannelMode(QProcess::MergedChannels);
  worker.start(QString::fromStdString(test::workerPath()), {QStringLiteral("--check-port"), arg});
  Answer a;
  if (!worker.waitForFinished(30000)) {
    worker.kill();
    worker.waitForFinished(5000);
    return a;
  }
  a.code = worker.exitStatus() == QProcess::NormalExit ? worker.exitCode() : -1;
  a.out = QString::fromUtf8(worker.readAll()).trimmed();
  return a;
}

}  // namespace

class TestNetwork : public QObject {
  Q_OBJECT
 private slots:
  // Loopback is up with 127.0.0.1 on every Linux machine, a network namespace's too.
  void loopbackIsListed() {
    bool found = false;
    for (const auto& i : networkInterfaces()) {
      QVERIFY2(!i.name.empty() && !i.ipv4.empty(), (i.name + " " + i.ipv4).c_str());
      found |= i.name == "lo" && i.ipv4 == "127.0.0.1";
    }
    QVERIFY(found);
  }

  // A port another program listens on (on one address) cannot be opened on every interface,
  // and the reason is the system's; once it is closed the same port opens.
  void aPortInUseIsNamedAndAFreeOneOpens() {
    int port = 0;
    {
      test::TakenPort busy(0);
      QVERIFY(busy.ok());
      port = busy.port();
      int asked = port;
      QCOMPARE(QString::fromStdString(listenProblem(asked)), QStringLiteral("Address already in use"));
      QCOMPARE(asked, port);  // left as it was
    }
    int asked = port;
    QCOMPARE(QString::fromStdString(listenProblem(asked)), QString());
    QCOMPARE(asked, port);
    int any = 0;
    QCOMPARE(QString::fromStdString(listenProblem(any)), QString());
    QVERIFY2(any > 0 && any <= 65535, qPrintable(QString::number(any)));
  }

  // The worker's --check-port: the port it opened and exit 0; exit 1 with one line naming the
  // port and why; exit 2 for what is not a port.
  void workerChecksThePort() {
    test::TakenPort busy(0);
    QVERIFY(busy.ok());
    const QString port = QString::number(busy.port());
    Answer a = checkPort(port);
    QCOMPARE(a.code, 1);
    QCOMPARE(a.out, "cannot open port " + port + ": Address already in use");
    a = checkPort(QStringLiteral("0"));
    QCOMPARE(a.code, 0);
    bool number = false;
    const int opened = a.out.toInt(&number);
    QVERIFY2(number && opened > 0 && opened != busy.port(), qPrintable(a.out));
    a = checkPort(QString::number(opened));  // free a moment ago, and no one took it since
    QCOMPARE(a.code, 0);
    QCOMPARE(a.out, QString::number(opened));
    a = checkPort(QStringLiteral("70000"));
    QCOMPARE(a.code, 2);
    QCOMPARE(a.out, QStringLiteral("error: --check-port: expected a port, 0-65535, got 70000"));
  }
};

QTEST_GUILESS_MAIN(TestNetwork)
#include "test_network.moc"
