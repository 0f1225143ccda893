// SPDX-License-Identifier: GPL-3.0-or-later
// The host agent (Note [Host agent] in launch/host_agent.h): what its ranks write comes back
// tagged by rank, a control line's signal reaches every rank, the end of its input ends
// them, and every rank's end is reported. The ranks are small shell programs.
#include <QDir>
#include <QElapsedTimer>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/version.h"
#include "launch/agent_text_stream.h"
#include "launch/host_agent.h"
#include "test_support.h"

using namespace ptw::core;

namespace {

struct AgentRun {
  int code = -1;
  std::vector<AgentFrame> frames;
  std::string error;
};

// Runs the agent on `ranks` with `control` as its whole input (then end of file unless
// `keepOpen`: the write end stays open until the agent returns) and decodes its output,
// read in small pieces by another thread so that no frame arrives whole by chance.
AgentRun runAgent(const std::vector<AgentRank>& ranks, const std::string& control, bool keepOpen) {
  int in[2], out[2];
  if (::pipe(in) != 0 || ::pipe(out) != 0) return {};
  if (!control.empty() && ::write(in[1], control.data(), control.size()) != static_cast<ssize_t>(control.size()))
    return {};
  if (!keepOpen) ::close(in[1]);
  AgentRun run;
  AgentStreamDecoder decoder;
  std::thread reader([&] {
    char buf[7];
    for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;)
      decoder.feed(buf, static_cast<std::size_t>(n), [&](const AgentFrame& f) { run.frames.push_back(f); });
  });
  run.code = runHostAgent(ranks, in[0], out[1]);
  ::close(out[1]);
  reader.join();
  ::close(out[0]);
  ::close(in[0]);
  if (keepOpen) ::close(in[1]);
  run.error = decoder.error();
  return run;
}

AgentRank shell(int rank, const std::string& script) { return AgentRank{rank, {"/bin/sh", "-c", script}}; }

// An executable shell script `text` at `path`, for a rank whose command line must be a
// worker's (hostAgentMain rewrites its flags); false when it cannot be written.
bool writeProgram(const QString& path, const QByteArray& text) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write("#!/bin/sh\n" + text) < 0) return false;
  f.close();
  return f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
}

// rank -> what the agent said of it, by kind: the records joined, the log lines, the exit.
std::map<int, std::map<char, std::vector<std::string>>> byRank(const std::vector<AgentFrame>& frames) {
  std::map<int, std::map<char, std::vector<std::string>>> out;
  for (const auto& f : frames) {
    auto& slot = out[f.rank][f.kind];
    if (f.kind == AgentFrame::Records && !slot.empty())
      slot.back() += f.payload;
    else
      slot.push_back(f.payload);
  }
  return out;
}

// `texts`, one per srun task, as srun passes them on with --label: mostly whole lines, some
// cut in pieces (as a line too long, or what a task wrote just before it ended), each piece a
// line of its own with the task's label, the tasks' pieces mixed in a random order.
std::string asSrunLabelsThem(const std::vector<std::string>& texts, std::mt19937& random) {
  std::vector<std::vector<std::string>> pieces(texts.size());
  for (std::size_t t = 0; t < texts.size(); ++t) {
    std::string_view rest = texts[t];
    while (!rest.empty()) {
      std::size_t take = rest.find('\n') + 1;
      if (take == 0) take = rest.size();
      if (random() % 3 == 0) take = std::min(take, 1 + random() % 300);  // a line cut
      std::string piece(rest.substr(0, take));
      if (piece.back() != '\n') piece += '\n';  // srun ends each piece it labels
      pieces[t].push_back(piece);
      rest.remove_prefix(take);
    }
  }
  std::string out;
  std::vector<std::size_t> next(texts.size(), 0);
  for (bool any = true; any;) {
    any = false;
    const std::size_t t = random() % texts.size();
    if (next[t] < pieces[t].size()) out += (t < 10 ? " " : "") + std::to_string(t) + ": " + pieces[t][next[t]++];
    for (std::size_t k = 0; k < texts.size(); ++k) any = any || next[k] < pieces[k].size();
  }
  return out;
}

}  // namespace

