// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace ptw::core {
namespace {

using Json = nlohmann::json;

// `{section.field}` (or `{name}`) in a template.
const std::regex& templateRegex() {
  static const std::regex re(R"(\{([a-z_]+(\.[a-z_]+)?)\})");
  return re;
}

std::map<std::string, std::string> fieldValues(const Profile& profile) {
  std::map<std::string, std::string> values;
  for (auto& [path, json] : profileFields(profile)) {
    const Json v = Json::parse(json, nullptr, false);
    values[path] = v.is_string() ? v.get<std::string>() : json;
  }
  return values;
}

std::string expand(const std::string& text, const std::map<std::string, std::string>& values) {
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), templateRegex()), end; it != end; ++it) {
    const std::string name = (*it)[1].str();
    const auto found = values.find(name);
    const bool dotted = name.find('.') != std::string::npos;
    PTW_CHECK(found != values.end() || !dotted, "{", name, "} names no profile field (e.g. {hyper.lr})");
    out.append(last, (*it)[0].first);
    out += found != values.end() ? found->second : (*it)[0].str();
    last = (*it)[0].second;
  }
  out.append(last, text.cend());
  return out;
}

bool isEnvName(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

void setVar(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  const std::string prefix = key + "=";
  for (auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) {
      e = prefix + value;
      return;
    }
  env.push_back(prefix + value);
}

std::string getVar(const std::vector<std::string>& env, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) return e.substr(prefix.size());
  return "";
}

bool hasVar(const std::vector<std::string>& env, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

// Python's json writes NaN, Infinity and -Infinity, which JSON has not: each becomes a string
// the typed reads below take as that number. Also bounds the nesting, which no record needs.
bool quoteNonFinite(std::string_view in, std::string& out, std::string& error) {
  out.clear();
  out.reserve(in.size() + 16);
  bool inString = false;
  int depth = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (inString) {
      out += c;
      if (c == '\\' && i + 1 < in.size())
        out += in[++i];
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') inString = true;
    if (c == '{' || c == '[') {
      if (++depth > 4) {
        error = "nested deeper than a record is (4 levels)";
        return false;
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
    bool replaced = false;
    for (std::string_view token : {"-Infinity", "Infinity", "NaN"})
      if (in.substr(i, token.size()) == token) {
        out += '"';
        out += token;
        out += '"';
        i += token.size() - 1;
        replaced = true;
        break;
      }
    if (!replaced) out += c;
  }
  return true;
}

std::string describe(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string: {
      std::string s = v.get<std::string>();
      if (s.size() > 40) s = s.substr(0, 40) + "...";
      return "\"" + s + "\"";
    }
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    default: return v.dump();
  }
}

bool number(const Json& v, double& out) {
  if (v.is_number()) {
    out = v.get<double>();
    return true;
  }
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "NaN")
    out = std::nan("");
  else if (s == "Infinity")
    out = HUGE_VAL;
  else if (s == "-Infinity")
    out = -HUGE_VAL;
  else
    return false;
  return true;
}

bool integer(const Json& v, std::int64_t& out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return false;
    out = v.get<std::int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::floor(d) != d || std::fabs(d) > 9e15) return false;
    out = static_cast<std::int64_t>(d);
    return true;
  }
  return false;
}

// The protocol's keys that are not named scalars, with where each goes.
using Optional = std::optional<double> ScriptRecord::*;
const std::map<std::string, Optional>& numberKeys() {
  static const std::map<std::string, Optional> keys = {
      {"loss", &ScriptRecord::loss},
      {"samples", &ScriptRecord::samples},
      {"samples_per_s", &ScriptRecord::samplesPerS},
      {"step_ms", &ScriptRecord::stepMs},
      {"data_ms", &ScriptRecord::dataMs},
      {"compute_ms", &ScriptRecord::computeMs},
      {"comm_ms", &ScriptRecord::commMs},
      {"opt_ms", &ScriptRecord::optMs},
      {"lr", &ScriptRecord::lr},
      {"val_loss", &ScriptRecord::valLoss},
      {"val_accuracy", &ScriptRecord::valAccuracy},
  };
  return keys;
}

