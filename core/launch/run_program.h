// SPDX-License-Identifier: GPL-3.0-or-later
// Runs a short helper program (ssh for a check, SLURM's squeue and scancel) without a shell and
// with a bound on how long it may take, for what it says.
#pragma once

#include <string>
#include <vector>

namespace ptw::core {

/// `argv`'s stdout and stderr together in `out` (its first 64 KiB), stdin on /dev/null,
/// waiting at most `limitS` (then killed); its exit code, or -1 when it could not run or was
/// killed. argv[0] is a path; it is run without a shell.
int runProgram(const std::vector<std::string>& argv, double limitS, std::string& out);

/// As above, started in the folder `cwd` ("": this process's) with `env` (KEY=VALUE entries)
/// as its whole environment: a program checked as a rank would start it.
int runProgram(const std::vector<std::string>& argv, double limitS, std::string& out, const std::string& cwd,
               const std::vector<std::string>& env);

/// The last line of `text` that says something ("" when none does).
std::string lastLine(const std::string& text);

}  // namespace ptw::core
