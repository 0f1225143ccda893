// SPDX-License-Identifier: GPL-3.0-or-later
// Helpers shared by the tests: where the binaries are, and what /proc says.
#pragma once

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QString>
#include <QTemporaryDir>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/profile.h"

namespace ptw::test {

inline QString binDir() { return qEnvironmentVariable("PTW_BIN_DIR"); }
inline std::string workerPath() { return (binDir() + "/ptw-worker").toStdString(); }
/// A file of the source tree, e.g. sourcePath("resources/data/regression.csv").
inline QString sourcePath(const QString& rel) { return qEnvironmentVariable("PTW_SOURCE_DIR") + "/" + rel; }

/// resources/examples/ddp_train.py (DDP over Gloo, reporting through ptw_metrics) as a command
/// of `ranks` ranks run by /usr/bin/python3, batch 16, a 30 s stall limit; its hosts the caller's.
inline core::Profile ddpScriptProfile(const std::string& name, int ranks, std::int64_t steps) {
  core::Profile p = core::defaultProfile();
  p.name = name;
  p.strategy.kind = "command";
  p.strategy.ranks = ranks;
  p.hyper.maxSteps = steps;
  p.hyper.batchSize = 16;
  p.run.timeoutS = 30;
  p.command.program = "/usr/bin/python3";
  p.command.args = {"ddp_train.py",       "--lr",   "{hyper.lr}",   "--steps",      "{hyper.max_steps}", "--batch-size",
                    "{hyper.batch_size}", "--seed", "{hyper.seed}", "--ptw-metrics"};
  p.command.cwd = sourcePath(QStringLiteral("resources/examples")).toStdString();
  return p;
}

/// True while `pid` exists and is not a zombie.
inline bool processAlive(int pid) {
  QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
  if (!stat.open(QIODevice::ReadOnly)) return false;
  QByteArray s = stat.readAll();
  int close = s.lastIndexOf(')');
  return close > 0 && close + 2 < s.size() && s.at(close + 2) != 'Z';
}

/// Live `ptw-worker` processes whose command line has `arg`, optionally only children of `parent`.
inline std::vector<int> liveWorkersWith(const QByteArray& arg, int parent = -1) {
  std::vector<int> out;
  for (const QString& entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs)) {
    bool ok = false;
    int pid = entry.toInt(&ok);
    if (!ok) continue;
    QFile comm(QStringLiteral("/proc/%1/comm").arg(pid));
    if (!comm.open(QIODevice::ReadOnly) || comm.readAll().trimmed() != "ptw-worker") continue;
    QFile cmdline(QStringLiteral("/proc/%1/cmdline").arg(pid));
    if (!cmdline.open(QIODevice::ReadOnly) || !cmdline.readAll().split('\0').contains(arg)) continue;
    if (!processAlive(pid)) continue;
    if (parent > 0) {
      QFile status(QStringLiteral("/proc/%1/status").arg(pid));
      if (!status.open(QIODevice::ReadOnly)) continue;
      QByteArray st = status.readAll();
      int at = st.indexOf("PPid:");
      if (at < 0 || st.mid(at + 5, st.indexOf('\n', at) - at - 5).trimmed().toInt() != parent) continue;
    }
    out.push_back(pid);
  }
  return out;
}

/// Live ranks (ptw-worker --rank ...; not the --devices or --preflight probes).
inline std::vector<int> livePtwWorkers(int parent = -1) { return liveWorkersWith("--rank", parent); }

inline bool anyAlive(const std::vector<int>& pids) {
  for (int p : pids)
    if (processAlive(p)) return true;
  return false;
}

/// Listens on a free loopback port until destroyed, so that port is taken (0: one the kernel
/// picks, then port()).
class TakenPort {
 public:
  explicit TakenPort(int port) : m_port(port), m_fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    socklen_t len = sizeof a;
    m_ok = ::bind(m_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(m_fd, 1) == 0 &&
           ::getsockname(m_fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    if (m_ok) m_port = ntohs(a.sin_port);
  }
  ~TakenPort() { ::close(m_fd); }
  TakenPort(const TakenPort&) = delete;
  TakenPort& operator=(const TakenPort&) = delete;
  bool ok() const { return m_ok; }
  int port() const { return m_port; }

 private:
  int m_port;
  int m_fd;
  bool m_ok = false;
};

/// Writes `p` to `<dir>/<name>` and returns the path.
inline std::string writeProfile(const QTemporaryDir& dir, const core::Profile& p, const char* name = "profile.json") {
  std::string path = dir.filePath(QString::fromLatin1(name)).toStdString();
  core::saveProfile(p, path);
  return path;
}

/// An MLP classifier on synthetic blobs, SGD with momentum 0.9 at lr 0.05: the equivalence
/// tests' compute-bound model, at the sizes given.
inline core::Profile mlpProfile(std::int64_t in, std::vector<std::int64_t> hidden, std::int64_t classes,
                                std::int64_t samples) {
  core::Profile p = core::defaultProfile();
  p.model.kind = "mlp";
  p.model.inFeatures = in;
  p.model.hidden = std::move(hidden);
  p.model.outFeatures = classes;
  p.data.kind = "synthetic-classification";
  p.data.samples = samples;
  p.hyper.momentum = 0.9;
  p.hyper.lr = 0.05;
  return p;
}

/// A profile that trains until stopped (for fault tests).
inline core::Profile endlessProfile(int ranks) {
  core::Profile p = core::defaultProfile();
  p.strategy.ranks = ranks;
  p.hyper.maxSteps = 1'000'000'000;
  return p;
}

/// A headless ptw a test ran: its exit code (-1: it did not end by itself), what it printed
/// and its --summary file.
struct HeadlessRun {
  int exitCode = -1;
  QJsonObject summary;
  QString output;
};

/// Waits for `ptw` (killed after `timeoutMs`), then reads what it printed and `summaryPath`.
inline HeadlessRun finishHeadless(QProcess& ptw, const QString& summaryPath, int timeoutMs) {
  if (!ptw.waitForFinished(timeoutMs)) {
    ptw.kill();
    ptw.waitForFinished(5000);
  }
  HeadlessRun run;
  run.exitCode = ptw.exitStatus() == QProcess::NormalExit ? ptw.exitCode() : -1;
  run.output = QString::fromUtf8(ptw.readAll());
  QFile f(summaryPath);
  if (f.open(QIODevice::ReadOnly)) run.summary = QJsonDocument::fromJson(f.readAll()).object();
  return run;
}

}  // namespace ptw::test
