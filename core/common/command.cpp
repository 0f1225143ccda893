// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/command.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

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

// Times in seconds, as many scripts print them, with the field in ms each fills.
const std::map<std::string, Optional>& secondKeys() {
  static const std::map<std::string, Optional> keys = {
      {"step_s", &ScriptRecord::stepMs}, {"data_s", &ScriptRecord::dataMs}, {"compute_s", &ScriptRecord::computeMs},
      {"comm_s", &ScriptRecord::commMs}, {"opt_s", &ScriptRecord::optMs},
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
  const auto seconds = secondKeys().find(key);
  const bool named = known != numberKeys().end() || seconds != secondKeys().end();
  if (!number(v, d))
    return "\"" + key + "\": expected a number" + (named ? "" : " (a named scalar)") + ", got " + describe(v);
  if (known != numberKeys().end()) {
    out.*(known->second) = d;
  } else if (seconds != secondKeys().end()) {
    out.*(seconds->second) = d * 1000.0;
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

bool commandNamesField(const Profile& p, const std::string& field) {
  const std::string name = "{" + field + "}";
  auto names = [&](const std::string& text) { return text.find(name) != std::string::npos; };
  return std::any_of(p.command.args.begin(), p.command.args.end(), names) ||
         std::any_of(p.command.env.begin(), p.command.env.end(), names) || names(p.command.cwd);
}

double declaredBatch(const Profile& p) {
  return commandNamesField(p, "hyper.batch_size") ? static_cast<double>(p.hyper.batchSize) : std::nan("");
}

std::string runToken(long launcherPid, int port) { return std::to_string(launcherPid) + "-" + std::to_string(port); }

int stacksSignal() { return SIGRTMIN + 6; }

std::string pythonStacksPrefix(const std::string& runDir, int rank, long workerPid) {
  return runDir.empty() ? "/tmp/rank" + std::to_string(rank) + ".pystacks." + std::to_string(workerPid)
                        : runDir + "/rank" + std::to_string(rank) + ".pystacks";
}

std::string nativeStacksFile(const std::string& runDir, int rank, long workerPid) {
  return runDir.empty() ? "/tmp/rank" + std::to_string(rank) + ".stacks." + std::to_string(workerPid)
                        : runDir + "/rank" + std::to_string(rank) + ".stacks";
}

void removePythonStacksFiles(const std::string& prefix) {
  const auto slash = prefix.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : prefix.substr(0, slash);
  const std::string start = prefix.substr(slash == std::string::npos ? 0 : slash + 1) + ".";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > start.size() && name.compare(0, start.size(), start) == 0 &&
        name.find_first_not_of("0123456789", start.size()) == std::string::npos)
      ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

HostPlace placeRank(const std::vector<std::string>& rankHosts, int rank) {
  PTW_CHECK(rank >= 0 && static_cast<std::size_t>(rank) < rankHosts.size(), "rank ", rank, " has no host (",
            rankHosts.size(), " slots in hosts.hosts)");
  const std::string& host = rankHosts[static_cast<std::size_t>(rank)];
  std::vector<std::string> groups;  // the hosts, in the order of their first rank
  HostPlace p{0, 0, 0, 0};
  for (std::size_t r = 0; r < rankHosts.size(); ++r) {
    if (std::find(groups.begin(), groups.end(), rankHosts[r]) == groups.end()) groups.push_back(rankHosts[r]);
    if (rankHosts[r] != host) continue;
    ++p.localWorld;
    if (static_cast<int>(r) < rank) ++p.localRank;
  }
  p.groupRank = static_cast<int>(std::find(groups.begin(), groups.end(), host) - groups.begin());
  p.groupWorld = static_cast<int>(groups.size());
  return p;
}

std::vector<std::string> scriptEnvironment(const Profile& profile, const ScriptContext& ctx,
                                           const std::vector<std::string>& base) {
  std::vector<std::string> env = base;
  const std::string rank = std::to_string(ctx.rank), world = std::to_string(ctx.world);
  // torchrun's names; on one host every rank is local, in one group. One role either way.
  const HostPlace place = ctx.place.value_or(HostPlace{ctx.rank, ctx.world, 0, 1});
  const std::vector<std::pair<std::string, std::string>> vars{
      {"RANK", rank},
      {"LOCAL_RANK", std::to_string(place.localRank)},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(place.localWorld)},
      {"GROUP_RANK", std::to_string(place.groupRank)},
      {"GROUP_WORLD_SIZE", std::to_string(place.groupWorld)},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"MASTER_ADDR", ctx.masterAddr},
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
  // Not torchrun's, but what Lightning and others read for the host's index; one host's
  // programs keep torchrun's exact set.
  if (ctx.place) setVar(env, "NODE_RANK", std::to_string(place.groupRank));
  // torchrun's rule: processes that share a host share its cores, so each gets one OpenMP
  // thread unless ptw's own environment (or the profile, below) says otherwise.
  if (place.localWorld > 1 && getVar(env, "OMP_NUM_THREADS").empty()) setVar(env, "OMP_NUM_THREADS", "1");
  // torchrun's too: NCCL watches its collectives and fails a stuck one, unless told otherwise.
  if (!hasVar(env, "NCCL_ASYNC_ERROR_HANDLING")) setVar(env, "NCCL_ASYNC_ERROR_HANDLING", "1");
  // A crash (SIGSEGV, SIGABRT) prints the Python frames it happened in to the rank log.
  if (!hasVar(env, "PYTHONFAULTHANDLER")) setVar(env, "PYTHONFAULTHANDLER", "1");
  if (!ctx.stacksFile.empty()) {  // Note [Python stacks]
    setVar(env, "PTW_STACKS_FILE", ctx.stacksFile);
    setVar(env, "PTW_STACKS_SIGNAL", std::to_string(stacksSignal()));
  }
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

namespace {

// The longest run of plain text that every line a pattern matches holds: outside groups
// (which may be optional) and character classes, between escapes, captures (written as
// '\x01' in `skeleton`) and operators; none where the pattern has alternatives.
std::string requiredText(const std::string& skeleton) {
  std::string best, run;
  auto end = [&] {
    if (run.size() > best.size()) best = run;
    run.clear();
  };
  int depth = 0;
  for (std::size_t i = 0; i < skeleton.size(); ++i) {
    const char c = skeleton[i];
    if (c == '|') return "";
    if (c == '\\') {
      end();
      ++i;
      continue;
    }
    if (c == '[') {  // to the class's end; a ']' first in it is one of its characters
      end();
      std::size_t j = i + 1;
      if (j < skeleton.size() && skeleton[j] == '^') ++j;
      if (j < skeleton.size() && skeleton[j] == ']') ++j;
      while (j < skeleton.size() && skeleton[j] != ']') j += skeleton[j] == '\\' ? 2 : 1;
      i = j;
      continue;
    }
    if (c == '(' || c == ')') {
      end();
      depth += c == '(' ? 1 : -1;
      continue;
    }
    if (std::string_view("^$.?*+{}\x01").find(c) != std::string_view::npos || depth != 0) {
      end();
      continue;
    }
    const char next = i + 1 < skeleton.size() ? skeleton[i + 1] : '\0';
    if (next == '?' || next == '*' || next == '{') {  // the character may not be there
      end();
      continue;
    }
    run += c;
    if (next == '+') end();
  }
  end();
  return best;
}

bool isIntegerKey(const std::string& name) { return name == "step" || name == "rank" || name == "epoch"; }

}  // namespace

struct OutputPattern::Compiled {
  pcre2_code* code = nullptr;
  pcre2_match_data* data = nullptr;
  ~Compiled() {
    pcre2_match_data_free(data);
    pcre2_code_free(code);
  }
  // The capture `i` (1-based) of the last match, or nullopt where its part of the pattern
  // was optional and did not take part.
  std::optional<std::string_view> group(std::string_view subject, std::size_t i) const {
    const PCRE2_SIZE* v = pcre2_get_ovector_pointer(data);
    if (v[2 * i] == PCRE2_UNSET) return std::nullopt;
    return subject.substr(v[2 * i], v[2 * i + 1] - v[2 * i]);
  }
  bool search(std::string_view subject) const {
    return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0, 0, data, nullptr) >= 0;
  }
};

namespace {

// Throws ptw::Error naming `pattern` when `expression` does not compile.
std::shared_ptr<OutputPattern::Compiled> compile(const std::string& expression, const std::string& pattern) {
  auto c = std::make_shared<OutputPattern::Compiled>();
  int error = 0;
  PCRE2_SIZE at = 0;
  c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expression.data()), expression.size(), 0, &error, &at, nullptr);
  if (!c->code) {
    PCRE2_UCHAR why[256];
    pcre2_get_error_message(error, why, sizeof why);
    PTW_FAIL("\"", pattern, "\" is not a valid regular expression (", reinterpret_cast<const char*>(why), ")");
  }
  pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // where there is no JIT, matching interprets
  c->data = pcre2_match_data_create_from_pattern(c->code, nullptr);
  PTW_CHECK(c->data, "cannot allocate the match of command.pattern");
  return c;
}

// A brace that is neither a capture nor a repeat count ({2}, {1,3}) is a capture mistyped:
// PCRE2 would take it as text and the pattern would never match.
void checkBraces(const std::string& skeleton, const std::string& pattern) {
  static const std::regex repeat(R"(^\{\d+(,\d*)?\}$)");
  for (std::size_t i = 0; i < skeleton.size(); ++i) {
    if (skeleton[i] == '\\') {
      ++i;
      continue;
    }
    if (skeleton[i] != '{') continue;
    const auto close = skeleton.find('}', i);
    const std::string brace = skeleton.substr(i, close == std::string::npos ? std::string::npos : close - i + 1);
    PTW_CHECK(std::regex_match(brace, repeat), "\"", pattern, "\" is not a valid regular expression here: ", brace,
              " is neither a capture ({key}, a key of the protocol or a scalar's name) nor a repeat count; "
              "write \\{ for a brace in the text");
  }
}

}  // namespace

