// SPDX-License-Identifier: GPL-3.0-or-later
// The ssh launcher's command lines (Note [Remote ranks] in core/launch/ssh_starter.h): the agent's
// path quoted for the remote shell, batch mode, the host after `--`; each rank's worker command.
#include <QProcess>
#include <QtTest>

#include <algorithm>

#include "common/error.h"
#include "launch/rank_starters.h"
#include "launch/ssh_starter.h"

using namespace ptw::core;

class TestSshStarter : public QObject {
  Q_OBJECT
 private slots:
  // Every argument reaches the remote shell single-quoted: nothing in it is interpreted.
  void argumentsAreQuotedForTheRemoteShell_data() {
    QTest::addColumn<QString>("value");
    QTest::newRow("plain") << "abc";
    QTest::newRow("spaces") << "a b  c";
    QTest::newRow("single quotes") << "it's 'quoted'";
    QTest::newRow("double quotes") << "say \"hi\"";
    QTest::newRow("command substitution") << "$(touch /tmp/ptw-pwned) `id`";
    QTest::newRow("separators") << "a; b && c | d > e";
    QTest::newRow("newline") << "line1\nline2";
    QTest::newRow("variables and globs") << "$HOME ${PATH} * ? ~ !";
    QTest::newRow("empty") << "";
  }
  void argumentsAreQuotedForTheRemoteShell() {
    QFETCH(QString, value);
    // sh reads the quoted word back as the value itself, byte for byte.
    QProcess sh;
    sh.start(QStringLiteral("/bin/sh"),
             {QStringLiteral("-c"), "printf '%s' " + QString::fromStdString(quoteForShell(value.toStdString()))});
    QVERIFY(sh.waitForFinished(10000));
    QCOMPARE(QString::fromUtf8(sh.readAllStandardOutput()), value);
  }

  // The ssh command, one a host (Note [Host agent]): batch mode, keep-alives, the host after
  // `--`, one remote command line that runs the agent; a rank's command line is the worker's
  // there, sent to the agent, its records and steps coming back over the connection.
  void sshCommandIsBatchModeWithTheHostAfterDashes() {
    HostsSpec h;
    h.launcher = "ssh";
    h.hosts = {"node1:1", "node2:1"};
    h.interface = "ib0";
    h.port = 29555;
    h.sshUser = "alice";
    SshStarter starter(h, {"node1", "node2"}, "/opt/ptw/ptw worker");
    QCOMPARE(starter.rendezvousPort(), 29555);
    QCOMPARE(starter.address(), std::string("node1"));
    const RankCommand agent = starter.agentCommand("node2");
    QVERIFY(agent.remote);
    QCOMPARE(agent.host, std::string("node2"));
    QCOMPARE(agent.connectionLostCode, 255);
    const auto& a = agent.argv;
    QVERIFY(std::find(a.begin(), a.end(), "BatchMode=yes") != a.end());
    QVERIFY(std::find(a.begin(), a.end(), "-T") != a.end());
    QVERIFY(std::find(a.begin(), a.end(), "ServerAliveInterval=5") != a.end());
    const auto dashes = std::find(a.begin(), a.end(), "--");
    QVERIFY(dashes != a.end() && dashes + 3 == a.end());
    QCOMPARE(*(dashes + 1), std::string("node2"));
    QCOMPARE(*(dashes + 2), std::string("exec '/opt/ptw/ptw worker' --agent"));

    WorkerInvocation worker("/opt/ptw/ptw-worker");
    worker.setProfile("/runs/a b/profile.json").setRank(1);
    worker.steps = "/runs/runs.blocks/7";
    const RankCommand c = starter.command(1, worker);
    QVERIFY(c.remote && c.viaAgent);
    QCOMPARE(c.host, std::string("node2"));
    QCOMPARE(c.argv, (std::vector<std::string>{"/opt/ptw/ptw worker", "--profile", "/runs/a b/profile.json", "--rank",
                                               "1", "--remote", "node2", "--master", "node1", "--interface", "ib0"}));
  }

  // Each launcher's ranks start through its own starter: here, or through ssh on the port given.
  void eachLauncherHasItsStarter() {
    Profile p;
    const auto local = makeRankStarter(p, "/opt/ptw/ptw-worker");
    QVERIFY(!local->command(0, WorkerInvocation("/opt/ptw/ptw-worker")).remote);
    QCOMPARE(local->rendezvousPort(), 0);
    p.hosts.launcher = "ssh";
    p.hosts.hosts = {"node1:2"};
    const auto ssh = makeRankStarter(p, "/opt/ptw/ptw-worker", 29556);
    QCOMPARE(ssh->rendezvousPort(), 29556);
    const RankCommand c = ssh->command(1, WorkerInvocation("/opt/ptw/ptw-worker"));
    QVERIFY(c.remote);
    QCOMPARE(c.host, std::string("node1"));
    p.hosts.launcher = "slurm";  // its ranks need the job they run in
    QVERIFY_THROWS_EXCEPTION(ptw::Error, makeRankStarter(p, "/opt/ptw/ptw-worker"));
  }
};

QTEST_GUILESS_MAIN(TestSshStarter)
#include "test_ssh_starter.moc"