// One key of a record, by its name; "" or what is wrong.
std::string takeKey(const std::string& key, const Json& v, ScriptRecord& out) {
  if (key == "step" || key == "rank" || key == "epoch") {
    std::int64_t i = 0;
    if (!integer(v, i) || i < 0 || (key == "rank" && i > 1'000'000))
      return "\"" + key + "\": expected an integer >= 0, got " + describe(v);
    if (key == "step") out.step = i;
    if (key == "rank") out.rank = static_cast<int>(i);
    if (key == "epoch") out.epoch = i;
    return "";
  }
  double d = 0;
  const auto known = numberKeys().find(key);
  if (!number(v, d))
    return "\"" + key + "\": expected a number" + (known == numberKeys().end() ? " (a named scalar)" : "") + ", got " +
           describe(v);
  if (known != numberKeys().end()) {
    out.*(known->second) = d;
  } else {
    if (!isScalarName(key))
      return "\"" + key.substr(0, 60) + "\": a scalar's name is 1 to 48 characters of A-Z a-z 0-9 _ . / -";
    out.scalars.emplace_back(key, d);
  }
  return "";
}

std::string numberPattern() {
  return R"(([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:[Nn]a[Nn]|[Ii]nf(?:inity)?)))";
}

}  // namespace

std::string expandTemplates(const std::string& text, const Profile& profile) {
  return expand(text, fieldValues(profile));
}

std::vector<std::string> commandLine(const Profile& profile) {
  const auto values = fieldValues(profile);
  std::vector<std::string> argv{profile.command.program};
  for (const auto& a : profile.command.args) argv.push_back(expand(a, values));
  return argv;
}

std::vector<FieldError> validateCommand(const Profile& p) {
  std::vector<FieldError> e;
  const CommandSpec& c = p.command;
  if (c.program.empty()) e.push_back({"command.program", "the command strategy needs a program, e.g. \"python3\""});
  const auto values = fieldValues(p);
  auto checkTemplate = [&](const std::string& path, const std::string& text) {
    try {
      expand(text, values);
    } catch (const Error& ex) {
      e.push_back({path, ex.what()});
    }
  };
  for (std::size_t i = 0; i < c.args.size(); ++i) checkTemplate("command.args[" + std::to_string(i) + "]", c.args[i]);
  checkTemplate("command.cwd", c.cwd);
  for (std::size_t i = 0; i < c.env.size(); ++i) {
    const std::string path = "command.env[" + std::to_string(i) + "]";
    const auto eq = c.env[i].find('=');
    if (eq == std::string::npos || !isEnvName(c.env[i].substr(0, eq)))
      e.push_back({path, "expected KEY=VALUE with KEY of letters, digits and _, got \"" + c.env[i] + "\""});
    else
      checkTemplate(path, c.env[i]);
  }
  if (!c.pattern.empty()) {
    try {
      OutputPattern check(c.pattern);
    } catch (const Error& ex) {
      e.push_back({"command.pattern", ex.what()});
    }
  }
  if (c.reportRanks < 0 || c.reportRanks > 255)
    e.push_back(
        {"command.report_ranks", "must be in 0..255 (0 = strategy.ranks), got " + std::to_string(c.reportRanks)});
  if (c.reportRanks > 0 && c.reportRanks < p.strategy.ranks)
    e.push_back({"command.report_ranks", "must be 0 or at least strategy.ranks (" + std::to_string(p.strategy.ranks) +
                                             "), got " + std::to_string(c.reportRanks)});
  if (!(c.stopGraceS > 0 && c.stopGraceS <= 600))
    e.push_back({"command.stop_grace_s", "must be > 0 and at most 600, got " + std::to_string(c.stopGraceS)});
  return e;
}

std::string runToken(long launcherPid, int port) { return std::to_string(launcherPid) + "-" + std::to_string(port); }

std::vector<std::string> scriptEnvironment(const Profile& profile, const ScriptContext& ctx,
                                           const std::vector<std::string>& base) {
  std::vector<std::string> env = base;
  const std::string rank = std::to_string(ctx.rank), world = std::to_string(ctx.world);
  // torchrun's names, on one host: every rank is local, one group, one role.
  const std::vector<std::pair<std::string, std::string>> vars{
      {"RANK", rank},
      {"LOCAL_RANK", rank},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", world},
      {"GROUP_RANK", "0"},
      {"GROUP_WORLD_SIZE", "1"},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(ctx.port)},
      {"TORCHELASTIC_RUN_ID", ctx.runId},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(ctx.attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(profile.run.maxRestarts)},
      // The program hosts its own store (env://): there is no agent's to join.
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", ctx.errorFile},
      {"PYTHONUNBUFFERED", "1"},
      {"PTW_METRICS", ctx.metricsPath},
      {"PTW_RUN_TOKEN", ctx.token}};
  for (const auto& [k, v] : vars) setVar(env, k, v);
  // torchrun's rule: processes that share a host share its cores, so each gets one OpenMP
  // thread unless ptw's own environment (or the profile, below) says otherwise.
  if (ctx.world > 1 && getVar(env, "OMP_NUM_THREADS").empty()) setVar(env, "OMP_NUM_THREADS", "1");
  // torchrun's too: NCCL watches its collectives and fails a stuck one, unless told otherwise.
  if (!hasVar(env, "NCCL_ASYNC_ERROR_HANDLING")) setVar(env, "NCCL_ASYNC_ERROR_HANDLING", "1");
  if (!ctx.pythonDir.empty()) {
    const std::string old = getVar(env, "PYTHONPATH");
    setVar(env, "PYTHONPATH", old.empty() ? ctx.pythonDir : ctx.pythonDir + ":" + old);
  }
  const auto values = fieldValues(profile);
  for (const auto& entry : profile.command.env) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;  // validate() said so
    setVar(env, entry.substr(0, eq), expand(entry.substr(eq + 1), values));
  }
  return env;
}

