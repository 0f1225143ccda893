// The window, offscreen: profile fields, Open/Save, and a live 2-rank run started and
// stopped from the buttons.
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QtTest>

#include "test_support.h"
#include "ui/loss_chart.h"
#include "ui/main_window.h"
#include "ui/run_controller.h"

using namespace ptw;

class TestMainWindow : public QObject {
  Q_OBJECT
 private slots:
  void editingFieldsChangesTheProfileAndValidates() {
    ui::MainWindow w;
    auto* lr = w.findChild<QDoubleSpinBox*>("lr");
    auto* ranks = w.findChild<QSpinBox*>("ranks");
    auto* start = w.findChild<QPushButton*>("start");
    QVERIFY(lr && ranks && start);
    ranks->setValue(3);
    QCOMPARE(w.profile().strategy.ranks, 3);
    QVERIFY(start->isEnabled());
    lr->setValue(-0.5);
    QVERIFY(!start->isEnabled());
    QVERIFY2(start->toolTip().contains("hyper.lr: must be > 0"), qPrintable(start->toolTip()));
    lr->setValue(0.02);
    QVERIFY(start->isEnabled());
    QCOMPARE(w.profile().hyper.lr, 0.02);
  }

  void openAndSaveRoundTrip() {
    QTemporaryDir dir;
    ui::MainWindow w;
    QString error;
    QVERIFY(w.openProfile(test::binDir() + "/../../resources/profiles/seed-ddp.json", &error) ||
            w.openProfile(qEnvironmentVariable("PTW_SOURCE_DIR") + "/resources/profiles/seed-ddp.json", &error));
    QVERIFY(w.profile() == core::defaultProfile());
    w.findChild<QSpinBox*>("steps")->setValue(77);
    QVERIFY(w.saveProfile(dir.filePath("saved.json"), &error));
    ui::MainWindow other;
    QVERIFY(other.openProfile(dir.filePath("saved.json"), &error));
    QCOMPARE(other.profile().hyper.maxSteps, std::int64_t(77));
    QCOMPARE(other.findChild<QSpinBox*>("steps")->value(), 77);

    // A bad file changes nothing and says why.
    QFile bad(dir.filePath("bad.json"));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("{\"strategy\": {\"ranks\": 0}}");
    bad.close();
    QVERIFY(!other.openProfile(dir.filePath("bad.json"), &error));
    QVERIFY2(error.contains("strategy.ranks: must be >= 1"), qPrintable(error));
    QCOMPARE(other.profile().hyper.maxSteps, std::int64_t(77));
  }

  void startShowsLiveSeriesAndStopEndsCleanly() {
    QTemporaryDir runs;
    ui::MainWindow w;
    w.setRunsDirectory(runs.path());
    w.show();
    w.findChild<QSpinBox*>("steps")->setValue(100000000);
    QTest::mouseClick(w.findChild<QPushButton*>("start"), Qt::LeftButton);
    QVERIFY(w.controller()->isRunning());
    QCOMPARE(w.lossChart()->rankCount(), 2);
    QTRY_VERIFY_WITH_TIMEOUT(w.lossChart()->pointCount(0) >= 10 && w.lossChart()->pointCount(1) >= 10, 20000);
    auto workers = test::livePtwWorkers(static_cast<int>(::getpid()));
    QCOMPARE(workers.size(), std::size_t(2));
    QTest::mouseClick(w.findChild<QPushButton*>("stop"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(w.lastStatus(), QStringLiteral("stopped"), 15000);
    QVERIFY(!w.controller()->isRunning());
    QVERIFY(w.findChild<QPushButton*>("start")->isEnabled());
    QVERIFY(!test::anyAlive(workers));
  }
};

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
