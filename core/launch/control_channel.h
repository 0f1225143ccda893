// SPDX-License-Identifier: GPL-3.0-or-later
// ControlChannel: how a run is asked to stop from outside its supervisor (`ptw stop`), through
// its run folder and nothing else.
//
// Note [Control channel]
// A supervisor makes a FIFO, <run folder>/supervisor/control, mode 0600 in a folder of mode
// 0700, and reads requests from it on a thread of its own while the run goes on: one line
// each, "stop\n" asking for the graceful stop a SIGINT gives (the ranks are asked, then
// SIGTERM after the grace; every record is stored), "stacks\n" for every rank's stacks
// (Note [Taking stacks]), which the supervisor writes to stacks-<attempt>.txt in the run
// folder, a whole file renamed into place, for `ptw stacks` to wait for. Only the user who started the run can
// open it: another user's open fails on the folder's mode (EACCES), and the run goes on. A
// writer opens it without blocking, so a supervisor that is gone or ending (no reader) is
// said at once (ENXIO) rather than waited for. No socket and no port: nothing listens on
// the network. The FIFO and its folder are removed when the run ends.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "launch/run_catalog.h"

namespace ptw::core {

/// `ptw stop`: asks the supervisor of run `run` (an id, or "latest") of the store in
/// `runsDir` to stop it, and returns the run. Opens the store read-only. Throws ptw::Error
/// saying why it cannot: no such run, a run not running, one of another host or user.
RunRow requestRunStop(const std::string& runsDir, const std::string& run);

/// `ptw stacks`: asks the supervisor of run `run` for its ranks' stacks and waits, at most
/// `waitS` seconds, for the file it writes. Returns its path. Throws ptw::Error as
/// requestRunStop does, and when no file came in time.
std::string requestRunStacks(const std::string& runsDir, const std::string& run, double waitS = 20);

class ControlChannel {
 public:
  /// Makes the channel in `runDir` and reads it until destroyed, calling `onStop` (from its
  /// own thread) for each stop request, `onStacks` for each stacks request. Never throws: a
  /// channel that cannot be made (a file system without FIFOs) is said in problem(), and the
  /// run goes on without it.
  ControlChannel(const std::string& runDir, std::function<void()> onStop, std::function<void()> onStacks = {});
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  /// "" while the channel is open, else why there is none.
  const std::string& problem() const { return m_problem; }

  /// The channel's FIFO of the run in `runDir`.
  static std::string pathIn(const std::string& runDir);
  /// Asks the supervisor of the run in `runDir` to stop (Note [Control channel]). Throws
  /// ptw::Error saying why it cannot: no channel, another user's run, no supervisor reading.
  static void requestStop(const std::string& runDir);
  /// Asks it for the ranks' stacks; throws as requestStop does.
  static void requestStacks(const std::string& runDir);

 private:
  void watch();
  static void send(const std::string& runDir, const std::string& request);

  std::string m_dir, m_fifo;
  std::function<void()> m_onStop, m_onStacks;
  std::string m_problem;
  int m_read = -1, m_keepOpen = -1;  ///< the FIFO's read end, and a write end of its own (below)
  int m_wake[2] = {-1, -1};          ///< a pipe that ends the watch at once
  std::thread m_thread;
};

}  // namespace ptw::core
