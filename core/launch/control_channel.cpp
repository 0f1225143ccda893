// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/control_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "launch/stacks_file.h"
#include "launch/store_database.h"

namespace ptw::core {
namespace {

std::string folderIn(const std::string& runDir) { return runDir + "/supervisor"; }

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

std::string ControlChannel::pathIn(const std::string& runDir) { return folderIn(runDir) + "/control"; }

ControlChannel::ControlChannel(const std::string& runDir, std::function<void()> onStop, std::function<void()> onStacks)
    : m_dir(folderIn(runDir)), m_fifo(pathIn(runDir)), m_onStop(std::move(onStop)), m_onStacks(std::move(onStacks)) {
  auto fail = [this](const std::string& what) {
    m_problem = what + " " + m_fifo + " (" + std::strerror(errno) + "); `ptw stop` cannot reach this run";
    closeFd(m_read);
    closeFd(m_keepOpen);
  };
  // A folder and FIFO left by a supervisor killed before its end are made anew, modes included.
  if ((::mkdir(m_dir.c_str(), 0700) != 0 && errno != EEXIST) || ::chmod(m_dir.c_str(), 0700) != 0) {
    fail("cannot create the folder of");
    return;
  }
  ::unlink(m_fifo.c_str());
  if (::mkfifo(m_fifo.c_str(), 0600) != 0 || ::chmod(m_fifo.c_str(), 0600) != 0) {
    fail("cannot create");
    return;
  }
  m_read = ::open(m_fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (m_read < 0) {
    fail("cannot open");
    return;
  }
  // A write end of its own, never written: without one, each writer that closes the FIFO
  // leaves it hung up, and poll() would report that again at once, for ever.
  m_keepOpen = ::open(m_fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (m_keepOpen < 0) {
    fail("cannot open");
    return;
  }
  if (::pipe2(m_wake, O_CLOEXEC) != 0) {
    fail("cannot watch");
    return;
  }
  m_thread = std::thread([this] { watch(); });
}

ControlChannel::~ControlChannel() {
  if (m_thread.joinable()) {
    const char end = 'x';
    while (::write(m_wake[1], &end, 1) < 0 && errno == EINTR) {
    }
    m_thread.join();
  }
  closeFd(m_wake[0]);
  closeFd(m_wake[1]);
  closeFd(m_read);
  closeFd(m_keepOpen);
  // Gone with the run: a `ptw stop` after it finds no channel, and the store says the run ended.
  ::unlink(m_fifo.c_str());
  ::rmdir(m_dir.c_str());
}

// Whole lines; anything but "stop" and "stacks" is not a request of this build and is passed over. A
// line longer than the buffer is dropped whole.
void ControlChannel::watch() {
  std::string line;
  char buf[512];
  for (;;) {
    pollfd fds[2] = {{m_read, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
    const int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || fds[1].revents != 0) return;
    const ssize_t got = ::read(m_read, buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) continue;  // cannot happen while m_keepOpen holds a write end
    for (ssize_t i = 0; i < got; ++i) {
      if (buf[i] != '\n') {
        if (line.size() < 256) line += buf[i];
        continue;
      }
      if (line == "stop" && m_onStop) m_onStop();
      if (line == "stacks" && m_onStacks) m_onStacks();
      line.clear();
    }
  }
}

void ControlChannel::requestStop(const std::string& runDir) { send(runDir, "stop\n"); }

void ControlChannel::requestStacks(const std::string& runDir) { send(runDir, "stacks\n"); }

void ControlChannel::send(const std::string& runDir, const std::string& request) {
  const std::string fifo = pathIn(runDir);
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    PTW_CHECK(err != EACCES && err != EPERM, "cannot open ", fifo, " (", std::strerror(err),
              "): only the user who started the run can ", request == "stop\n" ? "stop it" : "ask for its stacks");
    PTW_CHECK(err != ENOENT, "no control channel at ", fifo,
              ": the run was started by a ptw without one, or its supervisor is ending");
    PTW_CHECK(err != ENXIO, "nothing reads ", fifo, ": the run's supervisor is ending or gone");
    PTW_FAIL("cannot open ", fifo, " (", std::strerror(err), ")");
  }
  struct stat st {};
  const bool fifoKind = ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
  // One write of fewer than PIPE_BUF bytes: whole, or not at all (a FIFO full of requests).
  const ssize_t wrote = fifoKind ? ::write(fd, request.data(), request.size()) : -1;
  const int err = errno;
  ::close(fd);
  PTW_CHECK(fifoKind, fifo, " is not a FIFO: not a control channel of ptw");
  PTW_CHECK(wrote == static_cast<ssize_t>(request.size()), "cannot write to ", fifo, " (", std::strerror(err), ")");
}

namespace {

// The run `spec` names, checked to be running here under a supervisor that is there; `what`
// is the request, for the messages ("stop", "stacks").
RunRow runningRun(const std::string& runsDir, const std::string& spec, const std::string& what) {
  StoreDatabase db(runsDir + "/runs.sqlite", StoreDatabase::ReadOnly{});
  RunCatalog catalog(db);
  const RunRow run = catalog.named(spec);
  PTW_CHECK(run.status == "running", "run ", run.id, " is not running (", run.status,
            run.endedAt.empty() ? std::string() : " at " + run.endedAt, "); ",
            what == "stop" ? "nothing to stop" : "its ranks have ended, and with them their stacks");
  PTW_CHECK(!supervisorGone(run), "run ", run.id, " is marked running, but its supervisor (pid ", run.pid,
            ") is gone; `ptw runs` marks it interrupted");
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  PTW_CHECK(run.host == host, "run ", run.id, " runs on host ", run.host, ", not on this one (", host, "); run `ptw ",
            what, "` there");
  return run;
}

}  // namespace

RunRow requestRunStop(const std::string& runsDir, const std::string& spec) {
  const RunRow run = runningRun(runsDir, spec, "stop");
  try {
    ControlChannel::requestStop(run.dir);
  } catch (const Error& e) {
    PTW_FAIL("run ", run.id, ": cannot ask it to stop: ", e.what());
  }
  return run;
}

std::string requestRunStacks(const std::string& runsDir, const std::string& spec, double waitS) {
  const RunRow run = runningRun(runsDir, spec, "stacks");
  const StacksFileIds before = listStacksFiles(run.dir);
  try {
    ControlChannel::requestStacks(run.dir);
  } catch (const Error& e) {
    PTW_FAIL("run ", run.id, ": cannot ask it for its stacks: ", e.what());
  }
  // Taking them is bounded (LaunchOptions::stacksBudgetS); the wait is too, and ends early
  // when the supervisor does.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(waitS * 1000));
  while (std::chrono::steady_clock::now() < until) {
    if (std::string path = newStacksFile(run.dir, before); !path.empty()) return path;
    if (supervisorGone(run)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  PTW_FAIL("run ", run.id, ": its supervisor wrote no stacks within ", waitS,
           " s (the run is ending, or between attempts); try again");
}

}  // namespace ptw::core