std::string resolveProgram(const std::string& program, const std::string& cwd, const std::string& path) {
  auto check = [&](const std::string& file) {
    struct stat st {};
    PTW_CHECK(::stat(file.c_str(), &st) == 0, "command.program: ", file, " does not exist");
    PTW_CHECK(!S_ISDIR(st.st_mode), "command.program: ", file, " is a folder, not a program");
    PTW_CHECK(::access(file.c_str(), X_OK) == 0, "command.program: ", file,
              " is not executable; make it so (chmod +x) or name its interpreter as the program, e.g. python3");
    return file;
  };
  if (program.find('/') != std::string::npos)
    return check(program[0] == '/' || cwd.empty() ? program : cwd + "/" + program);
  std::size_t from = 0;
  while (from <= path.size()) {
    const auto colon = path.find(':', from);
    const std::string dir = path.substr(from, colon == std::string::npos ? std::string::npos : colon - from);
    const std::string file = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(file.c_str(), X_OK) == 0) return check(file);
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  PTW_FAIL("command.program: \"", program, "\" is not found on PATH; install it or give its full path");
}

bool isPythonProgram(const std::string& program) {
  static const std::regex python(R"(python(3(\.[0-9]+)?)?)");
  return std::regex_match(program.substr(program.rfind('/') + 1), python);
}

std::string errorFileCause(std::string_view text) {
  const Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!root.is_object() || !root.contains("message")) return "";
  // Later torch may write the message as a plain string; 1.13 writes an object.
  const Json& outer = root["message"];
  const Json* message = outer.is_string()                                ? &outer
                        : outer.is_object() && outer.contains("message") ? &outer["message"]
                                                                         : nullptr;
  if (!message || !message->is_string() || message->get_ref<const std::string&>().empty()) return "";
  // One line for the failure message: an exception's text may run over many.
  std::string cause = message->get<std::string>();
  cause = cause.substr(0, cause.find('\n'));
  if (cause.size() > 300) cause = cause.substr(0, 300) + "...";
  // The innermost frame is the last of the traceback's `  File "F", line N, in FUNCTION`.
  std::string where;
  if (outer.is_object() && outer.contains("extraInfo") && outer["extraInfo"].is_object()) {
    const Json& extra = outer["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      static const std::regex frame(R"re(^\s*File "([^"]+)", line ([0-9]+)(?:, in (.+))?$)re");
      std::istringstream lines(extra["py_callstack"].get<std::string>());
      std::smatch m;
      for (std::string line; std::getline(lines, line);)
        if (line.size() < 4096 && std::regex_match(line, m, frame))
          where = m[1].str() + ":" + m[2].str() + (m[3].matched ? ", in " + m[3].str() : std::string());
    }
  }
  return where.empty() ? cause : cause + " (at " + where + ")";
}

bool parseMetricsLine(std::string_view line, ScriptRecord& out, std::string& error) {
  out = ScriptRecord{};
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string text;
  if (!quoteNonFinite(line, text, error)) return false;
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    error = "not valid JSON";
    return false;
  }
  if (!root.is_object()) {
    error = "expected a JSON object, got " + describe(root);
    return false;
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    error = takeKey(it.key(), it.value(), out);
    if (!error.empty()) return false;
  }
  if (out.step < 0) {
    error = "\"step\" is missing";
    return false;
  }
  return true;
}

