// SPDX-License-Identifier: GPL-3.0-or-later
// StackCollector: where each rank of a run is, as the frames of its threads, taken from
// outside the ranks when one stalls or when `ptw stacks` asks (docs/stacks.md).
//
// Note [Taking stacks]
// A ptw-worker writes its own frames when sent the stacks signal (Note [Native stacks] in
// engine/native_stacks.h): function names, in milliseconds. One that does not catch the
// signal, or does not answer within kOwnAnswerS, is read with gdb (eu-stack where gdb is
// missing), attached for a moment and detached: function names, and file and line where
// there is debug information. A rank on another host started over ssh is asked on its
// control line and writes to the run folder the hosts share; nothing else reaches it. A
// command rank's Python processes dump their own (Note [Python stacks] in common/command.h);
// a program that does not take the signal (not Python) is read with gdb like a worker. Every
// rank is taken at once and the whole is bounded (budgetS): what is not done by then is said
// and left. What cannot be had (no gdb, ptrace not permitted, a rank on another host, a rank
// that ended meanwhile) is said in that rank's section and changes nothing for the run: the
// collector only reads, signals the stacks signal to processes that catch it, and never
// waits for a rank. Nothing is collected while nothing is stuck and nobody asks.
#pragma once

#include <string>
#include <vector>

namespace ptw::core {

/// One rank to take: its process (a ptw-worker, or ssh for a remote rank).
struct StackTarget {
  int rank = 0;
  int pid = 0;
  std::string host = "";          ///< "" = this machine
  bool remote = false;            ///< its process is ssh or srun: its stacks cannot be had from here
  std::string pythonPrefix = "";  ///< a command rank's PTW_STACKS_FILE; "" for ptw's own ranks
  std::string nativeFile = "";    ///< where ptw's own rank writes its frames (nativeStacksFile); "" for command ranks
  int controlFd = -1;             ///< a remote rank's control line, to ask it there; -1: none (srun, local)
  std::string ask = "stacks\n";   ///< what asks it there: "stacks R" to a host agent (Note [Host agent])
};

/// What was taken of one rank.
struct RankStacks {
  int rank = 0;
  int pid = 0;
  std::string host = "";
  std::string kind = "";    ///< "python", "native" or "" when none was had
  std::string tool = "";    ///< who took native frames: "ptw-worker" (the rank itself), "gdb" or "eu-stack"
  std::string frames = "";  ///< the frames as the tool wrote them, noise left out
  std::string note = "";    ///< why there are none, or what else to know ("ended while its stack was taken")
};

/// Example: StackCollector(5.0).collect({{0, 1234}, {1, 1235}})
class StackCollector {
 public:
  /// How long a ptw-worker has to write its own frames before gdb reads it instead.
  static constexpr double kOwnAnswerS = 1.5;

  explicit StackCollector(double budgetS = 10.0) : m_budgetS(budgetS) {}

  /// Takes every target's stacks at once (natively, as many at a time as there are cores, in
  /// the order given: the rank that matters most first), in at most budgetS seconds. Returns
  /// them by rank. Never throws.
  std::vector<RankStacks> collect(const std::vector<StackTarget>& targets) const;

  /// The stacks file: a header line (`title`), then a section per rank; a rank whose frames
  /// are the same as an earlier rank's (addresses and arguments aside) says so instead, so
  /// that the rank that differs stands out.
  static std::string render(const std::vector<RankStacks>& stacks, const std::string& title);

  /// The innermost frames of a rank's main thread, for a message: "wait_forever (script.py:7)
  /// from <module> (script.py:12)"; for native frames, the innermost two with a source file of
  /// the program's own (not the C or C++ library's). "" when there are none.
  static std::string topFrames(const RankStacks& stacks);

  /// Writes `text` to <dir>/stacks-<attempt>.txt whole (a new file renamed over the old),
  /// and returns its path; "" (and nothing written) when it cannot.
  static std::string write(const std::string& dir, int attempt, const std::string& text);

 private:
  double m_budgetS;
};

}  // namespace ptw::core
