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

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
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

/// Whether a template of command.args, command.env or command.cwd names `field` ("hyper.lr").
bool commandNamesField(const Profile& profile, const std::string& field);

/// The samples a rank takes per step as the profile declares them: hyper.batch_size when a
/// template passes it to the program ({hyper.batch_size} in command.args or command.env);
/// NaN (not declared) otherwise.
double declaredBatch(const Profile& profile);

/// The token that marks every process of one run, in PTW_RUN_TOKEN (Note [Script ranks]).
std::string runToken(long launcherPid, int port);

/// Where a rank sits in a run over several hosts, numbered as torchrun numbers a multi-node
/// run: the hosts (groups) in the order hosts.hosts lists them, the ranks of each host in
/// rank order.
/// Example: placeRank({"a", "a", "b", "b"}, 3) == HostPlace{1, 2, 1, 2}
struct HostPlace {
  int localRank = 0;   ///< LOCAL_RANK: the rank among its host's
  int localWorld = 1;  ///< LOCAL_WORLD_SIZE: the ranks on its host
  int groupRank = 0;   ///< GROUP_RANK (and NODE_RANK across hosts): its host's index
  int groupWorld = 1;  ///< GROUP_WORLD_SIZE: the hosts
  bool operator==(const HostPlace& o) const {
    return localRank == o.localRank && localWorld == o.localWorld && groupRank == o.groupRank &&
           groupWorld == o.groupWorld;
  }
};

/// The place of rank `rank` given each rank's host (rankHosts(profile) in profile.h). Throws
/// ptw::Error when `rank` has no host.
HostPlace placeRank(const std::vector<std::string>& rankHosts, int rank);

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
  std::string stacksFile;   ///< PTW_STACKS_FILE: where a Python program's stacks go (Note [Python stacks])
  /// Across hosts: the rank's place and MASTER_ADDR. None: every rank on this host, which is
  /// the master.
  std::optional<HostPlace> place = std::nullopt;
  std::string masterAddr = "127.0.0.1";  ///< MASTER_ADDR
};

// Note [Python stacks]
// Every command program gets PTW_STACKS_FILE (a path prefix in the run folder) and
// PTW_STACKS_SIGNAL (stacksSignal()). ptw's python folder, first on PYTHONPATH, holds a
// sitecustomize.py that makes each Python process open <prefix>.<pid> and register
// faulthandler on that signal: all its threads' frames, file and line, are written there by
// a C handler, whatever the interpreter is doing, when the launcher sends the signal to take
// the run's stacks (StackCollector). Only a process whose signal mask says it catches the
// signal is sent it, so a program that is not Python, or runs Python with -I, -E or -S, is
// never killed by it; its stack is taken with gdb instead. Nothing is sent while nothing is
// stuck and nobody asks. The files are removed when the program and its rank end.

/// The signal a Python command program dumps its stacks on (Note [Python stacks]): a
/// real-time one, which no common library uses.
int stacksSignal();

/// The prefix of rank `rank`'s Python stack files: rankN.pystacks in `runDir`, or with the
/// worker's pid in /tmp without a run folder.
std::string pythonStacksPrefix(const std::string& runDir, int rank, long workerPid);

/// Where ptw's own rank `rank` writes its native stacks when asked (Note [Native stacks] in
/// engine/native_stacks.h): rankN.stacks in `runDir`, or with the worker's pid in /tmp
/// without a run folder.
std::string nativeStacksFile(const std::string& runDir, int rank, long workerPid);

/// Removes the files of `prefix` (<prefix>.<pid>); never throws.
void removePythonStacksFiles(const std::string& prefix);

/// The program's environment: `base` (KEY=VALUE entries, e.g. from environ) with the
/// variables torchrun gives a process (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
/// GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE; on one host unless
/// ctx.place says where the rank sits across hosts, and then NODE_RANK too),
/// MASTER_ADDR, MASTER_PORT, the TORCHELASTIC_* six, NCCL_ASYNC_ERROR_HANDLING,
/// OMP_NUM_THREADS and PYTHONFAULTHANDLER, the last three unless `base` has them),
/// PYTHONUNBUFFERED, PYTHONPATH, PTW_METRICS, PTW_RUN_TOKEN, PTW_STACKS_FILE and
/// PTW_STACKS_SIGNAL set, then command.env (templates replaced) over them.
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

/// One record of the metrics protocol (docs/scripts.md): what a line held. Times given in
/// seconds (step_s, data_s, ...) are held in ms.
struct ScriptRecord {
  std::int64_t step = -1;  ///< -1: none given (a pattern without {step}: the next step)
  int rank = -1;           ///< -1: the process's own
  std::optional<double> loss, samples, samplesPerS, stepMs, dataMs, computeMs, commMs, optMs, lr, valLoss, valAccuracy;
  std::optional<std::int64_t> epoch;
  std::vector<std::pair<std::string, double>> scalars;  ///< any other numeric key

  /// Whether it holds a field of a step record (loss, samples, a time, lr).
  bool hasStepFields() const {
    return loss || samples || samplesPerS || stepMs || dataMs || computeMs || commMs || optMs || lr;
  }
  /// Takes every field `later` holds (a later report of the same step): each field keeps
  /// its last value, a scalar by its name.
  void merge(const ScriptRecord& later);
};

/// Parses one line of the protocol (a JSON object, without the newline). False, with
/// `error` saying what was wrong, for anything else. Never throws.
bool parseMetricsLine(std::string_view line, ScriptRecord& out, std::string& error);

