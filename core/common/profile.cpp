// Profile JSON reading, writing and validation.
//
// Every section is described once, by a `visit` function that names its fields; the
// reader, the writer and equality all walk that one description, so adding a field is
// one line and cannot be forgotten in one of them.
#include "common/profile.h"

#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace ptw::core {
namespace {

using Json = nlohmann::ordered_json;

template <class F> void visit(ModelSpec& m, F&& f) {
  f("kind", m.kind);
  f("in_features", m.inFeatures);
  f("out_features", m.outFeatures);
  f("hidden", m.hidden);
  f("activation", m.activation);
}
template <class F> void visit(DataSpec& d, F&& f) {
  f("kind", d.kind);
  f("samples", d.samples);
  f("seed", d.seed);
  f("noise", d.noise);
}
template <class F> void visit(StrategySpec& s, F&& f) {
  f("kind", s.kind);
  f("ranks", s.ranks);
  f("backend", s.backend);
  f("device", s.device);
  f("bucket_mb", s.bucketMb);
}
template <class F> void visit(HyperSpec& h, F&& f) {
  f("lr", h.lr);
  f("batch_size", h.batchSize);
  f("max_steps", h.maxSteps);
  f("epochs", h.epochs);
  f("optimizer", h.optimizer);
  f("momentum", h.momentum);
  f("weight_decay", h.weightDecay);
  f("seed", h.seed);
  f("shuffle", h.shuffle);
  f("drop_last", h.dropLast);
}
template <class F> void visit(RunOptions& r, F&& f) {
  f("timeout_s", r.timeoutS);
  f("threads_per_rank", r.threadsPerRank);
  f("port", r.port);
}
template <class F> void visitSections(Profile& p, F&& f) {
  f("model", p.model);
  f("data", p.data);
  f("strategy", p.strategy);
  f("hyper", p.hyper);
  f("run", p.run);
}

std::string describe(const Json& v) {
  switch (v.type()) {
    case Json::value_t::string: return "\"" + v.get<std::string>() + "\"";
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    default: return v.dump();
  }
}

// Typed reads with messages that name the field and what was expected.
void read(const Json& v, const std::string& path, std::string& out) {
  PTW_CHECK(v.is_string(), path, ": expected a string, got ", describe(v));
  out = v.get<std::string>();
}
void read(const Json& v, const std::string& path, bool& out) {
  PTW_CHECK(v.is_boolean(), path, ": expected true or false, got ", describe(v));
  out = v.get<bool>();
}
void read(const Json& v, const std::string& path, double& out) {
  PTW_CHECK(v.is_number(), path, ": expected a number, got ", describe(v));
  out = v.get<double>();
}
template <class Int>
void readInt(const Json& v, const std::string& path, Int& out) {
  bool integral = v.is_number_integer() ||
                  (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  PTW_CHECK(integral, path, ": expected an integer, got ", describe(v));
  if (std::is_unsigned<Int>::value) {
    PTW_CHECK(!(v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0) &&
                  !(v.is_number_float() && v.get<double>() < 0),
              path, ": expected a non-negative integer, got ", describe(v));
  }
  double asDouble = v.get<double>();
  PTW_CHECK(asDouble >= static_cast<double>(std::numeric_limits<Int>::min()) &&
                asDouble <= static_cast<double>(std::numeric_limits<Int>::max()),
            path, ": integer out of range, got ", describe(v));
  out = v.is_number_float() ? static_cast<Int>(asDouble) : v.get<Int>();
}
void read(const Json& v, const std::string& path, int& out) { readInt(v, path, out); }
void read(const Json& v, const std::string& path, std::int64_t& out) { readInt(v, path, out); }
void read(const Json& v, const std::string& path, std::uint64_t& out) { readInt(v, path, out); }
void read(const Json& v, const std::string& path, std::vector<std::int64_t>& out) {
  PTW_CHECK(v.is_array(), path, ": expected an array of integers, got ", describe(v));
  out.clear();
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::int64_t x = 0;
    readInt(v[i], path + "[" + std::to_string(i) + "]", x);
    out.push_back(x);
  }
}

template <class Section>
void readSection(const Json& obj, const std::string& path, Section& section) {
  PTW_CHECK(obj.is_object(), path, ": expected an object, got ", describe(obj));
  std::set<std::string> known;
  visit(section, [&](const char* name, auto& field) {
    known.insert(name);
    auto it = obj.find(name);
    if (it != obj.end()) read(*it, path + "." + name, field);
  });
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    PTW_CHECK(known.count(it.key()), path, ".", it.key(), ": unknown field (known: ", [&] {
      std::string all;
      for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
      return all;
    }(), ")");
  }
}

