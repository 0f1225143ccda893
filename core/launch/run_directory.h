// SPDX-License-Identifier: GPL-3.0-or-later
// Where runs live on disk: one folder per run under the runs directory, holding the
// resolved profile, per-rank logs and results.
#pragma once

#include <string>

#include "common/profile.h"

namespace ptw::core {

/// $PTW_RUNS_DIR, else $XDG_DATA_HOME/ptw/runs, else ~/.local/share/ptw/runs.
std::string defaultRunsDirectory();

/// Creates `<runsDir>/<UTC time>-<profile name>[-n]/` with the resolved profile in it as
/// profile.json, and returns its path. Throws ptw::Error naming the directory when it
/// cannot be created or written.
std::string createRunDirectory(const std::string& runsDir, const Profile& profile);

}  // namespace ptw::core
