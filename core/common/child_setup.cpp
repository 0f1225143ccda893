// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/child_setup.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace ptw::core {

void setUpChild(const ChildSetup& setup) {
  if (setup.processGroup >= 0) ::setpgid(0, setup.processGroup);
  ::prctl(PR_SET_PDEATHSIG, setup.deathSignal);
  if (::getppid() != setup.parent) ::_exit(kChildCannotExec);  // it died before the request took
  // The parent's handlers go before any signal is let in: one arriving in between would run
  // the parent's handler in this child (writing to the parent's pipes, taking its locks).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGHUP}) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (setup.stdinFd >= 0) ::dup2(setup.stdinFd, 0);
  if (setup.stdoutFd >= 0) ::dup2(setup.stdoutFd, 1);
  if (setup.stderrFd >= 0) ::dup2(setup.stderrFd, 2);
}

void childExecFailed(const char* message) {
  [[maybe_unused]] auto n = ::write(2, message, std::strlen(message));
  ::_exit(kChildCannotExec);
}

}  // namespace ptw::core