OutputPattern::OutputPattern(const std::string& pattern) {
  static const std::regex placeholder(R"(\{([A-Za-z_][A-Za-z0-9_./-]*)\})");
  std::string expression;
  auto last = pattern.cbegin();
  for (std::sregex_iterator it(pattern.begin(), pattern.end(), placeholder), end; it != end; ++it) {
    const std::string name = (*it)[1].str();
    ScriptRecord probe;
    PTW_CHECK(takeKey(name, Json(1), probe).empty(), "{", name, "} is not a key of the protocol or a scalar's name");
    expression.append(last, (*it)[0].first);
    expression += numberPattern();
    m_names.push_back(name);
    last = (*it)[0].second;
  }
  expression.append(last, pattern.cend());
  PTW_CHECK(std::find(m_names.begin(), m_names.end(), "step") != m_names.end(), "\"", pattern,
            "\" has no {step}; every record needs one, e.g. \"step {step} loss {loss}\"");
  try {
    m_regex = std::regex(expression, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& ex) {
    PTW_FAIL("\"", pattern, "\" is not a valid regular expression (", ex.what(), ")");
  }
  PTW_CHECK(m_regex.mark_count() == m_names.size(), "\"", pattern,
            "\" has groups of its own in parentheses; write (?:...) for them, {name} makes the captures");
}

bool OutputPattern::match(std::string_view line, ScriptRecord& out) const {
  if (line.size() > kMaxLine) return false;
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(line.begin(), line.end(), m, m_regex)) return false;
  out = ScriptRecord{};
  for (std::size_t i = 0; i < m_names.size(); ++i) {
    if (!m[i + 1].matched) continue;  // an optional part of the pattern
    const std::string s = m[i + 1].str();
    const char* begin = s.c_str();
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin) return false;
    Json value(v);
    if (m_names[i] == "step" || m_names[i] == "rank" || m_names[i] == "epoch") {
      if (!std::isfinite(v) || v < 0 || v > 9e15 || std::floor(v) != v) return false;  // exact in an int64
      value = Json(static_cast<std::int64_t>(v));
    } else if (!std::isfinite(v)) {
      value = Json(std::isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
    }
    if (!takeKey(m_names[i], value, out).empty()) return false;
  }
  return out.step >= 0;
}

std::int64_t ScriptMetrics::progressStep() const {
  std::int64_t least = -1;
  for (std::int64_t s : m_steps)
    if (s >= 0) least = least < 0 ? s : std::min(least, s);
  return least;
}

std::string ScriptMetrics::convert(const ScriptRecord& in, double nowMs, std::vector<Record>& out) {
  const int rank = in.rank >= 0 ? in.rank : m_own;
  if (rank < 0 || static_cast<std::size_t>(rank) >= m_lastMs.size())
    return "rank " + std::to_string(rank) + " is not one of this run's ranks (0.." +
           std::to_string(m_lastMs.size() - 1) + "; command.report_ranks sets how many report)";
  m_lastStep = std::max(m_lastStep, in.step);
  std::int64_t& latest = m_steps[static_cast<std::size_t>(rank)];
  latest = std::max(latest, in.step);
  if (in.loss || in.samples || in.samplesPerS) {
    Record r;
    r.kind = Record::Kind::Step;
    StepRecord& s = r.step;
    s.rank = rank;
    s.step = in.step;
    s.epoch = in.epoch.value_or(0);
    s.loss = in.loss.value_or(std::nan(""));
    double& last = m_lastMs[static_cast<std::size_t>(rank)];
    s.stepMs = in.stepMs.value_or(nowMs - last);
    last = nowMs;
    s.samplesPerS = in.samplesPerS.value_or(in.samples && s.stepMs > 0 ? *in.samples * 1000.0 / s.stepMs : 0.0);
    s.dataMs = in.dataMs.value_or(0);
    s.computeMs = in.computeMs.value_or(0);
    s.commMs = in.commMs.value_or(0);
    s.optMs = in.optMs.value_or(0);
    s.lr = in.lr.value_or(0);
    out.push_back(r);
  }
  if (in.valLoss) {
    Record r;
    r.kind = Record::Kind::Validation;
    r.step.rank = rank;
    r.step.step = in.step;
    r.valLoss = *in.valLoss;
    r.valAccuracy = in.valAccuracy.value_or(-1);
    out.push_back(r);
  }
  for (const auto& [name, value] : in.scalars) {
    Record r;
    r.kind = Record::Kind::Scalar;
    r.step.rank = rank;
    r.step.step = in.step;
    r.setName(name);
    r.value = value;
    out.push_back(r);
  }
  return "";
}

}  // namespace ptw::core
