// SPDX-License-Identifier: GPL-3.0-or-later
// The `command` strategy's plain parts: its profile section's checks, templates, the
// environment a rank's program gets, and the metrics protocol (JSON lines, or numbers picked
// out of output lines by a pattern) turned into records. No processes here: the worker side
// (engine/command_rank.cpp) starts and watches the program. docs/scripts.md is the user's view.
//
// Note [Script ranks]
// A rank of a `command` run is a ptw-worker that starts the user's program and stands for it:
// it gives the program the environment a torchrun-launched script expects, reads the records
// the program writes on its channel (PTW_METRICS, a FIFO in the run folder) or prints, and
// turns them into ptw's own records: step records into the run's step file and groups to the
// launcher, validation and named scalars on the record pipe, heartbeats. The launcher,
// supervisor, store, window and headless verdicts then treat the run as any other. The
// program stays in the run's process group, so every signal the launcher sends reaches it
// and its children too; a stop is SIGINT, SIGTERM, then SIGKILL (command.stop_grace_s
// apart), and at the end the launcher kills any process still carrying the run's token in
// its environment (PTW_RUN_TOKEN), which catches those that left the group (mpirun's
// children, daemons). Until a program has reported a record its rank's heartbeats say
// "quiet", and the stall timeout does not count it as stuck.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/profile.h"
#include "common/record.h"

namespace ptw::core {

/// The command section's problems (program, env entries, templates, pattern), for validate().
std::vector<FieldError> validateCommand(const Profile& profile);

/// `text` with every `{section.field}` replaced by that field's value in `profile` (a string
/// without its quotes, a number or list as JSON). Other braces are left as they are. Throws
/// ptw::Error naming the template when it names no field.
/// Example: expandTemplates("--lr={hyper.lr}", p) == "--lr=0.01"
std::string expandTemplates(const std::string& text, const Profile& profile);

/// The program and its arguments, templates replaced: argv[0] is command.program.
std::vector<std::string> commandLine(const Profile& profile);

/// The token that marks every process of one run, in PTW_RUN_TOKEN (Note [Script ranks]).
std::string runToken(long launcherPid, int port);

/// What a rank's program is given, on top of ptw-worker's own environment.
struct ScriptContext {
  int rank = 0;
  int world = 1;
  int port = 0;             ///< MASTER_PORT
  std::string metricsPath;  ///< PTW_METRICS
  std::string pythonDir;    ///< prepended to PYTHONPATH (ptw_metrics.py); "" leaves it
  std::string token;        ///< PTW_RUN_TOKEN
  std::string runId;        ///< TORCHELASTIC_RUN_ID: one for every rank and attempt of a run
  int attempt = 0;          ///< TORCHELASTIC_RESTART_COUNT: 0, then 1, 2 ... on restarts
  std::string errorFile;    ///< TORCHELASTIC_ERROR_FILE: where torch's @record writes (errorFileCause)
};

/// The program's environment: `base` (KEY=VALUE entries, e.g. from environ) with the
/// variables torchrun gives a process on one host (RANK, LOCAL_RANK, WORLD_SIZE,
/// LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT, the TORCHELASTIC_* six, NCCL_ASYNC_ERROR_HANDLING and
/// OMP_NUM_THREADS, the last two unless `base` has them), PYTHONUNBUFFERED, PYTHONPATH,
/// PTW_METRICS, PTW_RUN_TOKEN set, then command.env (templates replaced) over them.
/// docs/scripts.md lists them with their values.
std::vector<std::string> scriptEnvironment(const Profile& profile, const ScriptContext& ctx,
                                           const std::vector<std::string>& base);

/// The file a program to start as `program` is: a path as given (relative to `cwd`), a bare
/// name looked up on `path` (PATH's value), as execvp would. Throws ptw::Error naming
/// command.program and what to do when there is none or it cannot be run.
std::string resolveProgram(const std::string& program, const std::string& cwd, const std::string& path);

/// Whether `program` names a Python interpreter: its file name is python, python3 or
/// python3.N. Such a program is checked for torch before a run (preflight.h).
bool isPythonProgram(const std::string& program);

/// What the program raised, from the text of its TORCHELASTIC_ERROR_FILE as torch's
/// `@record` writes it (torch/distributed/elastic/multiprocessing/errors/error_handler.py:
/// {"message": {"message": "Type: text", "extraInfo": {"py_callstack": "<traceback>"}}}): the
/// exception's first line and the innermost frame of its traceback. "" when `text` is not
/// such a file. Never throws.
/// Example: errorFileCause(file) == "ValueError: bad batch 7 (at /w/train.py:12, in load)"
std::string errorFileCause(std::string_view text);

/// What a command rank prints after "error: [rank N] " when its program failed and left an
/// error file: this, then errorFileCause(). The launcher takes the cause from that line.
inline constexpr std::string_view kProgramRaised = "the program raised ";

/// One record of the metrics protocol (docs/scripts.md): what a line held.
struct ScriptRecord {
  std::int64_t step = -1;
  int rank = -1;  ///< -1: the process's own
  std::optional<double> loss, samples, samplesPerS, stepMs, dataMs, computeMs, commMs, optMs, lr, valLoss, valAccuracy;
  std::optional<std::int64_t> epoch;
  std::vector<std::pair<std::string, double>> scalars;  ///< any other numeric key
};

/// Parses one line of the protocol (a JSON object, without the newline). False, with
/// `error` saying what was wrong, for anything else. Never throws.
bool parseMetricsLine(std::string_view line, ScriptRecord& out, std::string& error);

/// command.pattern compiled: `{name}` matches a number and names it as a key of the protocol
/// (step, loss, a scalar); the rest is an ECMAScript regular expression searched in a line.
/// Example: OutputPattern("step {step} loss {loss}").match("step 3 loss 0.5", r) sets r.step 3.
class OutputPattern {
 public:
  /// Throws ptw::Error saying what is wrong (no {step}, a bad name, a bad expression).
  explicit OutputPattern(const std::string& pattern);
  /// False when the line does not match (or is too long to search).
  bool match(std::string_view line, ScriptRecord& out) const;