OutputPattern::OutputPattern(const std::string& pattern) {
  static const std::regex placeholder(R"(\{([A-Za-z_][A-Za-z0-9_./-]*)\})");
  std::string expression, loose, skeleton;
  auto last = pattern.cbegin();
  for (std::sregex_iterator it(pattern.begin(), pattern.end(), placeholder), end; it != end; ++it) {
    const std::string name = (*it)[1].str();
    ScriptRecord probe;
    PTW_CHECK(takeKey(name, Json(1), probe).empty(), "{", name, "} is not a key of the protocol or a scalar's name");
    skeleton.append(last, (*it)[0].first);
    skeleton += '\x01';
    expression.append(last, (*it)[0].first);
    loose.append(last, (*it)[0].first);
    expression += numberPattern();
    loose += R"(([^\s,;:()\[\]|/]+))";
    m_names.push_back(name);
    last = (*it)[0].second;
  }
  skeleton.append(last, pattern.cend());
  m_literal = requiredText(skeleton);
  expression.append(last, pattern.cend());
  loose.append(last, pattern.cend());
  m_hasStep = std::find(m_names.begin(), m_names.end(), "step") != m_names.end();
  PTW_CHECK(!m_names.empty(), "\"", pattern,
            "\" captures nothing; name the numbers to take with {key}, e.g. \"step {step} loss {loss}\"");
  checkBraces(skeleton, pattern);
  m_regex = compile(expression, pattern);
  m_loose = compile(loose, pattern);
  std::uint32_t groups = 0;
  pcre2_pattern_info(m_regex->code, PCRE2_INFO_CAPTURECOUNT, &groups);
  PTW_CHECK(groups == m_names.size(), "\"", pattern,
            "\" has groups of its own in parentheses; write (?:...) for them, {name} makes the captures");
}

