// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/follow_stream.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "common/version.h"
#include "launch/run_catalog.h"

namespace ptw::core {
namespace {

using Json = nlohmann::ordered_json;

// Note [Follow frames]: "PTWR" is record.h's; the others are this stream's own.
constexpr std::uint32_t kRecordMagic = 0x52575450;  // "PTWR"
constexpr std::uint32_t kLogMagic = 0x4c575450;     // "PTWL"
constexpr std::uint32_t kEndMagic = 0x45575450;     // "PTWE"
constexpr std::uint32_t kHostsMagic = 0x48575450;   // "PTWH"
constexpr std::size_t kTextFrameHead = 12;
constexpr std::uint32_t kMaxText = 1u << 20;  // a log frame's line is at most 64 KiB (RunFollower)

void putTextFrame(std::string& out, std::uint32_t magic, std::int32_t value, std::string_view text) {
  const auto n = static_cast<std::uint32_t>(text.size());
  char head[kTextFrameHead];
  std::memcpy(head, &magic, 4);
  std::memcpy(head + 4, &value, 4);
  std::memcpy(head + 8, &n, 4);
  out.append(head, sizeof head);
  out.append(text.data(), text.size());
}

// A value nobody reported (Note [Not reported]) is null: JSON has no NaN.
Json stepJson(const Record& r) {
  Json j;
  j["kind"] = "step";
  j["rank"] = r.step.rank;
  StepRecord::forEachField([&](const char* name, auto member) {
    const auto v = r.step.*member;
    if constexpr (std::is_same_v<std::remove_cv_t<decltype(v)>, double>) {
      j[name] = std::isnan(v) ? Json(nullptr) : Json(v);
    } else {
      const bool signedField = std::strcmp(name, "step") == 0 || std::strcmp(name, "step_offset") == 0;
      j[name] = signedField || isReported(v) ? Json(v) : Json(nullptr);
    }
  });
  return j;
}

Json numberOrNull(double v) { return std::isnan(v) ? Json(nullptr) : Json(v); }

}  // namespace

void FollowStream::begin(const RunRow& run) {
  if (m_format == Format::Frames) {
    const std::uint32_t one = 1;
    unsigned char first;
    std::memcpy(&first, &one, 1);
    m_buf += "ptw-follow 1 ptw=" + std::string(kVersion) + " run=" + std::to_string(run.id) +
             " record_frame=" + std::to_string(kRecordFrameBytes) + " byte_order=" + (first ? "little" : "big") + "\n";
    return;
  }
  Json j;
  j["kind"] = "run";
  j["run"] = run.id;
  j["name"] = run.name;
  j["dir"] = run.dir;
  j["strategy"] = run.strategy;
  j["world"] = run.world;
  j["status"] = run.status;
  j["started_at"] = run.startedAt;
  j["ptw_version"] = run.ptwVersion;
  m_buf += j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

void FollowStream::record(const Record& r) {
  if (m_format == Format::Frames) {
    encodeRecord(r, m_buf);
    return;
  }
  Json j;
  switch (r.kind) {
    case Record::Kind::Step: j = stepJson(r); break;
    case Record::Kind::Validation:
      j["kind"] = "validation";
      j["rank"] = r.step.rank;
      j["step"] = r.step.step;
      j["val_loss"] = numberOrNull(r.valLoss);
      j["val_accuracy"] = r.valAccuracy < 0 ? Json(nullptr) : numberOrNull(r.valAccuracy);  // -1: a regression
      break;
    case Record::Kind::Scalar:
      j["kind"] = "scalar";
      j["rank"] = r.step.rank;
      j["step"] = r.step.step;
      j["name"] = std::string(r.scalarName());
      j["value"] = numberOrNull(r.value);
      break;
    default: return;  // the store keeps no others
  }
  m_buf += j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

void FollowStream::log(int rank, std::string_view line) {
  if (m_format == Format::Frames) {
    putTextFrame(m_buf, kLogMagic, rank, line);
    return;
  }
  Json j;
  j["kind"] = "log";
  j["rank"] = rank;
  j["line"] = std::string(line);  // bytes that are not UTF-8 become U+FFFD
  m_buf += j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

void FollowStream::hosts(const std::vector<std::string>& rankHosts) {
  if (m_format == Format::Frames) {
    std::string text;
    for (const auto& h : rankHosts) text += (text.empty() ? "" : "\n") + h;
    putTextFrame(m_buf, kHostsMagic, static_cast<std::int32_t>(rankHosts.size()), text);
    return;
  }
  Json j;
  j["kind"] = "hosts";
  j["hosts"] = rankHosts;
  m_buf += j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

void FollowStream::end(const RunRow& run, int exitCode) {
  if (m_format == Format::Frames) {
    putTextFrame(m_buf, kEndMagic, exitCode, run.status + "\t" + run.message);
    return;
  }
  Json j;
  j["kind"] = "end";
  j["run"] = run.id;
  j["status"] = run.status;
  j["message"] = run.message;
  j["exit_code"] = exitCode;
  m_buf += j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

bool FollowStream::flush() {
  if (!m_buf.empty()) m_out.write(m_buf.data(), static_cast<std::streamsize>(m_buf.size()));
  m_buf.clear();
  m_out.flush();
  return static_cast<bool>(m_out);
}

std::size_t FollowStream::decode(std::string_view in, Decoded& out, bool& malformed) {
  std::size_t at = 0;
  while (in.size() - at >= 4) {
    std::uint32_t magic;
    std::memcpy(&magic, in.data() + at, 4);
    if (magic == kRecordMagic) {
      bool stopped = false;  // at the next frame that is not a record: read on below
      const std::size_t used = decodeRecords(in.substr(at), out.records, stopped);
      if (used == 0) {
        malformed = stopped;
        return at;
      }
      at += used;
      continue;
    }
    if (magic != kLogMagic && magic != kEndMagic && magic != kHostsMagic) {
      malformed = true;
      return at;
    }
    if (in.size() - at < kTextFrameHead) return at;
    std::int32_t value;
    std::uint32_t n;
    std::memcpy(&value, in.data() + at + 4, 4);
    std::memcpy(&n, in.data() + at + 8, 4);
    if (n > kMaxText) {
      malformed = true;
      return at;
    }
    if (in.size() - at - kTextFrameHead < n) return at;
    std::string text(in.substr(at + kTextFrameHead, n));
    if (magic == kLogMagic) {
      out.logs.emplace_back(value, std::move(text));
    } else if (magic == kHostsMagic) {
      std::vector<std::string> hosts;
      for (std::size_t from = 0; value > 0 && from <= text.size();) {
        const std::size_t to = std::min(text.find('\n', from), text.size());
        hosts.push_back(text.substr(from, to - from));
        from = to + 1;
      }
      if (static_cast<std::int32_t>(hosts.size()) != std::max(value, 0)) {  // not one line a rank
        malformed = true;
        return at;
      }
      out.hosts = std::move(hosts);
    } else {
      out.end.emplace(value, std::move(text));
    }
    at += kTextFrameHead + n;
  }
  return at;
}

}  // namespace ptw::core
