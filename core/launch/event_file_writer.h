// SPDX-License-Identifier: GPL-3.0-or-later
// EventFileWriter: one TensorBoard event file, written without TensorFlow or protobuf.
//
// Note [Event files]
// TensorBoard reads any file whose name holds "tfevents" as a TFRecord file: a sequence of
// records, each `u64 length | u32 masked CRC-32C of those 8 bytes | data | u32 masked
// CRC-32C of the data`, little-endian (common/crc32c.h). Each record's data is an Event
// protobuf, encoded here by hand since a scalar needs four wire types and no schema:
//
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
//
// The first record is the file version ("brain.Event:2"), then one Event per scalar. The
// file is written under a temporary name in its folder and renamed when closed, so neither
// TensorBoard nor a failed export ever sees half of it; tests/core/read_tfevents.py reads it
// back with protobuf's own decoder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ptw::core {

/// Example: EventFileWriter w("logs/rank0/events.out.tfevents.1700000000.host.ptw", 1700000000.0);
///          w.scalar("loss", 1, 0.25f, 1700000000.5); w.close();
class EventFileWriter {
 public:
  /// Starts the file at `path` (its folder must exist) with the file-version event at
  /// `wallTime` (seconds since the epoch). Throws ptw::Error naming the file when it cannot.
  EventFileWriter(std::string path, double wallTime);
  /// Without close(): removes what was written (an export that failed leaves no file).
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// Appends one scalar event: `value` of series `tag` at `step`, at `wallTime`.
  void scalar(std::string_view tag, std::int64_t step, float value, double wallTime);
  /// Writes what is buffered and gives the file its name. Throws ptw::Error when it cannot.
  void close();

  const std::string& path() const { return m_path; }
  std::int64_t events() const { return m_events; }

  /// The record framing of `data` (Note [Event files]), appended to `out`.
  static void appendRecord(std::string_view data, std::string& out);

 private:
  void record(std::string_view event);
  void writeBuffer();

  std::string m_path, m_tmp;
  int m_fd = -1;
  std::string m_buffer, m_event, m_summary, m_value;  ///< reused: no allocation per event
  std::int64_t m_events = 0;
};

}  // namespace ptw::core
