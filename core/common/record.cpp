#include "common/record.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ptw::core {
namespace {

void appendNumber(std::string& out, double v) {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, " %.9g", v);
  out.append(buf, static_cast<std::size_t>(n));
}
void appendInt(std::string& out, long long v) {
  char buf[24];
  int n = std::snprintf(buf, sizeof buf, " %lld", v);
  out.append(buf, static_cast<std::size_t>(n));
}

// Splits on single spaces into at most `max` fields; returns false on too many.
bool split(std::string_view line, std::vector<std::string_view>& fields, std::size_t max) {
  fields.clear();
  std::size_t start = 0;
  while (start <= line.size()) {
    std::size_t end = line.find(' ', start);
    if (end == std::string_view::npos) end = line.size();
    if (fields.size() == max) return false;
    fields.push_back(line.substr(start, end - start));
    start = end + 1;
  }
  return true;
}

bool toInt(std::string_view s, long long& v) {
  if (s.empty() || s.size() > 20) return false;
  char buf[24];
  s.copy(buf, s.size());
  buf[s.size()] = '\0';
  char* end = nullptr;
  errno = 0;
  v = std::strtoll(buf, &end, 10);
  return errno == 0 && end == buf + s.size();
}

bool toDouble(std::string_view s, double& v) {
  if (s.empty() || s.size() > 30) return false;
  char buf[32];
  s.copy(buf, s.size());
  buf[s.size()] = '\0';
  char* end = nullptr;
  v = std::strtod(buf, &end);
  return end == buf + s.size();
}

bool toRank(std::string_view s, int& rank) {
  long long v = 0;
  if (!toInt(s, v) || v < 0 || v > 1'000'000) return false;
  rank = static_cast<int>(v);
  return true;
}

}  // namespace

void formatRecord(const Record& r, std::string& out) {
  const StepRecord& s = r.step;
  switch (r.kind) {
    case Record::Kind::Step:
      out += 'S';
      appendInt(out, s.rank);
      appendInt(out, s.step);
      appendInt(out, s.epoch);
      for (double v : {s.loss, s.samplesPerS, s.stepMs, s.dataMs, s.computeMs, s.commMs, s.optMs, s.lr})
        appendNumber(out, v);
      appendInt(out, s.memBytes);
      break;
    case Record::Kind::Validation:
      out += 'V';
      appendInt(out, s.rank);
      appendInt(out, s.step);
      appendNumber(out, r.valLoss);
      appendNumber(out, r.valAccuracy);
      break;
    case Record::Kind::Heartbeat:
      out += 'H';
      appendInt(out, s.rank);
      appendInt(out, s.step);
      out += ' ';
      out += r.state.empty() ? "train" : r.state;
      break;
    case Record::Kind::Done:
      out += 'D';
      appendInt(out, s.rank);
      appendInt(out, s.step);
      break;
  }
  out += '\n';
}

std::optional<Record> parseRecord(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  thread_local std::vector<std::string_view> f;
  if (!split(line, f, 16) || f.empty() || f[0].size() != 1) return std::nullopt;
  Record r;
  StepRecord& s = r.step;
  long long step = 0;
  switch (f[0][0]) {
    case 'S': {
      long long epoch = 0, mem = 0;
      if (f.size() != 13 || !toRank(f[1], s.rank) || !toInt(f[2], step) || !toInt(f[3], epoch) ||
          !toInt(f[12], mem))
        return std::nullopt;
      double* dst[] = {&s.loss, &s.samplesPerS, &s.stepMs, &s.dataMs, &s.computeMs, &s.commMs, &s.optMs, &s.lr};
      for (int i = 0; i < 8; ++i)
        if (!toDouble(f[4 + i], *dst[i])) return std::nullopt;
      r.kind = Record::Kind::Step;
      s.epoch = epoch;
      s.memBytes = mem;
      break;
    }
    case 'V':
      if (f.size() != 5 || !toRank(f[1], s.rank) || !toInt(f[2], step) || !toDouble(f[3], r.valLoss) ||
          !toDouble(f[4], r.valAccuracy))
        return std::nullopt;
      r.kind = Record::Kind::Validation;
      break;
    case 'H':
      if (f.size() != 4 || !toRank(f[1], s.rank) || !toInt(f[2], step) || f[3].empty() || f[3].size() > 16)
        return std::nullopt;
      for (char c : f[3])  // a state is a word (train, comm, done); nothing that could garble a display
        if (c < 'a' || c > 'z') return std::nullopt;
      r.kind = Record::Kind::Heartbeat;
      r.state = std::string(f[3]);
      break;
    case 'D':
      if (f.size() != 3 || !toRank(f[1], s.rank) || !toInt(f[2], step)) return std::nullopt;
      r.kind = Record::Kind::Done;
      break;
    default:
      return std::nullopt;
  }
  if (step < 0) return std::nullopt;
  s.step = step;
  return r;
}

}  // namespace ptw::core