  /// Lines longer than this are not searched (std::regex recurses per character).
  static constexpr std::size_t kMaxLine = 4096;

 private:
  std::regex m_regex;
  std::vector<std::string> m_names;  ///< of the capture groups, in order
};

/// Splits bytes into lines. A line longer than `maxLine` is reported once as too long and
/// skipped up to its newline, so memory stays bounded whatever a program writes.
class LineSplitter {
 public:
  explicit LineSplitter(std::size_t maxLine) : m_max(maxLine) {}
  /// Calls line(text) for each whole line, or tooLong(bytes) for one past the limit.
  template <class Line, class TooLong>
  void feed(std::string_view bytes, Line&& line, TooLong&& tooLong) {
    while (!bytes.empty()) {
      const auto nl = bytes.find('\n');
      const std::string_view part = bytes.substr(0, nl);
      if (!m_skipping) {
        if (m_buf.size() + part.size() > m_max) {
          m_skipping = true;
          m_skipped = m_buf.size();
          m_buf.clear();
        } else {
          m_buf.append(part);
        }
      }
      if (m_skipping) m_skipped += part.size();
      if (nl == std::string_view::npos) return;
      if (m_skipping)
        tooLong(m_skipped);
      else
        line(std::string_view(m_buf));
      m_buf.clear();
      m_skipping = false;
      m_skipped = 0;
      bytes.remove_prefix(nl + 1);
    }
  }

 private:
  const std::size_t m_max;
  std::string m_buf;
  bool m_skipping = false;
  std::size_t m_skipped = 0;
};

/// Turns protocol records into ptw's records, rank by rank: a step record where the record
/// has a loss or samples (samples/s from the time since the rank's last one, unless given),
/// a validation record where it has val_loss, a scalar record per named scalar.
class ScriptMetrics {
 public:
  /// `ownRank`: the rank of a record that names none; `ranks`: the ranks records may name.
  ScriptMetrics(int ownRank, int ranks)
      : m_own(ownRank), m_lastMs(static_cast<std::size_t>(ranks), 0.0), m_steps(static_cast<std::size_t>(ranks), -1) {}
  /// Appends the records for `in`, which arrived `nowMs` after the program started; "" or
  /// what was wrong with it (a rank out of range), in which case nothing is appended.
  std::string convert(const ScriptRecord& in, double nowMs, std::vector<Record>& out);
  /// The highest step any record named; -1 before the first.
  std::int64_t lastStep() const { return m_lastStep; }
  /// The step of the rank furthest behind, among those that have reported; -1 before any.
  /// What the heartbeats say, so that one of mpirun's ranks that hangs while the others go on
  /// is a stall.
  std::int64_t progressStep() const;

 private:
  const int m_own;
  std::vector<double> m_lastMs;       ///< per rank: when its last step record arrived
  std::vector<std::int64_t> m_steps;  ///< per rank: its latest step; -1 before its first record
  std::int64_t m_lastStep = -1;
};

}  // namespace ptw::core
