// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/agent_text_stream.h"

#include <signal.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace ptw::core {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Each byte's value in base64, -1 for a byte that is none of its digits.
constexpr std::array<std::int8_t, 256> digitValues() {
  std::array<std::int8_t, 256> v{};
  for (auto& x : v) x = -1;
  for (int i = 0; i < 64; ++i) v[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
  return v;
}
constexpr auto kDigits = digitValues();

// The bytes of base64 `text` (padded to whole quads); false when it is not base64.
bool decodeBase64(std::string_view text, std::string& out) {
  if (text.size() % 4 != 0) return false;
  out.clear();
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    int pad = 0;
    std::uint32_t quad = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      int d = 0;
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
      } else {
        d = kDigits[static_cast<unsigned char>(c)];
        if (d < 0 || pad > 0) return false;
      }
      quad = (quad << 6) | static_cast<std::uint32_t>(d);
    }
    out += static_cast<char>((quad >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((quad >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(quad & 0xff);
  }
  return true;
}

}  // namespace

std::string encodeAgentTextUnit(std::string_view bytes) {
  std::string b64;
  b64.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (n > 1) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (n > 2) v |= static_cast<unsigned char>(bytes[i + 2]);
    b64 += kAlphabet[(v >> 18) & 63];
    b64 += kAlphabet[(v >> 12) & 63];
    b64 += n > 1 ? kAlphabet[(v >> 6) & 63] : '=';
    b64 += n > 2 ? kAlphabet[v & 63] : '=';
  }
  std::string out;
  out.reserve(b64.size() + b64.size() / kAgentTextLine + 2);
  for (std::size_t at = 0; at < b64.size(); at += kAgentTextLine) {
    out.append(b64, at, kAgentTextLine);
    if (at + kAgentTextLine < b64.size()) out += '\n';
  }
  return out + ".\n";
}

int splitTaskLabel(std::string_view line, std::string_view& rest) {
  std::size_t i = line.find_first_not_of(' ');
  const std::size_t digits = i == std::string_view::npos ? 0 : line.find_first_not_of("0123456789", i);
  rest = line;
  if (i == std::string_view::npos || digits == i || digits == std::string_view::npos || digits - i > 9 ||
      line.compare(digits, 2, ": ") != 0)
    return -1;
  rest = line.substr(digits + 2);
  return std::stoi(std::string(line.substr(i, digits - i)));
}

bool srunTaskEnd(std::string_view line, std::string& node, int& status) {
  constexpr std::string_view kError = "srun: error: ";
  if (line.substr(0, kError.size()) != kError) return false;
  const std::string_view rest = line.substr(kError.size());
  const std::size_t colon = rest.find(": task ");
  const std::size_t what = colon == std::string_view::npos ? colon : rest.find(": ", colon + 7);
  if (colon == 0 || what == std::string_view::npos) return false;
  node = std::string(rest.substr(0, colon));
  const std::string how(rest.substr(what + 2));
  status = 1 << 8;
  if (int code = 0; std::sscanf(how.c_str(), "Exited with exit code %d", &code) == 1) status = (code & 0xff) << 8;
  // srun says a signal by its description, in English (sigdescr_np is never translated, as
  // strsignal is under the window's locale), with " (core dumped)" after it perhaps.
  for (int sig = 1; sig < NSIG; ++sig)
    if (const char* name = ::sigdescr_np(sig); name && (how == name || how == std::string(name) + " (core dumped)"))
      status = sig;
  return true;
}

void LabelledAgentStreams::feed(const char* data, std::size_t n,
                                const std::function<void(int, const AgentFrame&)>& frame) {
  while (n > 0 && m_error.empty()) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', n));
    const std::size_t take = nl ? static_cast<std::size_t>(nl - data) : n;
    m_line.append(data, take);
    // A line longer than any srun passes on: no labelled agent output.
    if (m_line.size() > (64u << 10)) {
      m_error = "the host agents' stream is broken: a line of over 64 KiB";
      return;
    }
    if (!nl) return;
    takeLine(m_line, frame);
    m_line.clear();
    data += take + 1;
    n -= take + 1;
  }
}

void LabelledAgentStreams::takeLine(std::string_view line, const std::function<void(int, const AgentFrame&)>& frame) {
  std::string_view text;
  const int task = splitTaskLabel(line, text);
  if (task < 0) {
    if (!line.empty()) m_error = "the host agents' stream is broken: a line without srun's task label";
    return;
  }
  Task& t = m_tasks[task];
  for (std::size_t end; !text.empty() && m_error.empty(); text.remove_prefix(end + 1)) {
    end = text.find('.');
    if (end == std::string_view::npos) {
      t.text.append(text);
      if (t.text.size() > AgentStreamDecoder::kMaxPayload / 3 * 4 + 64)
        m_error = "the host agents' stream is broken: task " + std::to_string(task) + " sent a unit too long";
      return;
    }
    t.text.append(text.substr(0, end));
    std::string bytes;
    if (!decodeBase64(t.text, bytes)) {
      m_error = "the host agents' stream is broken: task " + std::to_string(task) + " sent what is not base64";
      return;
    }
    t.text.clear();
    t.decoder.feed(bytes.data(), bytes.size(), [&](const AgentFrame& f) { frame(task, f); });
    if (!t.decoder.error().empty()) m_error = "task " + std::to_string(task) + ": " + t.decoder.error();
  }
}

}  // namespace ptw::core
