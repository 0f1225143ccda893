// SPDX-License-Identifier: GPL-3.0-or-later
// FollowStream: what `ptw follow` writes on stdout, a run's records and log lines as they are
// stored (RunFollower), in one of two forms: binary frames for programs of the same build,
// or a JSON object a line for people and scripts. The layout is in docs/protocol.md
// ("Following a run"); decode() reads the frame form back.
//
// Note [Follow frames]
// The frame form starts with one text line, so that a reader can tell what it got before
// the first frame:
//   ptw-follow 1 ptw=VERSION run=ID record_frame=BYTES byte_order=little|big\n
// then frames, each starting with a u32 magic in native byte order (like the worker's
// frames, record.h: both ends are one build on one host, which the header line lets a
// reader check):
//   "PTWR"  a record frame exactly as encodeRecord writes it (kinds S, V and N)
//   "PTWL"  u32 magic | i32 rank | u32 n | n bytes: a line of rankN.log, without its '\n'
//   "PTWH"  u32 magic | i32 ranks | u32 n | n bytes: each rank's host, one a line; sent once
//           the run's nodes are known (a SLURM job's, Note [SLURM ranks])
//   "PTWE"  u32 magic | i32 exit code | u32 n | n bytes: the run's status, a tab, its
//           message; the stream's last frame
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/record.h"

namespace ptw::core {

struct RunRow;

class FollowStream {
 public:
  enum class Format { Frames, Jsonl };
  FollowStream(std::ostream& out, Format format) : m_out(out), m_format(format) {}

  /// The header line (frames) or the run object (jsonl): first, once.
  void begin(const RunRow& run);
  /// A step, validation or scalar record.
  void record(const Record& r);
  /// A line of rank `rank`'s log, without its newline.
  void log(int rank, std::string_view line);
  /// Each rank's host, once they are known (a SLURM job's nodes).
  void hosts(const std::vector<std::string>& rankHosts);
  /// How the run ended and the exit code `ptw follow` ends with: last.
  void end(const RunRow& run, int exitCode);
  /// Writes out what is buffered; false once the output cannot be written (a closed pipe).
  bool flush();

  /// What decode() reads back from the frame form.
  struct Decoded {
    std::vector<Record> records;
    std::vector<std::pair<int, std::string>> logs;   ///< rank, line
    std::optional<std::pair<int, std::string>> end;  ///< exit code, "status\tmessage"
    std::optional<std::vector<std::string>> hosts;   ///< each rank's host, when told
  };
  /// Reads the frames of `in` (after the header line) into `out`; returns the bytes used (a
  /// frame cut short at the end is left). Sets `malformed` and stops at a frame it does not
  /// know.
  static std::size_t decode(std::string_view in, Decoded& out, bool& malformed);

 private:
  std::ostream& m_out;
  Format m_format;
  std::string m_buf;
};

}  // namespace ptw::core
