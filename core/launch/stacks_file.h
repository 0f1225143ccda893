// SPDX-License-Identifier: GPL-3.0-or-later
// StacksFile: a stacks file (docs/stacks.md) read back into a section per rank, with the
// outermost frames every rank shares marked, so that a viewer (the window's Stacks pane) can
// fold them and the rank that differs stands out. Also how a run folder's stacks files are
// found, and a new one told from an old.
//
// Note [Shared frames]
// Two frames are the same when their function and file:line are, addresses, arguments and
// thread ids aside: the comparison StackCollector::render makes for "same frames as rank K".
// Threads are matched by their place from the last one listed, which is the main thread for
// both gdb ("thread apply all bt" lists thread 1 last) and faulthandler (the newest thread
// first); ranks with more threads have theirs matched with nothing. A thread's shared frames
// are the outermost ones that every rank with frames has at the same depth from the outside
// of its matching thread. With fewer than two ranks' frames nothing is shared.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ptw::core {

/// One frame of faulthandler's, gdb's or eu-stack's output.
struct StackFrame {
  std::string function = "";  ///< without arguments; "??" where the tool had no name
  std::string location = "";  ///< file:line, the file without its folder; "" when unknown
  std::string path = "";      ///< the source file as the tool named it (native frames)
  std::string line = "";      ///< the line as the file has it

  /// "wait_forever (train.py:17)", or the function alone without a location.
  std::string describe() const;
  /// Same function and place (Note [Shared frames]).
  bool samePlace(const StackFrame& o) const { return function == o.function && location == o.location; }
};

/// One thread's frames, innermost first as the tools write them.
struct StackThread {
  std::string header = "";   ///< "Thread 1 (Thread 0x7f (LWP 12) \"ptw-worker\"):", "Current thread 0x7f ..."
  std::string process = "";  ///< python: the "process PID (NAME):" line it comes under; "" for native
  std::vector<StackFrame> frames;
  std::size_t shared = 0;  ///< how many of the outermost frames every rank shares (Note [Shared frames])
};

/// One rank's section.
struct StackSection {
  int rank = -1;
  int pid = 0;
  std::string host = "";
  std::string kind = "";  ///< "python", "native", or "" when none were had
  std::string note = "";  ///< why there are none, or what else to know (the "(...)" line)
  int sameAs = -1;        ///< the earlier rank whose frames these are ("same frames as rank K"); -1: its own
  std::vector<StackThread> threads;
  std::string text = "";  ///< the section as the file has it, its header line first
};

struct StacksFile {
  std::string title = "";              ///< the file's first line
  int behind = -1;                     ///< the rank the title names (a stall, a timeout); -1 when taken on request
  std::vector<StackSection> sections;  ///< in the file's order (by rank)

  /// The section of `rank`; null when the file has none.
  const StackSection* section(int rank) const;
  /// The section that holds `rank`'s frames: its own, or the one "same frames as" names.
  const StackSection* framesOf(int rank) const;
};

/// Reads the text of a stacks file; `name` (its path) is for the message. Throws ptw::Error
/// naming it and what was expected when it is not one.
StacksFile parseStacksFile(const std::string& text, const std::string& name = "stacks file");
/// Reads the stacks file at `path`; throws ptw::Error naming it when it cannot.
StacksFile readStacksFile(const std::string& path);

/// A frame line of faulthandler ("  File \"/x/a.py\", line 7 in f") for kind "python", of gdb
/// or eu-stack ("#3  0x55 in f (a=1) at /src/x.cpp:9") for "native": its function and place,
/// addresses and arguments left out. False for any other line.
bool parseFrameLine(const std::string& kind, const std::string& line, StackFrame& frame);
/// A line that starts a thread: gdb's "Thread N (...)", faulthandler's "Thread 0x..." and
/// "Current thread 0x...", eu-stack's "TID N:".
bool isThreadHeader(const std::string& line);

/// Each stacks-*.txt of a run folder, by name, with what tells a new one from an old (its
/// inode and modification time: a file renamed into place has an inode of its own).
using StacksFileIds = std::map<std::string, std::pair<std::uint64_t, std::int64_t>>;
StacksFileIds listStacksFiles(const std::string& runDir);
/// The path of a stacks file in `runDir` that `before` lacks or that changed since; "" when none.
std::string newStacksFile(const std::string& runDir, const StacksFileIds& before);
/// The path of the run folder's stacks file of the latest attempt; "" when it has none.
std::string latestStacksFile(const std::string& runDir);

}  // namespace ptw::core
