// SPDX-License-Identifier: GPL-3.0-or-later
// The worker process: one rank of a run, or a probe that trains nothing (--devices, --blas,
// --preflight, --check-port). Its command line, its exit codes and the lines --devices prints
// are core::WorkerInvocation, core::WorkerExit and core::DeviceInfo (common/worker_invocation.h,
// docs/protocol.md). A rank reads the resolved profile, joins the process group, trains (or,
// for the command strategy, runs the profile's program: command_rank.h), writes its step
// records to the run's step file where one is named, and sends the record protocol
// (common/record.h) to its launcher's record descriptor, or as text lines on stdout; logs and
// errors go to stderr.
#pragma once

namespace ptw::engine {

/// main() of ptw-worker; returns its exit code, a core::WorkerExit.
int workerMain(int argc, char** argv);

/// Never returns: the hang-at-step fault (Note [Injected faults]), a function of its own,
/// exported, so that the rank's stacks name it.
[[noreturn, gnu::noinline]] void hangInOwnWork();

}  // namespace ptw::engine
