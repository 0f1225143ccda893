// SPDX-License-Identifier: GPL-3.0-or-later
// What /proc says of this host's processes, and ending those a run's programs left outside
// the run's process groups, found by the run's token in their environment (Note [Script
// ranks] in common/command.h). The launcher sweeps its own host; the host agent sweeps the
// host it runs on (Note [Host agent] in launch/host_agent.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace ptw::core {

/// Calls `visit` with the pid of each process /proc lists (none where /proc cannot be read).
/// Example: forEachProcess([&](long pid) { if (parentOf(pid) == me) children.push_back(pid); })
void forEachProcess(const std::function<void(long pid)>& visit);

/// `pid`'s parent, from /proc/PID/stat; -1 when there is no such process (any more).
long parentOf(long pid);

/// SIGKILLs every process but this one whose environment holds `variable` ("NAME=VALUE"),
/// and again for those that appear meanwhile (a child forked as its parent died), until
/// none is found or `limit` has passed. Only this user's processes can be read, and so
/// killed. Returns how many processes it killed.
/// Example: sweepProcessesWithVariable("PTW_RUN_TOKEN=" + runToken(::getpid(), port))
std::size_t sweepProcessesWithVariable(const std::string& variable,
                                       std::chrono::milliseconds limit = std::chrono::seconds(2));

}  // namespace ptw::core