Json toJsonValue(Profile p) {
  Json root;
  root["name"] = p.name;
  visitSections(p, [&](const char* sectionName, auto& section) {
    Json obj = Json::object();
    visit(section, [&](const char* name, auto& field) { obj[name] = field; });
    root[sectionName] = obj;
  });
  return root;
}

Profile fromJsonValue(const Json& root) {
  PTW_CHECK(root.is_object(), "expected a JSON object at the top level, got ", describe(root));
  Profile p;
  std::set<std::string> known{"name"};
  if (auto it = root.find("name"); it != root.end()) read(*it, "name", p.name);
  visitSections(p, [&](const char* sectionName, auto& section) {
    known.insert(sectionName);
    if (auto it = root.find(sectionName); it != root.end()) readSection(*it, sectionName, section);
  });
  for (auto it = root.begin(); it != root.end(); ++it) {
    PTW_CHECK(known.count(it.key()), it.key(),
              ": unknown section (known: name, model, data, strategy, hyper, run)");
  }
  auto errors = validate(p);
  if (!errors.empty()) throw Error(errors.front().text());
  return p;
}

// Line and column of a byte offset, for syntax errors.
std::pair<int, int> lineColumn(const std::string& text, std::size_t byte) {
  int line = 1, col = 1;
  for (std::size_t i = 0; i < text.size() && i + 1 < byte; ++i) {
    if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
  }
  return {line, col};
}

template <class T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

bool Profile::operator==(const Profile& other) const {
  return toJsonValue(*this) == toJsonValue(other);
}

std::vector<FieldError> validate(const Profile& p) {
  std::vector<FieldError> e;
  auto need = [&](bool ok, const char* path, const std::string& msg) {
    if (!ok) e.push_back({path, msg});
  };
  auto oneOf = [&](const std::string& v, std::initializer_list<const char*> allowed, const char* path) {
    for (const char* a : allowed) if (v == a) return;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    e.push_back({path, "expected one of " + list + ", got \"" + v + "\""});
  };

  oneOf(p.model.kind, {"linear", "mlp"}, "model.kind");
  need(p.model.inFeatures >= 1, "model.in_features", "must be >= 1, got " + str(p.model.inFeatures));
  need(p.model.outFeatures >= 1, "model.out_features", "must be >= 1, got " + str(p.model.outFeatures));
  for (auto h : p.model.hidden) need(h >= 1, "model.hidden", "every width must be >= 1, got " + str(h));
  oneOf(p.model.activation, {"relu", "tanh", "gelu"}, "model.activation");

  oneOf(p.data.kind, {"synthetic-regression", "synthetic-classification"}, "data.kind");
  need(p.data.samples >= 1, "data.samples", "must be >= 1, got " + str(p.data.samples));
  need(p.data.noise >= 0 && std::isfinite(p.data.noise), "data.noise", "must be >= 0, got " + str(p.data.noise));
  if (p.data.kind == "synthetic-classification")
    need(p.model.outFeatures >= 2, "model.out_features",
         "classification needs >= 2 outputs (one per class), got " + str(p.model.outFeatures));

  oneOf(p.strategy.kind, {"single", "ddp"}, "strategy.kind");
  need(p.strategy.ranks >= 1, "strategy.ranks", "must be >= 1, got " + str(p.strategy.ranks));
  need(p.strategy.ranks <= 256, "strategy.ranks", "must be <= 256, got " + str(p.strategy.ranks));
  if (p.strategy.kind == "single")
    need(p.strategy.ranks == 1, "strategy.ranks", "single runs one process: must be 1, got " + str(p.strategy.ranks));
  oneOf(p.strategy.backend, {"gloo", "nccl", "shm"}, "strategy.backend");
  if (p.strategy.backend == "shm")
    need(p.strategy.device == "cpu", "strategy.backend", "shm reduces CPU gradients; use nccl for cuda");
  oneOf(p.strategy.device, {"cpu", "cuda"}, "strategy.device");
  if (p.strategy.backend == "nccl")
    need(p.strategy.device == "cuda", "strategy.backend", "nccl needs strategy.device \"cuda\"; use gloo on cpu");
  need(p.strategy.bucketMb > 0, "strategy.bucket_mb", "must be > 0, got " + str(p.strategy.bucketMb));
  need(p.data.samples >= p.strategy.ranks, "strategy.ranks",
       "more ranks (" + str(p.strategy.ranks) + ") than samples (" + str(p.data.samples) +
           "); lower strategy.ranks or raise data.samples");

  need(p.hyper.lr > 0 && std::isfinite(p.hyper.lr), "hyper.lr", "must be > 0, got " + str(p.hyper.lr));
  need(p.hyper.batchSize >= 1, "hyper.batch_size", "must be >= 1, got " + str(p.hyper.batchSize));
  need(p.hyper.maxSteps >= 0, "hyper.max_steps", "must be >= 0, got " + str(p.hyper.maxSteps));
  need(p.hyper.epochs >= 0, "hyper.epochs", "must be >= 0, got " + str(p.hyper.epochs));
  need(p.hyper.maxSteps > 0 || p.hyper.epochs > 0, "hyper.max_steps",
       "set hyper.max_steps or hyper.epochs to a positive number");
  oneOf(p.hyper.optimizer, {"sgd", "adam"}, "hyper.optimizer");
  need(p.hyper.momentum >= 0 && p.hyper.momentum < 1, "hyper.momentum", "must be in [0, 1), got " + str(p.hyper.momentum));
  need(p.hyper.weightDecay >= 0, "hyper.weight_decay", "must be >= 0, got " + str(p.hyper.weightDecay));

  need(p.run.timeoutS > 0, "run.timeout_s", "must be > 0, got " + str(p.run.timeoutS));
  need(p.run.threadsPerRank >= 1, "run.threads_per_rank", "must be >= 1, got " + str(p.run.threadsPerRank));
  need(p.run.port >= 0 && p.run.port <= 65535, "run.port", "must be 0 (pick a free port) or 1-65535, got " + str(p.run.port));
  return e;
}

