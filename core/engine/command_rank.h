// SPDX-License-Identifier: GPL-3.0-or-later
// A rank of the `command` strategy: starts the profile's program, stands for it before the
// launcher, and reports how it ended (Note [Script ranks] in common/command.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/command.h"
#include "common/profile.h"
#include "common/record.h"
#include "common/worker_invocation.h"

namespace ptw::engine {

struct ScriptRank {
  const core::Profile& profile;
  int rank = 0;
  int world = 1;
  int port = 0;                       ///< MASTER_PORT, and with the launcher's pid the run's token
  std::string outDir = "";            ///< the run folder: the metrics FIFO goes there ("" : /tmp)
  const std::atomic<bool>& stop;      ///< a stop signal arrived
  const std::atomic<int>& stoppedBy;  ///< non-zero when it came from outside ptw
  /// Takes each record; may throw (the step file is full), which ends the program.
  std::function<void(const core::Record&)> write;
  /// Notes the program's latest step, for the heartbeats.
  std::function<void(std::int64_t)> passed;
  /// Set once the program has reported a record: heartbeats then say "train", not "quiet".
  std::atomic<bool>& reported;
  int attempt = 0;  ///< the restart count (TORCHELASTIC_RESTART_COUNT)
  /// Across hosts: the rank's place (LOCAL_RANK, GROUP_RANK ...) and MASTER_ADDR; none: every
  /// rank on this host.
  std::optional<core::HostPlace> place = std::nullopt;
  std::string masterAddr = "127.0.0.1";
};

/// Runs the program until it ends; returns the worker's exit code (protocol.md): Finished when
/// it finished or was stopped (StoppedFromOutside by someone else), Failed when it failed,
/// BadInput when it could not be started.
core::WorkerExit runScriptRank(ScriptRank& rank);

}  // namespace ptw::engine