OutputPattern::Match OutputPattern::match(std::string_view line, ScriptRecord& out, std::string& problem) const {
  if (line.size() > kMaxLine) return Match::None;
  // Most lines of a program's output are not the pattern's: a search for its plain text
  // turns them away for a fraction of what the regular expression costs.
  if (!m_literal.empty() && line.find(m_literal) == std::string_view::npos) return Match::None;
  if (!m_regex->search(line)) {
    // The line may be the pattern's with a capture that is not a number ("loss: nan%"): say so.
    if (m_literal.empty() || !m_loose->search(line)) return Match::None;
    static const std::regex number("^" + numberPattern() + "$");
    for (std::size_t i = 0; i < m_names.size(); ++i)
      if (const auto s = m_loose->group(line, i + 1); s && !std::regex_match(s->begin(), s->end(), number)) {
        problem = "{" + m_names[i] + "} is \"" + std::string(s->substr(0, 40)) + "\", not a number";
        return Match::Bad;
      }
    return Match::None;
  }
  out = ScriptRecord{};
  for (std::size_t i = 0; i < m_names.size(); ++i) {
    const auto captured = m_regex->group(line, i + 1);
    if (!captured) continue;  // an optional part of the pattern
    const std::string s(*captured);
    const char* begin = s.c_str();
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin) return Match::None;
    Json value(v);
    if (isIntegerKey(m_names[i])) {
      if (!std::isfinite(v) || v < 0 || v > 9e15 || std::floor(v) != v) {  // exact in an int64
        problem = "{" + m_names[i] + "} is \"" + s + "\", not an integer >= 0";
        return Match::Bad;
      }
      value = Json(static_cast<std::int64_t>(v));
    } else if (!std::isfinite(v)) {
      value = Json(std::isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
    }
    const std::string error = takeKey(m_names[i], value, out);
    if (!error.empty()) {
      problem = error;
      return Match::Bad;
    }
  }
  return Match::Record;
}

