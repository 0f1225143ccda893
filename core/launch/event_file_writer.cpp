// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/event_file_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/crc32c.h"
#include "common/error.h"

namespace ptw::core {
namespace {

// Protobuf wire types (Note [Event files]).
enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

constexpr std::size_t kFlushBytes = 256 * 1024;

void putVarint(std::uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void putKey(std::uint32_t field, WireType type, std::string& out) { putVarint((field << 3) | type, out); }

template <class T>
void putLittleEndian(T bits, std::string& out) {
  for (std::size_t i = 0; i < sizeof bits; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void putDouble(std::uint32_t field, double v, std::string& out) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  putKey(field, kFixed64, out);
  putLittleEndian(bits, out);
}

void putFloat(std::uint32_t field, float v, std::string& out) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  putKey(field, kFixed32, out);
  putLittleEndian(bits, out);
}

void putBytes(std::uint32_t field, std::string_view bytes, std::string& out) {
  putKey(field, kLengthDelimited, out);
  putVarint(bytes.size(), out);
  out.append(bytes);
}

}  // namespace

void EventFileWriter::appendRecord(std::string_view data, std::string& out) {
  std::string length;
  putLittleEndian(static_cast<std::uint64_t>(data.size()), length);
  out += length;
  putLittleEndian(maskCrc32c(crc32c(length)), out);
  out.append(data);
  putLittleEndian(maskCrc32c(crc32c(data)), out);
}

EventFileWriter::EventFileWriter(std::string path, double wallTime) : m_path(std::move(path)) {
  // A hidden name without "tfevents", which TensorBoard does not read.
  const auto slash = m_path.rfind('/');
  m_tmp = (slash == std::string::npos ? std::string() : m_path.substr(0, slash + 1)) + ".ptw-partial-" +
          std::to_string(::getpid());
  m_fd = ::open(m_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  PTW_CHECK(m_fd >= 0, m_path, ": cannot write (", std::strerror(errno), "); choose a writable folder");
  m_event.clear();
  putDouble(1, wallTime, m_event);
  putBytes(3, "brain.Event:2", m_event);
  record(m_event);
}

EventFileWriter::~EventFileWriter() {
  if (m_fd < 0) return;
  ::close(m_fd);
  ::unlink(m_tmp.c_str());
}

void EventFileWriter::scalar(std::string_view tag, std::int64_t step, float value, double wallTime) {
  m_value.clear();
  putBytes(1, tag, m_value);
  putFloat(2, value, m_value);
  m_summary.clear();
  putBytes(1, m_value, m_summary);  // Summary { value = [m_value] }
  m_event.clear();
  putDouble(1, wallTime, m_event);
  putKey(2, kVarint, m_event);
  putVarint(static_cast<std::uint64_t>(step), m_event);  // int64: two's complement, as protobuf does
  putBytes(5, m_summary, m_event);
  record(m_event);
  ++m_events;
}

void EventFileWriter::record(std::string_view event) {
  appendRecord(event, m_buffer);
  if (m_buffer.size() >= kFlushBytes) writeBuffer();
}

void EventFileWriter::writeBuffer() {
  std::size_t done = 0;
  while (done < m_buffer.size()) {
    const ssize_t n = ::write(m_fd, m_buffer.data() + done, m_buffer.size() - done);
    if (n < 0 && errno == EINTR) continue;
    PTW_CHECK(n > 0, m_path, ": write failed (", std::strerror(errno), ")");
    done += static_cast<std::size_t>(n);
  }
  m_buffer.clear();
}

void EventFileWriter::close() {
  if (m_fd < 0) return;
  writeBuffer();
  const int fd = m_fd;
  m_fd = -1;
  if (::close(fd) != 0 || std::rename(m_tmp.c_str(), m_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(m_tmp.c_str());
    PTW_FAIL(m_path, ": cannot write (", std::strerror(err), ")");
  }
}

}  // namespace ptw::core