class TestHostAgent : public QObject {
  Q_OBJECT

 private slots:
  void framesRoundTripInPiecesOfAnySize() {
    const std::vector<AgentFrame> sent{{AgentFrame::Records, 0, std::string("\0\1\2PTWA", 7)},
                                       {AgentFrame::Log, 300, "[rank 300] step 1"},
                                       {AgentFrame::Exit, 7, "signal 9"},
                                       {AgentFrame::Log, 1, ""}};
    std::string stream;
    for (const auto& f : sent) stream += encodeAgentFrame(f);
    for (std::size_t piece : {std::size_t{1}, std::size_t{5}, stream.size()}) {
      AgentStreamDecoder d;
      std::vector<AgentFrame> got;
      for (std::size_t at = 0; at < stream.size(); at += piece)
        d.feed(stream.data() + at, std::min(piece, stream.size() - at), [&](const AgentFrame& f) { got.push_back(f); });
      QCOMPARE(got.size(), sent.size());
      QVERIFY(got == sent);
      QCOMPARE(QString::fromStdString(d.error()), QString());
    }
  }

  // Note [One step for all nodes]: several agents' frames, as text through srun's labelled
  // and cut output, read back to the byte, each agent's in its order.
  void textFramesSurviveSrunsLabelledPieces() {
    std::mt19937 random(20261205);
    std::vector<std::vector<AgentFrame>> sent(3);
    std::vector<std::string> texts(3);
    for (int t = 0; t < 3; ++t) {
      sent[static_cast<std::size_t>(t)].push_back({AgentFrame::Node, 0, "node" + std::to_string(t)});
      for (int i = 0; i < 40; ++i) {
        std::string payload(random() % 3000, '\0');
        for (auto& c : payload) c = static_cast<char>(random());
        sent[static_cast<std::size_t>(t)].push_back({AgentFrame::Records, t * 4 + i % 4, payload});
      }
      sent[static_cast<std::size_t>(t)].push_back({AgentFrame::Log, t, "a line ending in a dot."});
      sent[static_cast<std::size_t>(t)].push_back({AgentFrame::Exit, t, "code 0"});
      for (const auto& f : sent[static_cast<std::size_t>(t)])
        texts[static_cast<std::size_t>(t)] += encodeAgentTextUnit(encodeAgentFrame(f));
    }
    for (const auto& text : texts)
      for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
        QVERIFY(nl - at <= kAgentTextLine + 1);
    const std::string stream = asSrunLabelsThem(texts, random);
    LabelledAgentStreams reader;
    std::vector<std::vector<AgentFrame>> got(3);
    for (std::size_t at = 0; at < stream.size();) {
      const std::size_t n = std::min<std::size_t>(1 + random() % 5000, stream.size() - at);
      reader.feed(stream.data() + at, n, [&](int task, const AgentFrame& f) {
        QVERIFY(task >= 0 && task < 3);
        got[static_cast<std::size_t>(task)].push_back(f);
      });
      at += n;
    }
    QCOMPARE(QString::fromStdString(reader.error()), QString());
    for (std::size_t t = 0; t < 3; ++t) {
      QCOMPARE(got[t].size(), sent[t].size());
      QVERIFY(got[t] == sent[t]);
    }
  }

  void aBrokenTextStreamIsSaid_data() {
    QTest::addColumn<QByteArray>("stream");
    QTest::addColumn<QString>("error");
    QTest::newRow("no label") << QByteArray("QUJD.\n") << "a line without srun's task label";
    QTest::newRow("not base64") << QByteArray("0: QU*D.\n") << "task 0 sent what is not base64";
    QTest::newRow("no frame") << QByteArray("1: Z2FyYmFnZSBnYXJiYWdlIQ==.\n")
                              << "task 1: the host agent's stream is broken";
  }
  void aBrokenTextStreamIsSaid() {
    QFETCH(QByteArray, stream);
    QFETCH(QString, error);
    LabelledAgentStreams reader;
    const std::string after = encodeAgentTextUnit(encodeAgentFrame({AgentFrame::Log, 0, "after"}));
    int frames = 0;
    reader.feed(stream.constData(), static_cast<std::size_t>(stream.size()), [&](int, const AgentFrame&) { ++frames; });
    reader.feed(("0: " + after).data(), after.size() + 3, [&](int, const AgentFrame&) { ++frames; });
    QVERIFY2(QString::fromStdString(reader.error()).contains(error), reader.error().c_str());
    QCOMPARE(frames, 0);
  }