void ScriptRecord::merge(const ScriptRecord& later) {
  for (const auto& [key, member] : numberKeys())
    if (later.*member) this->*member = later.*member;
  if (later.epoch) epoch = later.epoch;
  for (const auto& scalar : later.scalars) {
    auto it = std::find_if(scalars.begin(), scalars.end(), [&](const auto& s) { return s.first == scalar.first; });
    if (it != scalars.end())
      it->second = scalar.second;
    else
      scalars.push_back(scalar);
  }
}

ScriptMetrics::ScriptMetrics(int ownRank, int ranks, double batch)
    : m_own(ownRank), m_batch(batch), m_ranks(static_cast<std::size_t>(std::max(ranks, 0))) {}

std::int64_t ScriptMetrics::progressStep() const {
  std::int64_t least = -1;
  for (const Rank& r : m_ranks)
    if (r.global >= 0) least = least < 0 ? r.global : std::min(least, r.global);
  return least;
}

std::string ScriptMetrics::take(const ScriptRecord& in, double nowMs, std::vector<Record>& out) {
  const int rank = in.rank >= 0 ? in.rank : m_own;
  if (rank < 0 || static_cast<std::size_t>(rank) >= m_ranks.size())
    return "rank " + std::to_string(rank) + " is not one of this run's ranks (0.." +
           std::to_string(m_ranks.size() - 1) + "; command.report_ranks sets how many report)";
  Rank& r = m_ranks[static_cast<std::size_t>(rank)];
  const std::int64_t raw = in.step >= 0 ? in.step : r.counted + 1;
  if (in.step < 0) ++r.counted;
  const bool epochChanged = in.epoch && r.lastEpoch && *in.epoch != *r.lastEpoch;
  if (r.global >= 0 && raw == r.lastRaw && !epochChanged) {  // more of the step the rank is on
    if (r.sent && in.hasStepFields())
      return "step " + std::to_string(raw) + ": a field of a step whose record went out " +
             std::to_string(static_cast<long long>(nowMs - r.beganMs)) +
             " ms before (the fields of one step merge when they come within " +
             std::to_string(static_cast<int>(kHoldMs)) + " ms of each other); not kept";
    if (r.sent) {  // scalars or a validation for a step already sent: they go alone
      ScriptRecord late = in;
      late.step = raw;
      r.step = late;
      r.held = true;
      r.sent = false;
      send(rank, r, out);
      r.sent = true;
      return "";
    }
    r.step.merge(in);
    r.lastPieceMs = nowMs;
    return "";
  }
  if (r.held) send(rank, r, out);
  if (r.global < 0) {
    r.offset = 0;
  } else if (raw < r.lastRaw || (raw == r.lastRaw && epochChanged)) {
    r.offset = r.global + r.stride - raw;  // a new stretch
  } else {
    r.stride = raw - r.lastRaw;
  }
  r.lastRaw = raw;
  if (in.epoch) r.lastEpoch = in.epoch;
  r.global = raw + r.offset;
  r.step = in;
  r.step.step = raw;
  r.held = true;
  r.sent = false;
  r.beganMs = r.lastPieceMs = nowMs;
  m_lastStep = std::max(m_lastStep, r.global);
  return "";
}

