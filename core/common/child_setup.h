// SPDX-License-Identifier: GPL-3.0-or-later
// What a child process does between fork() and exec: the set-up that the launcher's ranks and
// a command rank's program share (Note [Worker lifetime] in launch/launcher.h, Note [Script
// ranks] in common/command.h).
#pragma once

#include <signal.h>
#include <sys/types.h>

namespace ptw::core {

/// Example: ChildSetup(::getpid()).setProcessGroup(pgid).setStdin(devNull).setStdout(out).setStderr(err)
struct ChildSetup {
  explicit ChildSetup(pid_t parent) : parent(parent) {}

  pid_t parent;               ///< the forking process: the child dies with it
  pid_t processGroup = -1;    ///< the group to join (0: one of its own); -1: stay in the parent's
  int stdinFd = -1;           ///< becomes descriptor 0; -1: keep the parent's
  int stdoutFd = -1;          ///< becomes descriptor 1; -1: keep the parent's
  int stderrFd = -1;          ///< becomes descriptor 2; -1: keep the parent's
  int deathSignal = SIGKILL;  ///< what the child gets when the parent's thread dies

  ChildSetup& setProcessGroup(pid_t v) {
    processGroup = v;
    return *this;
  }
  ChildSetup& setStdin(int fd) {
    stdinFd = fd;
    return *this;
  }
  ChildSetup& setStdout(int fd) {
    stdoutFd = fd;
    return *this;
  }
  ChildSetup& setStderr(int fd) {
    stderrFd = fd;
    return *this;
  }
  ChildSetup& setDeathSignal(int sig) {
    deathSignal = sig;
    return *this;
  }
};

/// The exit status of a child that never became its program (its parent was gone, or exec
/// failed), as a shell gives for a command it cannot run.
inline constexpr int kChildCannotExec = 127;

/// In the child after fork(): joins the process group, asks for its death signal when the parent's
/// thread dies (exiting kChildCannotExec if the parent is gone already), clears the signal
/// mask and the dispositions of SIGINT, SIGTERM, SIGPIPE and SIGHUP that the parent set (an
/// ignored signal would stay ignored across exec), and moves the descriptors into place.
/// Async-signal-safe only, as everything after fork() in a process with threads must be:
/// `setup` is built before fork().
void setUpChild(const ChildSetup& setup);

/// In the child, when exec returned: writes `message` (a line) to stderr and exits
/// kChildCannotExec. Async-signal-safe.
[[noreturn]] void childExecFailed(const char* message);

}  // namespace ptw::core