  void srunsTaskLabelsAreRead() {
    std::string_view rest;
    QCOMPARE(splitTaskLabel(" 3: text: more", rest), 3);
    QCOMPARE(std::string(rest), std::string("text: more"));
    QCOMPARE(splitTaskLabel("12: ", rest), 12);
    QCOMPARE(std::string(rest), std::string());
    QCOMPARE(splitTaskLabel("srun: error: node2: task 1: Killed", rest), -1);
    QCOMPARE(std::string(rest), std::string("srun: error: node2: task 1: Killed"));
    QCOMPARE(splitTaskLabel("3 text", rest), -1);
    QCOMPARE(splitTaskLabel("", rest), -1);
  }

  void srunsTaskEndsAreRead() {
    std::string node;
    int status = 0;
    QVERIFY(srunTaskEnd("srun: error: node2: task 1: Killed", node, status));
    QCOMPARE(node, std::string("node2"));
    QVERIFY(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    QVERIFY(srunTaskEnd("srun: error: n-7: task 12: Exited with exit code 3", node, status));
    QCOMPARE(node, std::string("n-7"));
    QVERIFY(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    QVERIFY(srunTaskEnd("srun: error: node2: task 1: Segmentation fault (core dumped)", node, status));
    QVERIFY(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
    QVERIFY(srunTaskEnd("srun: error: node2: task 1: Stopped (signal)", node, status));
    QVERIFY(WIFSIGNALED(status) && WTERMSIG(status) == SIGSTOP);
    QVERIFY(!srunTaskEnd("srun: error: Unable to create step for job 42: Invalid node name", node, status));
    QVERIFY(!srunTaskEnd("0: srun: error: node2: task 1: Killed", node, status));
  }

  void aBrokenStreamIsSaidAndReadNoFurther() {
    AgentStreamDecoder d;
    int frames = 0;
    const std::string good = encodeAgentFrame({AgentFrame::Log, 0, "ok"});
    const std::string bad = good + "garbage that is no frame" + good;
    d.feed(bad.data(), bad.size(), [&](const AgentFrame&) { ++frames; });
    QCOMPARE(frames, 1);
    QCOMPARE(QString::fromStdString(d.error()),
             QString("the host agent's stream is broken: no agent frame at byte %1").arg(good.size()));
    d.feed(good.data(), good.size(), [&](const AgentFrame&) { ++frames; });
    QCOMPARE(frames, 1);
  }

  // Each rank's records come back byte for byte and its log line by line, tagged with its
  // rank, and its exit last; the agent's own code says whether all exited 0.
  void ranksAreForwardedTaggedAndReported() {
    const std::string records(100000, 'r');  // more than one pipe read
    const AgentRun run = runAgent({shell(0, "head -c 100000 /dev/zero | tr '\\0' r; echo one >&2; printf two >&2"),
                                   shell(5, "echo five >&2; exit 3")},
                                  "", true);
    QCOMPARE(QString::fromStdString(run.error), QString());
    QCOMPARE(run.code, 1);
    auto ranks = byRank(run.frames);
    QCOMPARE(ranks.size(), std::size_t{2});
    QCOMPARE(ranks[0][AgentFrame::Records], std::vector<std::string>{records});
    QCOMPARE(ranks[0][AgentFrame::Log], (std::vector<std::string>{"one", "two"}));
    QCOMPARE(ranks[0][AgentFrame::Exit], std::vector<std::string>{"code 0"});
    QCOMPARE(ranks[5][AgentFrame::Log], std::vector<std::string>{"five"});
    QCOMPARE(ranks[5][AgentFrame::Exit], std::vector<std::string>{"code 3"});
    for (int rank : {0, 5}) {  // the exit is each rank's last frame
      int last = -1;
      for (std::size_t i = 0; i < run.frames.size(); ++i)
        if (run.frames[i].rank == rank) last = static_cast<int>(i);
      QCOMPARE(run.frames[static_cast<std::size_t>(last)].kind, AgentFrame::Exit);
    }
  }

  // "signal N" on the control line reaches every rank, however far it has come in starting.
  void aSignalReachesEveryRank() {
    const AgentRun run = runAgent({shell(0, "sleep 30 & wait"), shell(1, "exec sleep 30")}, "signal 15\n", true);
    auto ranks = byRank(run.frames);
    QCOMPARE(ranks[0][AgentFrame::Exit], std::vector<std::string>{"signal 15"});
    QCOMPARE(ranks[1][AgentFrame::Exit], std::vector<std::string>{"signal 15"});
    QCOMPARE(run.code, 1);
  }

  // The end of the agent's input (the connection or ptw gone) kills every rank, and the
  // agent returns only when each is gone and reported: nothing is left running.
  void theEndOfItsInputEndsEveryRank() {
    QTemporaryDir dir;
    const std::string pidFile = dir.filePath("pid").toStdString();
    const AgentRun run =
        runAgent({shell(0, "trap '' TERM INT; echo $$ > " + pidFile + "; sleep 30 & wait"), shell(1, "exec sleep 30")},
                 "", false);
    auto ranks = byRank(run.frames);
    QCOMPARE(ranks[0][AgentFrame::Exit], std::vector<std::string>{"signal 9"});
    QCOMPARE(ranks[1][AgentFrame::Exit], std::vector<std::string>{"signal 9"});
    QFile f(QString::fromStdString(pidFile));
    if (f.open(QIODevice::ReadOnly)) {  // it may have been killed before it wrote its pid
      const pid_t pid = f.readAll().trimmed().toInt();
      QVERIFY(pid > 0);
      QVERIFY2(::kill(pid, 0) != 0, "rank 0 is still running");
    }
  }

  // A program that cannot be run is reported as a shell reports it, named on its log.
  void aProgramThatCannotRunIsReported() {
    const AgentRun run = runAgent({AgentRank{2, {"/nonexistent/ptw-worker"}}}, "", true);
    auto ranks = byRank(run.frames);
    QCOMPARE(ranks[2][AgentFrame::Exit], std::vector<std::string>{"code 127"});
    QCOMPARE(ranks[2][AgentFrame::Log],
             std::vector<std::string>{"error: the host agent cannot start a rank's program"});
  }

  // "stacks R" reaches rank R's own control line, and no other rank's.
  void aStacksLineReachesOnlyItsRank() {
    const std::string readLine = "line=$(timeout 2 head -n 1); echo \"got:$line\" >&2";
    const AgentRun run = runAgent({shell(0, readLine), shell(1, readLine)}, "stacks 1\n", true);
    auto ranks = byRank(run.frames);
    QCOMPARE(ranks[1][AgentFrame::Log], std::vector<std::string>{"got:stacks"});
    QCOMPARE(ranks[0][AgentFrame::Log], std::vector<std::string>{"got:"});
  }

  // ptw's request comes back as it was sent, and the control line after it is left unread.
  void aRequestRoundTripsAndLeavesTheControlLines() {
    const AgentRequest sent{
        "9.9.9", "{\"name\": \"it's\"}\n", {AgentRank{3, {"/w", "--rank", "3"}}, AgentRank{4, {"/w"}}}};
    int in[2];
    QVERIFY(::pipe(in) == 0);
    const std::string bytes = encodeAgentRequest(sent) + "signal 2\n";
    QCOMPARE(::write(in[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(in[1]);
    const AgentRequest got = readAgentRequest(in[0]);
    QCOMPARE(got.version, sent.version);
    QCOMPARE(got.profile, sent.profile);
    QCOMPARE(got.ranks.size(), std::size_t{2});
    QCOMPARE(got.ranks[0].rank, 3);
    QCOMPARE(got.ranks[0].argv, sent.ranks[0].argv);
    QCOMPARE(got.ranks[1].argv, sent.ranks[1].argv);
    char rest[32] = {0};
    QCOMPARE(::read(in[0], rest, sizeof rest), ssize_t{9});
    QCOMPARE(QString(rest), QString("signal 2\n"));
    ::close(in[0]);
  }

  // A request that is no request, or from another build, is refused before any rank starts:
  // exit code 2 and one line saying why.
  void aRequestItCannotServeIsRefused_data() {
    QTest::addColumn<QByteArray>("input");
    QTest::addColumn<QString>("said");
    QTest::newRow("another build") << QByteArray::fromStdString(
                                          encodeAgentRequest({"0.0.1", "{}", {AgentRank{0, {"/bin/true"}}}}))
                                   << QString(", and ptw 0.0.1 sent the run; every host needs the same ptw build");
    QTest::newRow("no request") << QByteArray("hello\n")
                                << QString("expected \"ptw-agent-request LENGTH\" on the agent's input, got \"hello\"");
    QTest::newRow("nothing") << QByteArray() << QString("no request from ptw on the agent's input");
  }
  void aRequestItCannotServeIsRefused() {
    QFETCH(QByteArray, input);
    QFETCH(QString, said);
    int in[2], out[2], err[2];
    QVERIFY(::pipe(in) == 0 && ::pipe(out) == 0 && ::pipe(err) == 0);
    QCOMPARE(::write(in[1], input.data(), input.size()), static_cast<ssize_t>(input.size()));
    ::close(in[1]);
    QCOMPARE(hostAgentMain(in[0], out[1], err[1]), 2);
    ::close(out[1]), ::close(err[1]), ::close(in[0]);
    char buf[4096] = {0};
    QCOMPARE(::read(out[0], buf, sizeof buf), ssize_t{0});  // no frame: no rank started
    const ssize_t n = ::read(err[0], buf, sizeof buf - 1);
    ::close(out[0]), ::close(err[0]);
    const QString line = QString::fromUtf8(buf, static_cast<int>(std::max<ssize_t>(n, 0)));
    QVERIFY2(line.startsWith("error: ptw-worker --agent on ") && line.contains(said) && line.count('\n') == 1,
             qPrintable(line));
  }

  // The ranks read the profile ptw sent from a descriptor the agent hands down (Note [Agent
  // profile]): nothing of it is on the host's disk, and no rank can change it.
  void theRanksReadTheProfileSentFromNoFile() {
    QTemporaryDir dir;
    const QString program = dir.filePath("rank.sh");
    QFile f(program);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do\n  if [ \"$1\" = --profile ]; then echo \"at:$2\" >&2; cat \"$2\" >&2;\n"
        "    (echo more >> \"$2\") 2>/dev/null && echo \"changed it\" >&2; fi\n"
        "  shift\ndone\n");
    f.close();
    f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    const std::string worker = program.toStdString();
    const AgentRequest request{ptw::kVersion,
                               "{\"name\": \"sent\"}\n",
                               {AgentRank{1, {worker, "--profile", "/nowhere/profile.json", "--rank", "1"}}}};
    int in[2], out[2];
    QVERIFY(::pipe(in) == 0 && ::pipe(out) == 0);
    const std::string bytes = encodeAgentRequest(request);
    QCOMPARE(::write(in[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    AgentStreamDecoder decoder;
    std::vector<AgentFrame> frames;
    std::thread reader([&] {
      char buf[512];
      for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;)
        decoder.feed(buf, static_cast<std::size_t>(n), [&](const AgentFrame& fr) { frames.push_back(fr); });
    });
    const int code = hostAgentMain(in[0], out[1], 2);
    ::close(out[1]);
    reader.join();
    ::close(out[0]), ::close(in[0]), ::close(in[1]);
    QCOMPARE(code, 0);
    auto ranks = byRank(frames);
    const auto& log = ranks[1][AgentFrame::Log];
    QCOMPARE(log.size(), std::size_t{2});
    QVERIFY2(QRegularExpression("^at:/proc/self/fd/\\d+$").match(QString::fromStdString(log[0])).hasMatch(),
             log[0].c_str());
    QCOMPARE(log[1], std::string("{\"name\": \"sent\"}"));
    QCOMPARE(ranks[1][AgentFrame::Exit], std::vector<std::string>{"code 0"});
  }

  // One request for every node's agent (srun gives each the same input): each runs the ranks
  // of its own node and says which node it is, in text; a node with none of the ranks refuses.
  void aRequestForEveryNodeRunsOnlyThisNodesRanks() {
    QTemporaryDir dir;
    const QString program = dir.filePath("rank.sh");
    QFile f(program);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --rank ] && echo \"rank $2 ran\" >&2; shift; done; exit 0\n");
    f.close();
    f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    const std::string worker = program.toStdString();
    AgentRequest request{
        ptw::kVersion,
        "{}",
        {AgentRank{1, {worker, "--rank", "1"}, "nodeA"}, AgentRank{2, {worker, "--rank", "2"}, "nodeB"},
         AgentRank{3, {worker, "--rank", "3"}, "nodeB"}}};
    request.allNodes = true;
    const QByteArray node = qgetenv("SLURMD_NODENAME");
    for (const char* on : {"nodeB", "nodeC"}) {
      qputenv("SLURMD_NODENAME", on);
      int in[2], out[2], err[2];
      QVERIFY(::pipe(in) == 0 && ::pipe(out) == 0 && ::pipe(err) == 0);
      const std::string bytes = encodeAgentRequest(request);
      QCOMPARE(::write(in[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
      std::string text, said;
      std::thread reader([&] {
        char buf[512];
        for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
      });
      const int code = hostAgentMain(in[0], out[1], err[1]);
      ::close(out[1]), ::close(err[1]);
      reader.join();
      char buf[512];
      for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(n));
      ::close(out[0]), ::close(err[0]), ::close(in[0]), ::close(in[1]);
      if (std::string(on) == "nodeC") {
        QCOMPARE(code, 2);
        QVERIFY2(said.find("no rank of the run is on node nodeC") != std::string::npos, said.c_str());
        QVERIFY(text.empty());
        continue;
      }
      QVERIFY2(code == 0, (said + text).c_str());
      std::string labelled;  // as srun --label passes it on from task 4
      for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
        labelled += "4: " + text.substr(at, nl + 1 - at);
      LabelledAgentStreams streams;
      std::vector<AgentFrame> frames;
      streams.feed(labelled.data(), labelled.size(), [&](int task, const AgentFrame& fr) {
        QCOMPARE(task, 4);
        frames.push_back(fr);
      });
      QCOMPARE(QString::fromStdString(streams.error()), QString());
      QVERIFY(!frames.empty());
      QVERIFY(frames.front() == (AgentFrame{AgentFrame::Node, 0, "nodeB"}));
      frames.erase(frames.begin());
      auto ranks = byRank(frames);
      QCOMPARE(ranks.size(), std::size_t{2});
      QCOMPARE(ranks[2][AgentFrame::Log], std::vector<std::string>{"rank 2 ran"});
      QCOMPARE(ranks[3][AgentFrame::Log], std::vector<std::string>{"rank 3 ran"});
      QCOMPARE(ranks[3][AgentFrame::Exit], std::vector<std::string>{"code 0"});
    }
    if (node.isNull())
      qunsetenv("SLURMD_NODENAME");
    else
      qputenv("SLURMD_NODENAME", node);
  }

  // An agent killed by SIGKILL (no chance to clean up) leaves nothing on the host: no folder
  // in its TMPDIR, and its ranks die with it.
  void anAgentKilledLeavesNothingBehind() {
    QTemporaryDir tmp, dir;
    const QString program = dir.filePath("rank.sh");
    QVERIFY(writeProgram(program, "echo \"pid:$$\" >&2\nexec sleep 30\n"));
    QProcess agent;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("TMPDIR", tmp.path());
    agent.setProcessEnvironment(env);
    agent.start(ptw::test::binDir() + "/ptw-worker", {"--agent"});
    QVERIFY(agent.waitForStarted(10000));
    agent.write(QByteArray::fromStdString(encodeAgentRequest(
        {ptw::kVersion, "{\"name\": \"killed\"}\n", {AgentRank{0, {program.toStdString(), "--profile", "/p"}}}})));
    AgentStreamDecoder decoder;
    int pid = 0;
    QElapsedTimer t;  // bounded: the rank says its pid within 10 s, or the case fails
    t.start();
    while (pid == 0 && t.elapsed() < 10000 && agent.waitForReadyRead(1000)) {
      const QByteArray got = agent.readAllStandardOutput();
      decoder.feed(got.constData(), static_cast<std::size_t>(got.size()), [&](const AgentFrame& fr) {
        if (fr.kind == AgentFrame::Log && fr.payload.rfind("pid:", 0) == 0) pid = std::stoi(fr.payload.substr(4));
      });
    }
    QVERIFY2(pid > 0, agent.readAllStandardError().constData());
    ::kill(static_cast<pid_t>(agent.processId()), SIGKILL);
    QVERIFY(agent.waitForFinished(10000));
    for (int i = 0; i < 100 && ptw::test::processAlive(pid); ++i) QThread::msleep(50);
    QVERIFY2(!ptw::test::processAlive(pid), "the rank outlived its agent");
    const QStringList left = QDir(tmp.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden);
    QVERIFY2(left.isEmpty(), qPrintable("left in the agent's TMPDIR: " + left.join(' ')));
  }

  // What a rank's program leaves outside its rank's process group (a `setsid` child) is
  // killed on the agent's host once its rank is reported (Note [Script ranks]); a process
  // with another run's token is not.
  void whatARankLeftOutsideItsGroupIsKilled() {
    QTemporaryDir dir;
    const std::string pids = dir.filePath("pids").toStdString();
    // The rank's token is its parent's pid (this process runs the agent) and its --port.
    const QString program = dir.filePath("rank.sh");
    // Each child is in a session of its own before the rank ends (its group is killed then);
    // bounded: 5 s.
    const std::string leave = "setsid sleep 30 >/dev/null 2>&1 &\necho $! >> " + pids +
                              "\nfor i in $(seq 100); do [ \"$(cut -d' ' -f6 /proc/$!/stat)\" = $! ] && break; "
                              "sleep 0.05; done\n";
    QVERIFY(writeProgram(program, QByteArray::fromStdString("export PTW_RUN_TOKEN=$PPID-29555\n" + leave +
                                                            "export PTW_RUN_TOKEN=$PPID-29556\n" + leave)));
    const AgentRequest request{
        ptw::kVersion, "{}", {AgentRank{0, {program.toStdString(), "--port", "29555", "--profile", "/p"}}}};
    int in[2], out[2];
    // Close-on-exec: a process the rank leaves must not hold this test's pipes open.
    QVERIFY(::pipe2(in, O_CLOEXEC) == 0 && ::pipe2(out, O_CLOEXEC) == 0);
    const std::string bytes = encodeAgentRequest(request);
    QCOMPARE(::write(in[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    AgentStreamDecoder decoder;
    std::string said;
    std::thread reader([&] {
      char buf[512];
      for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;)
        decoder.feed(buf, static_cast<std::size_t>(n), [&](const AgentFrame& fr) { said += fr.payload + "\n"; });
    });
    const int code = hostAgentMain(in[0], out[1], 2);
    ::close(out[1]);
    reader.join();
    ::close(out[0]), ::close(in[0]), ::close(in[1]);  // open until now: its end would kill the rank
    QVERIFY2(code == 0, said.c_str());
    QFile f(QString::fromStdString(pids));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QList<QByteArray> started = f.readAll().trimmed().split('\n');
    QCOMPARE(started.size(), 2);
    const int ours = started[0].toInt(), theirs = started[1].toInt();
    for (int i = 0; i < 100 && ptw::test::processAlive(ours); ++i) QThread::msleep(50);
    QVERIFY2(!ptw::test::processAlive(ours), "the process the rank left outside its group is running");
    QVERIFY2(ptw::test::processAlive(theirs), "a process of another run was killed");
    ::kill(theirs, SIGKILL);
  }
};

QTEST_GUILESS_MAIN(TestHostAgent)
#include "test_host_agent.moc"