void ScriptMetrics::flush(double nowMs, double holdMs, std::vector<Record>& out) {
  for (std::size_t i = 0; i < m_ranks.size(); ++i) {
    Rank& r = m_ranks[i];
    if (r.held && nowMs - r.lastPieceMs >= holdMs) {
      send(static_cast<int>(i), r, out);
      r.sent = true;
    }
  }
}

void ScriptMetrics::send(int rank, Rank& r, std::vector<Record>& out) {
  r.held = false;
  const ScriptRecord& in = r.step;
  if (in.hasStepFields()) {
    Record rec;
    rec.kind = Record::Kind::Step;
    StepRecord& s = rec.step;
    s.rank = rank;
    s.step = r.global;
    s.stepOffset = r.offset;
    s.epoch = in.epoch.value_or(-1);
    s.loss = in.loss.value_or(notReported());
    // The steps this record stands for: those since the rank's previous step record.
    const std::int64_t steps = r.sentGlobal >= 0 ? std::max<std::int64_t>(1, r.global - r.sentGlobal) : 1;
    const double since = r.sentGlobal >= 0 ? r.beganMs - r.sentMs : r.beganMs;
    s.stepMs = in.stepMs.value_or(since / static_cast<double>(steps));
    const double nan = std::nan("");
    const double samples = in.samples.value_or(m_batch);  // in one step
    s.samplesPerS = in.samplesPerS.value_or(s.stepMs > 0 && std::isfinite(samples) ? samples * 1000.0 / s.stepMs : nan);
    s.dataMs = in.dataMs.value_or(nan);
    s.computeMs = in.computeMs.value_or(nan);
    s.commMs = in.commMs.value_or(nan);
    s.optMs = in.optMs.value_or(nan);
    s.lr = in.lr.value_or(nan);
    s.memBytes = -1;
    r.sentGlobal = r.global;
    r.sentMs = r.beganMs;
    out.push_back(rec);
  }
  if (in.valLoss) {
    Record rec;
    rec.kind = Record::Kind::Validation;
    rec.step.rank = rank;
    rec.step.step = r.global;
    rec.valLoss = *in.valLoss;
    rec.valAccuracy = in.valAccuracy.value_or(-1);
    out.push_back(rec);
  }
  for (const auto& [name, value] : in.scalars) {
    Record rec;
    rec.kind = Record::Kind::Scalar;
    rec.step.rank = rank;
    rec.step.step = r.global;
    rec.setName(name);
    rec.value = value;
    out.push_back(rec);
  }
}

}  // namespace ptw::core
