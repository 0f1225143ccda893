// SPDX-License-Identifier: GPL-3.0-or-later
// The host agents' frames as text, for the agents of every node started as one SLURM job step.
//
// Note [One step for all nodes]
// Under SLURM the agents of all the run's nodes are the tasks of one job step: one srun, one
// process here, one step for the cluster's controller, however many nodes. srun gives every
// task the same input (--input=all), so the agents share one request, and each runs the ranks
// of its own node (SLURMD_NODENAME; AgentRequest::allNodes). srun gathers the tasks' outputs
// into its one stdout: it passes a task's output on in whole lines, but cuts a line that is too
// long, and what a task wrote just before it ended, in pieces, between which other tasks' lines
// come. With --label every piece is a line of its own that starts "TASK: ". Binary frames
// cannot survive that; text can. So such an agent writes each frame as one unit of text: its
// bytes in base64, in lines of at most kAgentTextLine characters, the unit ended by '.'. The
// reader keeps each task's text apart by its label, drops every line end (srun's and the
// agent's alike), and decodes a unit at its '.'. The agent's first frame names its node
// (AgentFrame::Node): task numbers follow SLURM's order of the nodes, not ptw's.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "launch/host_agent.h"

namespace ptw::core {

/// The longest line an agent writes in text: short of the piece size srun cuts lines at.
inline constexpr std::size_t kAgentTextLine = 760;

/// The text unit of one frame's bytes (encodeAgentFrame): base64 lines, the last ending ".\n".
std::string encodeAgentTextUnit(std::string_view frameBytes);

/// The task number of a line srun labelled ("  3: text" gives 3, `rest` "text"); -1 and the
/// whole line in `rest` for a line without a label (srun's own).
int splitTaskLabel(std::string_view line, std::string_view& rest);

/// srun's word that a task ended badly, "srun: error: NODE: task N: HOW": true, with its node
/// and a wait status (HOW "Killed": SIGKILL; "Exited with exit code 3": exit 3; else exit 1).
bool srunTaskEnd(std::string_view line, std::string& node, int& status);

/// Reads srun's labelled stdout, given in pieces of any size, into each task's frames.
class LabelledAgentStreams {
 public:
  /// Calls `frame` for each whole frame of each task in what has come so far. Once a task's
  /// text is found broken (not base64, a unit that is no frame) the stream is broken: error()
  /// says how, and nothing more is read.
  void feed(const char* data, std::size_t n, const std::function<void(int task, const AgentFrame&)>& frame);
  /// "" while the stream is sound, else what is wrong with it.
  const std::string& error() const { return m_error; }

 private:
  struct Task {
    std::string text;  // base64 of the unit not yet ended
    AgentStreamDecoder decoder;
  };
  void takeLine(std::string_view line, const std::function<void(int, const AgentFrame&)>& frame);

  std::string m_line;  // a line not yet ended
  std::map<int, Task> m_tasks;
  std::string m_error;
};

}  // namespace ptw::core