Profile parseProfile(const std::string& text, const std::string& origin) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const nlohmann::json::parse_error& ex) {
    auto [line, col] = lineColumn(text, ex.byte);
    std::string what = ex.what();
    // nlohmann prefixes "[json.exception.parse_error.101] parse error at line L, column C: ".
    auto pos = what.find("syntax error");
    PTW_FAIL(origin, ":", line, ":", col, ": invalid JSON: ",
             pos == std::string::npos ? what : what.substr(pos));
  }
  try {
    return fromJsonValue(root);
  } catch (const Error& ex) {
    PTW_FAIL(origin, ": ", ex.what());
  }
}

Profile loadProfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PTW_CHECK(in, path, ": cannot open profile (", std::strerror(errno), ")");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parseProfile(buffer.str(), path);
}

std::string toJson(const Profile& profile) { return toJsonValue(profile).dump(2) + "\n"; }

void saveProfile(const Profile& profile, const std::string& path) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    PTW_CHECK(out, path, ": cannot write profile (", std::strerror(errno), ")");
    out << toJson(profile);
    out.flush();
    PTW_CHECK(out.good(), path, ": write failed (", std::strerror(errno), ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    PTW_FAIL(path, ": cannot replace profile (", std::strerror(err), ")");
  }
}

Profile applyOverrides(const Profile& profile, const std::vector<std::string>& assignments) {
  Json root = toJsonValue(profile);
  for (const auto& a : assignments) {
    auto eq = a.find('=');
    PTW_CHECK(eq != std::string::npos && eq > 0, "--set ", a, ": expected key=value, e.g. hyper.lr=0.01");
    std::string key = a.substr(0, eq), raw = a.substr(eq + 1);
    Json value = Json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = raw;
    Json* node = &root;
    std::stringstream parts(key);
    std::string part, walked;
    std::vector<std::string> path;
    while (std::getline(parts, part, '.')) path.push_back(part);
    for (std::size_t i = 0; i < path.size(); ++i) {
      walked += (walked.empty() ? "" : ".") + path[i];
      PTW_CHECK(node->is_object() && node->contains(path[i]), "--set ", a, ": unknown field ", walked);
      node = &(*node)[path[i]];
    }
    PTW_CHECK(!node->is_object(), "--set ", a, ": ", key, " is a section; set one of its fields");
    *node = value;
  }
  try {
    return fromJsonValue(root);
  } catch (const Error& ex) {
    PTW_FAIL("--set: ", ex.what());
  }
}

Profile defaultProfile() {
  Profile p;
  p.name = "seed-ddp";
  return p;
}

}  // namespace ptw::core