/// command.pattern compiled: `{name}` matches a number and names it as a key of the protocol
/// (step, loss, step_s, a scalar); the rest is a Perl-compatible regular expression (PCRE2)
/// searched in a line. Without {step}, each matching line is the next step.
/// Example: OutputPattern("step {step} loss {loss}").match("step 3 loss 0.5", r) sets r.step 3.
class OutputPattern {
 public:
  /// Throws ptw::Error saying what is wrong (a bad name, a bad expression, groups of its own).
  explicit OutputPattern(const std::string& pattern);
  enum class Match { None, Record, Bad };
  /// Record: `out` holds what the line gave. Bad: the line is the pattern's but a capture is
  /// not what its key takes (a step of 2.5 or nan); `problem` says which. None otherwise, and
  /// for a line longer than kMaxLine.
  Match match(std::string_view line, ScriptRecord& out, std::string& problem) const;
  bool match(std::string_view line, ScriptRecord& out) const {
    std::string problem;
    return match(line, out, problem) == Match::Record;
  }
  /// Whether the pattern captures {step}.
  bool hasStep() const { return m_hasStep; }

  /// Lines longer than this are not searched: no metrics line is that long, and a program's
  /// binary output can be.
  static constexpr std::size_t kMaxLine = 4096;

  /// A compiled expression (PCRE2, JIT-compiled where the machine allows), with the space a
  /// match fills: one OutputPattern matches on one thread at a time.
  struct Compiled;

 private:
  std::shared_ptr<Compiled> m_regex;
  std::shared_ptr<Compiled> m_loose;  ///< the same, each {name} taking any token: names a bad capture
  std::string m_literal;              ///< text every matching line holds; lines without it are not searched
  std::vector<std::string> m_names;   ///< of the capture groups, in order
  bool m_hasStep = false;
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

// Note [Stretches of steps]
// Scripts count steps their own way: many print a per-epoch batch index (`Epoch: [e][i/N]`)
// that starts again each epoch, some report a step twice (a loss, then the same step's
// accuracy), some print a line per step with no counter at all. ptw numbers a rank's steps
// itself, the global step, so that none overwrites another:
// - A record of the step the rank is on (the same counter, and the same epoch where one is
//   given) is more of that step: its fields merge into one record, a field given twice keeps
//   its last value. A step is held until the rank's next step comes, its program ends, or
//   kHoldMs pass with nothing new for it; then it becomes ptw's records.
// - A counter that goes back, or stays while the epoch changes, starts a new stretch: its
//   first step follows the last global step by the counter's last stride (so a per-epoch
//   index printed every 10 batches of 100 gives 0..90, then 100..190).
// - Within a stretch the global step is the counter plus the stretch's offset, which each
//   step record keeps (StepRecord::stepOffset): the export and the charts show both.
// - A pattern without {step} makes each matching line the next step (1, 2, ...).
// A step record stands for the steps since the rank's previous one (a script printing every
// 10th step): its step time is the time since then over their count, and its samples the
// declared batch times their count, so steps/s and samples/s come out per step.

/// Turns protocol records into ptw's records, rank by rank (Note [Stretches of steps]): a
/// step record where the step has a step field, a validation record where it has val_loss,
/// a scalar record per named scalar.
class ScriptMetrics {
 public:
  /// `ownRank`: the rank of a record that names none; `ranks`: the ranks records may name;
  /// `batch`: the samples a rank takes per step, where the profile declares them (NaN: not
  /// declared; then samples/s is only what the script reports).
  ScriptMetrics(int ownRank, int ranks, double batch = std::nan(""));
  /// Takes `in`, which arrived `nowMs` after the program started, appending to `out` the
  /// records of a step it ends; "" or what was wrong with it (a rank out of range, a field
  /// of a step already sent), in which case what was wrong is not kept.
  std::string take(const ScriptRecord& in, double nowMs, std::vector<Record>& out);
  /// Appends the records of every step held for `holdMs` or more with nothing new (every
  /// step held, with 0: the program ended).
  void flush(double nowMs, double holdMs, std::vector<Record>& out);
  /// The highest global step any record named; -1 before the first.
  std::int64_t lastStep() const { return m_lastStep; }
  /// The global step of the rank furthest behind, among those that have reported; -1 before
  /// any. What the heartbeats say, so that one of mpirun's ranks that hangs while the others
  /// go on is a stall.
  std::int64_t progressStep() const;

  /// How long a step is held for more of its fields.
  static constexpr double kHoldMs = 1000;

 private:
  struct Rank {
    std::int64_t lastRaw = -1;              ///< the script's counter at its last step; -1 before the first
    std::optional<std::int64_t> lastEpoch;  ///< the epoch given with it
    std::int64_t stride = 1;                ///< the counter's last step forward
    std::int64_t offset = 0;                ///< global = counter + offset, in this stretch
    std::int64_t global = -1;               ///< the global step of the last step; -1 before the first
    std::int64_t sentGlobal = -1;           ///< the global step of the last step record sent
    double sentMs = 0;                      ///< when the step of the last step record sent began
    bool held = false;                      ///< `step` waits for more of its fields
    bool sent = false;                      ///< the current step went out already (held past kHoldMs)
    ScriptRecord step;                      ///< the current step, merged
    double beganMs = 0, lastPieceMs = 0;    ///< when its first and its latest record came
    std::int64_t counted = 0;               ///< lines of a pattern without {step}
  };
  void send(int rank, Rank& r, std::vector<Record>& out);

  const int m_own;
  const double m_batch;
  std::vector<Rank> m_ranks;
  std::int64_t m_lastStep = -1;
};

}  // namespace ptw::core
