// SPDX-License-Identifier: GPL-3.0-or-later
// Profile JSON reading, writing and validation.
//
// Every section is described once, by a `visit` function that names its fields; the
// reader, the writer and equality all walk that one description, so adding a field is
// one line and cannot be forgotten in one of them.
#include "common/profile.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/command.h"
#include "common/data_kinds.h"
#include "common/error.h"
#include "common/launcher_kinds.h"
#include "common/strategies.h"

namespace ptw::core {
namespace {

using Json = nlohmann::ordered_json;

template <class F>
void visit(ModelSpec& m, F&& f) {
  f("kind", m.kind);
  f("in_features", m.inFeatures);
  f("out_features", m.outFeatures);
  f("hidden", m.hidden);
  f("activation", m.activation);
  f("path", m.path);
}
template <class F>
void visit(DataSpec& d, F&& f) {
  f("kind", d.kind);
  f("samples", d.samples);
  f("seed", d.seed);
  f("noise", d.noise);
  f("path", d.path);
  f("features", d.features);
  f("target", d.target);
  f("task", d.task);
  f("val_fraction", d.valFraction);
  f("labels_path", d.labelsPath);
  f("mean", d.mean);
  f("std", d.std);
  f("crop_padding", d.cropPadding);
  f("flip", d.flip);
}
template <class F>
void visit(StrategySpec& s, F&& f) {
  f("kind", s.kind);
  f("ranks", s.ranks);
  f("backend", s.backend);
  f("device", s.device);
  f("gpus", s.gpus);
  f("bucket_mb", s.bucketMb);
  f("pool_mode", s.poolMode);
}
template <class F>
void visit(HyperSpec& h, F&& f) {
  f("lr", h.lr);
  f("batch_size", h.batchSize);
  f("max_steps", h.maxSteps);
  f("epochs", h.epochs);
  f("optimizer", h.optimizer);
  f("momentum", h.momentum);
  f("nesterov", h.nesterov);
  f("weight_decay", h.weightDecay);
  f("schedule", h.schedule);
  f("warmup_steps", h.warmupSteps);
  f("step_size", h.stepSize);
  f("gamma", h.gamma);
  f("accumulate", h.accumulate);
  f("clip_norm", h.clipNorm);
  f("precision", h.precision);
  f("seed", h.seed);
  f("shuffle", h.shuffle);
  f("drop_last", h.dropLast);
}
template <class F>
void visit(RunOptions& r, F&& f) {
  f("timeout_s", r.timeoutS);
  f("threads_per_rank", r.threadsPerRank);
  f("loader_threads", r.loaderThreads);
  f("port", r.port);
  f("eval_every", r.evalEvery);
  f("checkpoint_every", r.checkpointEvery);
  f("resume_from", r.resumeFrom);
  f("max_restarts", r.maxRestarts);
  f("metrics", r.metrics);
  f("keep_every", r.keepEvery);
  f("keep_all_until", r.keepAllUntil);
  f("on_nan", r.onNan);
}
template <class F>
void visit(CommandSpec& c, F&& f) {
  f("program", c.program);
  f("args", c.args);
  f("cwd", c.cwd);
  f("env", c.env);
  f("pattern", c.pattern);
  f("report_ranks", c.reportRanks);
  f("stop_grace_s", c.stopGraceS);
}
template <class F>
void visit(HostsSpec& h, F&& f) {
  f("launcher", h.launcher);
  f("hosts", h.hosts);
  f("interface", h.interface);
  f("address", h.address);
  f("port", h.port);
  f("worker", h.worker);
  f("ssh_user", h.sshUser);
  f("ssh_port", h.sshPort);
  f("ssh_identity", h.sshIdentity);
  f("ssh_config", h.sshConfig);
  f("alive_interval_s", h.aliveIntervalS);
}
template <class F>
void visitSections(Profile& p, F&& f) {
  f("model", p.model);
  f("data", p.data);
  f("strategy", p.strategy);
  f("hyper", p.hyper);
  f("run", p.run);
  f("command", p.command);
  f("hosts", p.hosts);
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
  bool integral = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  PTW_CHECK(integral, path, ": expected an integer, got ", describe(v));
  if (std::is_unsigned<Int>::value) {
    PTW_CHECK(!(v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0) &&
                  !(v.is_number_float() && v.get<double>() < 0),
              path, ": expected a non-negative integer, got ", describe(v));
  }
  using Limits = std::numeric_limits<Int>;
  bool inRange = false;
  if (v.is_number_unsigned()) {
    inRange = v.get<std::uint64_t>() <= static_cast<std::uint64_t>(Limits::max());
  } else if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    inRange = i >= 0 ? static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(Limits::max())
                     : !std::is_unsigned<Int>::value && i >= static_cast<std::int64_t>(Limits::min());
  } else {
    // Int's max as a double rounds up to 2^digits, which does not fit: the bound is strict.
    const double d = v.get<double>();
    inRange = d >= static_cast<double>(Limits::min()) && d < std::ldexp(1.0, Limits::digits);
  }
  PTW_CHECK(inRange, path, ": integer out of range for this field (", Limits::min(), " to ", Limits::max(), "), got ",
            describe(v));
  out = v.is_number_float() ? static_cast<Int>(v.get<double>()) : v.get<Int>();
}
void read(const Json& v, const std::string& path, int& out) { readInt(v, path, out); }
void read(const Json& v, const std::string& path, std::int64_t& out) { readInt(v, path, out); }
void read(const Json& v, const std::string& path, std::uint64_t& out) { readInt(v, path, out); }
void read(const Json& v, const std::string& path, std::vector<std::string>& out) {
  PTW_CHECK(v.is_array(), path, ": expected an array of strings, got ", describe(v));
  out.clear();
  for (std::size_t i = 0; i < v.size(); ++i) {
    PTW_CHECK(v[i].is_string(), path, "[", i, "]: expected a string, got ", describe(v[i]));
    out.push_back(v[i].get<std::string>());
  }
}
void read(const Json& v, const std::string& path, std::vector<double>& out) {
  PTW_CHECK(v.is_array(), path, ": expected an array of numbers, got ", describe(v));
  out.clear();
  for (std::size_t i = 0; i < v.size(); ++i) {
    PTW_CHECK(v[i].is_number(), path, "[", i, "]: expected a number, got ", describe(v[i]));
    out.push_back(v[i].get<double>());
  }
}
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
    PTW_CHECK(
        known.count(it.key()), path, ".", it.key(), ": unknown field (known: ",
        [&] {
          std::string all;
          for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
          return all;
        }(),
        ")");
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
              ": unknown section (known: name, model, data, strategy, hyper, run, command, hosts)");
  }
  auto errors = validate(p);
  if (!errors.empty()) throw Error(errors.front().text());
  return p;
}

// Like fromJsonValue, but field by field, collecting every problem instead of the first.
Profile fromJsonCollecting(const Json& root, std::vector<FieldError>& errors) {
  Profile p;
  if (!root.is_object()) {
    errors.push_back({"", "expected a JSON object at the top level, got " + describe(root)});
    return p;
  }
  if (auto it = root.find("name"); it != root.end()) {
    try {
      read(*it, "name", p.name);
    } catch (const Error& e) {
      errors.push_back({"name", e.what()});
    }
  }
  visitSections(p, [&](const char* sectionName, auto& section) {
    auto sit = root.find(sectionName);
    if (sit == root.end()) return;
    if (!sit->is_object()) {
      errors.push_back({sectionName, "expected an object"});
      return;
    }
    visit(section, [&](const char* name, auto& field) {
      const std::string path = std::string(sectionName) + "." + name;
      auto it = sit->find(name);
      if (it == sit->end()) return;
      try {
        read(*it, path, field);
      } catch (const Error& e) {
        std::string msg = e.what();
        errors.push_back({path, msg.substr(msg.find(": ") == std::string::npos ? 0 : msg.find(": ") + 2)});
      }
    });
  });
  for (auto& e : validate(p)) errors.push_back(e);
  return p;
}

// Line and column of a byte offset, for syntax errors.
std::pair<int, int> lineColumn(const std::string& text, std::size_t byte) {
  int line = 1, col = 1;
  for (std::size_t i = 0; i < text.size() && i + 1 < byte; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

template <class T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// What the strategy's row in the table (common/strategies.h) asks of the profile.
template <class Need>
void validateStrategy(const StrategyInfo& info, const Profile& p, Need& need) {
  const auto& s = p.strategy;
  if (info.oneRank) need(s.ranks == 1, "strategy.ranks", s.kind + " runs one process: must be 1, got " + str(s.ranks));
  if (info.synthetic)  // they count steps, not epochs of data they do not read
    need(p.hyper.maxSteps > 0, "hyper.max_steps",
         s.kind + " ranks run hyper.max_steps steps: set it to a positive number");
  const auto choices = fieldChoices("strategy.device");
  if (std::find(choices.begin(), choices.end(), s.device) != choices.end() &&  // else said already
      std::find(info.devices.begin(), info.devices.end(), s.device) == info.devices.end())
    need(false, "strategy.device",
         info.deviceAdvice.empty() ? s.kind + " does not run on " + s.device : info.deviceAdvice);
  if (info.backends.empty()) return;
  if (s.backend == "shm") need(s.device == "cpu", "strategy.backend", "shm reduces CPU gradients; use nccl for cuda");
  if (s.backend == "nccl")
    need(s.device == "cuda", "strategy.backend", "nccl needs strategy.device \"cuda\"; use gloo on cpu");
}

// The strategy section: its row in the table of strategies, the ranks, devices and GPUs.
template <class Need, class OneOf>
void validateStrategySection(const Profile& p, Need& need, OneOf& oneOf) {
  const auto& s = p.strategy;
  const bool fileData = readsDataFiles(p.data);
  const StrategyInfo* info = findStrategy(s.kind);
  if (!info) oneOf(s.kind, "strategy.kind");  // a row kept out of the list (hidden) may be named
  need(s.ranks >= 1, "strategy.ranks", "must be >= 1, got " + str(s.ranks));
  const int maxRanks = info ? info->maxRanks : 255;
  need(s.ranks <= maxRanks, "strategy.ranks", "must be <= " + str(maxRanks) + ", got " + str(s.ranks));
  oneOf(s.backend, "strategy.backend");
  oneOf(s.device, "strategy.device");
  if (info) validateStrategy(*info, p, need);
  if (!s.gpus.empty()) {
    need(s.device == "cuda", "strategy.gpus",
         "lists GPUs, but strategy.device is \"" + s.device + "\"; leave it empty, or set the device to \"cuda\"");
    const std::size_t wanted = static_cast<std::size_t>(std::max(trainingRanks(p), 1));
    need(s.gpus.size() == wanted, "strategy.gpus",
         "lists " + str(static_cast<std::int64_t>(s.gpus.size())) + " GPU(s) for " +
             str(static_cast<std::int64_t>(wanted)) +
             " rank(s)/lane(s); list one per rank, or none for cuda:0 onwards");
    std::set<std::int64_t> seen;
    for (auto g : s.gpus) {
      need(g >= 0, "strategy.gpus", "every index must be >= 0, got " + str(g));
      need(seen.insert(g).second, "strategy.gpus",
           "cuda:" + str(g) + " is listed twice; each rank/lane needs a GPU of its own");
    }
  }
  need(s.bucketMb > 0, "strategy.bucket_mb", "must be > 0, got " + str(s.bucketMb));
  oneOf(s.poolMode, "strategy.pool_mode");
  if ((!fileData || p.data.samples > 0) && !(info && info->synthetic)) {
    auto train = p.data.samples - p.data.heldOut(p.data.samples);
    need(train >= s.ranks, "strategy.ranks",
         "more ranks (" + str(s.ranks) + ") than training samples (" + str(train) +
             "); lower strategy.ranks or raise data.samples");
  }
}

// The names of the data kinds that hold images: "cifar10, image-folder or npy".
std::string imageDataKinds() {
  std::vector<std::string> names;
  for (const auto& k : dataKinds())
    if (k.images) names.push_back(k.name);
  std::string list;
  for (std::size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return list;
}

// What the data kind's row in its table (common/data_kinds.h) asks of the data section.
template <class Need>
void validateDataKind(const Profile& p, Need& need) {
  const DataSpec& d = p.data;
  const DataKindInfo* kind = findDataKind(d.kind);  // none: said by oneOf
  if (kind && kind->readsFiles) need(!d.path.empty(), "data.path", d.kind + " needs " + kind->pathHint);
  if (kind && kind->readsColumns)
    need(!d.target.empty(), "data.target", d.kind + " needs the name of the target column");
  if (kind && kind->readsLabelsFile)
    need(!d.labelsPath.empty(), "data.labels_path", d.kind + " needs the labels' .npy file");
  need((kind && kind->images) || (d.mean.empty() && d.std.empty() && d.cropPadding == 0 && !d.flip), "data.kind",
       "normalisation and augmentation (data.mean, data.std, data.crop_padding, data.flip) need image data: " +
           imageDataKinds());
}

bool plausibleInterface(const std::string& name) {
  if (name.empty() || name.size() > 15) return false;  // IFNAMSIZ
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == ':';
  });
}

// The hosts section (docs/multihost.md): where the ranks run.
template <class Need, class OneOf>
void validateHosts(const Profile& p, Need& need, OneOf& oneOf) {
  const auto& h = p.hosts;
  oneOf(h.launcher, "hosts.launcher");
  need(h.port >= 0 && h.port <= 65535, "hosts.port", "must be 0 (a port free here) or 1-65535, got " + str(h.port));
  need(h.sshPort >= 0 && h.sshPort <= 65535, "hosts.ssh_port",
       "must be 0 (ssh's default) or 1-65535, got " + str(h.sshPort));
  need(h.aliveIntervalS >= 1 && h.aliveIntervalS <= 600, "hosts.alive_interval_s",
       "must be in 1..600 seconds, got " + str(h.aliveIntervalS));
  need(h.interface.empty() || plausibleInterface(h.interface), "hosts.interface",
       "expected a network interface's name (up to 15 letters, digits, _ . - :), got \"" + h.interface + "\"");
  need(h.address.empty() || plausibleHostName(h.address), "hosts.address",
       "expected a host name or IPv4 address, or \"\" for the first host, got \"" + h.address + "\"");
  need(h.worker.empty() || h.worker.front() == '/', "hosts.worker",
       "expected an absolute path of ptw-worker on the hosts, or \"\" for this one's, got \"" + h.worker + "\"");
  const bool userOk = h.sshUser.size() <= 32 && (h.sshUser.empty() || h.sshUser.front() != '-') &&
                      std::all_of(h.sshUser.begin(), h.sshUser.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
                      });
  need(userOk, "hosts.ssh_user",
       "expected a user name (letters, digits, _ . -, not starting with -), got \"" + h.sshUser + "\"");
  std::vector<HostSlots> hosts;
  try {
    hosts = parseHosts(h.hosts);
  } catch (const Error& ex) {
    need(false, "hosts.hosts", ex.what());
    return;
  }
  const LauncherInfo* launcher = findLauncher(h.launcher);
  if (!launcher) return;  // said by oneOf
  if (!launcher->remoteRanks) {
    need(hosts.empty(), "hosts.hosts",
         "lists hosts, but hosts.launcher is \"" + h.launcher +
             "\" (every rank on this machine); set it to \"ssh\", or empty the list");
    return;
  }
  // A launcher that needs no hosts takes them from elsewhere: slurm, the allocation's nodes.
  need(!hosts.empty() || !launcher->needsHosts, "hosts.hosts",
       "the " + h.launcher + " launcher needs at least one host, e.g. [\"node1:2\", \"node2:2\"]");
  const auto& s = p.strategy;
  const StrategyInfo* strategy = findStrategy(s.kind);
  const bool acrossHosts = strategy && strategy->acrossHosts;
  need(acrossHosts, "strategy.kind",
       "\"" + s.kind + "\" runs on one host only; across hosts (hosts.launcher \"" + h.launcher + "\") use " +
           acrossHostsStrategies() + " over gloo or nccl");
  if (acrossHosts) {
    need(s.backend != "shm", "strategy.backend",
         "\"shm\" needs every rank on one host; across hosts use \"gloo\" (cpu) or \"nccl\" (cuda)");
    int slots = 0;
    for (const auto& e : hosts) slots += e.slotCount;
    need(hosts.empty() || slots == processCount(p), "hosts.hosts",
         "the hosts' slots add up to " + str(slots) + ", but the run has " + str(processCount(p)) +
             " ranks (strategy.ranks); make them equal");
  }
  need(p.run.port == 0, "run.port",
       "across hosts the ranks meet at hosts.address:hosts.port; set hosts.port instead and leave run.port 0");
}

}  // namespace

std::vector<HostSlots> parseHosts(const std::vector<std::string>& entries) {
  std::vector<HostSlots> out;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string& e = entries[i];
    const auto colon = e.rfind(':');
    HostSlots hs;
    hs.host = e.substr(0, colon);
    bool ok = plausibleHostName(hs.host);
    if (ok && colon != std::string::npos) {
      const std::string n = e.substr(colon + 1);
      ok = !n.empty() && n.size() <= 4 && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (ok) hs.slotCount = std::stoi(n);
      ok = ok && hs.slotCount >= 1;
    }
    PTW_CHECK(ok, "entry ", i, ": expected host:slots (a host name or IPv4 address, slots >= 1), got \"", e, "\"");
    PTW_CHECK(seen.insert(hs.host).second, "entry ", i, ": host ", hs.host,
              " is listed twice; give it once with all its slots");
    out.push_back(hs);
  }
  return out;
}

bool plausibleHostName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  std::size_t start = 0;
  for (;;) {
    const auto dot = name.find('.', start);
    const std::string label = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

std::vector<std::string> rankHosts(const Profile& p) {
  std::vector<std::string> out;
  if (!ranksMayBeRemote(p)) return out;
  for (const auto& e : parseHosts(p.hosts.hosts))
    for (int i = 0; i < e.slotCount; ++i) out.push_back(e.host);
  return out;
}

bool readsDataFiles(const DataSpec& data) {
  const DataKindInfo* k = findDataKind(data.kind);
  return !k || k->readsFiles;  // nothing is known of a kind not in the table; validation names it
}

bool isClassification(const DataSpec& data) {
  const DataKindInfo* k = findDataKind(data.kind);
  return k && (k->classification || (k->readsTask && data.task == "classification"));
}

bool Profile::operator==(const Profile& other) const { return toJsonValue(*this) == toJsonValue(other); }

std::vector<FieldError> validate(const Profile& p) {
  std::vector<FieldError> e;
  auto need = [&](bool ok, const char* path, const std::string& msg) {
    if (!ok) e.push_back({path, msg});
  };
  auto oneOf = [&](const std::string& v, const char* path) {
    const auto allowed = fieldChoices(path);
    for (const auto& a : allowed)
      if (v == a) return;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    e.push_back({path, "expected one of " + list + ", got \"" + v + "\""});
  };

  const bool fileData = readsDataFiles(p.data);
  oneOf(p.model.kind, "model.kind");
  need(p.model.inFeatures >= 1, "model.in_features", "must be >= 1, got " + str(p.model.inFeatures));
  need(p.model.outFeatures >= 1, "model.out_features", "must be >= 1, got " + str(p.model.outFeatures));
  for (auto h : p.model.hidden) need(h >= 1, "model.hidden", "every width must be >= 1, got " + str(h));
  oneOf(p.model.activation, "model.activation");
  if (p.model.kind == "cnn")
    need(p.model.inFeatures == 784, "model.in_features",
         "cnn takes 1×28×28 images: must be 784, got " + str(p.model.inFeatures));
  if (p.model.kind == "torchscript")
    need(!p.model.path.empty(), "model.path", "torchscript needs the .pt file made with torch.jit.script or trace");

  oneOf(p.data.kind, "data.kind");
  need(fileData ? p.data.samples >= 0 : p.data.samples >= 1, "data.samples",
       std::string(fileData ? "must be >= 0 (0 = every row)" : "must be >= 1") + ", got " + str(p.data.samples));
  need(p.data.noise >= 0 && std::isfinite(p.data.noise), "data.noise", "must be >= 0, got " + str(p.data.noise));
  need(p.data.valFraction >= 0 && p.data.valFraction < 1, "data.val_fraction",
       "must be in [0, 1), got " + str(p.data.valFraction));
  oneOf(p.data.task, "data.task");
  validateDataKind(p, need);
  need(p.data.mean.size() == p.data.std.size(), "data.std",
       "needs one value per channel, like data.mean: " + str(static_cast<std::int64_t>(p.data.mean.size())) +
           " mean(s), " + str(static_cast<std::int64_t>(p.data.std.size())) + " std(s)");
  for (double v : p.data.std) need(v > 0 && std::isfinite(v), "data.std", "every value must be > 0, got " + str(v));
  for (double v : p.data.mean) need(std::isfinite(v), "data.mean", "every value must be finite, got " + str(v));
  need(p.data.cropPadding >= 0, "data.crop_padding", "must be >= 0, got " + str(p.data.cropPadding));
  const bool classification = isClassification(p.data);
  if (classification && p.model.kind != "torchscript")
    need(p.model.outFeatures >= 2, "model.out_features",
         "classification needs >= 2 outputs (one per class), got " + str(p.model.outFeatures));

  validateStrategySection(p, need, oneOf);
  const auto& s = p.strategy;
  const auto& h = p.hyper;
  const StrategyInfo* info = findStrategy(s.kind);
  const bool readsPoolMode = info && info->readsPoolMode;
  need(h.lr > 0 && std::isfinite(h.lr), "hyper.lr", "must be > 0, got " + str(h.lr));
  need(h.batchSize >= 1, "hyper.batch_size", "must be >= 1, got " + str(h.batchSize));
  need(h.maxSteps >= 0, "hyper.max_steps", "must be >= 0, got " + str(h.maxSteps));
  need(h.epochs >= 0, "hyper.epochs", "must be >= 0, got " + str(h.epochs));
  const bool boundsItself = info && info->runsCommand;  // a user's program may end on its own
  need(h.maxSteps > 0 || h.epochs > 0 || boundsItself, "hyper.max_steps", "set hyper.max_steps or hyper.epochs > 0");
  oneOf(h.optimizer, "hyper.optimizer");
  need(h.momentum >= 0 && h.momentum < 1, "hyper.momentum", "must be in [0, 1), got " + str(h.momentum));
  if (h.nesterov)
    need(h.optimizer == "sgd" && h.momentum > 0, "hyper.nesterov", "needs optimizer sgd and momentum > 0");
  need(h.weightDecay >= 0, "hyper.weight_decay", "must be >= 0, got " + str(h.weightDecay));
  oneOf(h.schedule, "hyper.schedule");
  need(h.warmupSteps >= 0, "hyper.warmup_steps", "must be >= 0, got " + str(h.warmupSteps));
  need(h.stepSize >= 1, "hyper.step_size", "must be >= 1, got " + str(h.stepSize));
  need(h.gamma > 0 && h.gamma <= 1, "hyper.gamma", "must be in (0, 1], got " + str(h.gamma));
  if (h.schedule == "cosine") need(h.maxSteps > 0, "hyper.schedule", "cosine decays to hyper.max_steps: set it");
  need(h.accumulate >= 1, "hyper.accumulate", "must be >= 1, got " + str(h.accumulate));
  need(h.clipNorm >= 0 && std::isfinite(h.clipNorm), "hyper.clip_norm",
       "must be >= 0 (0 = off), got " + str(h.clipNorm));
  oneOf(h.precision, "hyper.precision");
  if (h.precision != "fp32")
    need(s.device == "cuda", "hyper.precision",
         "mixed precision runs on cuda; on cpu use \"fp32\" (CPU autocast is slower than fp32 for these models)");
  if (readsPoolMode && s.poolMode == "hogwild") {
    need(h.accumulate == 1, "hyper.accumulate",
         "hogwild workers step on their own: must be 1, got " + str(h.accumulate));
    need(h.clipNorm == 0, "hyper.clip_norm", "hogwild workers step on their own: must be 0, got " + str(h.clipNorm));
  }

  const auto& r = p.run;
  need(r.timeoutS > 0 && r.timeoutS <= 604800, "run.timeout_s",
       "must be > 0 and at most 604800 (a week), got " + str(r.timeoutS));
  need(r.threadsPerRank >= 1, "run.threads_per_rank", "must be >= 1, got " + str(r.threadsPerRank));
  need(r.loaderThreads >= 0 && r.loaderThreads <= core::kMaxLoaderThreads, "run.loader_threads",
       "must be in 0.." + str(core::kMaxLoaderThreads) + " (0 prepares each batch in the step), got " +
           str(r.loaderThreads));
  need(r.port >= 0 && r.port <= 65535, "run.port", "must be 0 (pick a free port) or 1-65535, got " + str(r.port));
  need(r.evalEvery >= 0, "run.eval_every", "must be >= 0, got " + str(r.evalEvery));
  if (r.evalEvery > 0)
    need(p.data.valFraction > 0, "run.eval_every", "validation needs a held-out split: set data.val_fraction");
  need(r.maxRestarts >= 0 && r.maxRestarts <= 100, "run.max_restarts", "must be in 0..100, got " + str(r.maxRestarts));
  need(r.checkpointEvery >= 0, "run.checkpoint_every", "must be >= 0, got " + str(r.checkpointEvery));
  need(r.keepEvery >= 1, "run.keep_every", "must be >= 1 (1 keeps every step's records), got " + str(r.keepEvery));
  need(r.keepAllUntil >= 0, "run.keep_all_until", "must be >= 0, got " + str(r.keepAllUntil));
  oneOf(r.onNan, "run.on_nan");
  if (info && info->runsCommand)
    for (auto& problem : validateCommand(p)) e.push_back(std::move(problem));
  validateHosts(p, need, oneOf);
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
    PTW_FAIL(origin, ":", line, ":", col, ": invalid JSON: ", pos == std::string::npos ? what : what.substr(pos));
  } catch (const nlohmann::json::exception& ex) {
    // Not a syntax error but a value JSON cannot hold here, e.g. a number beyond double range.
    std::string what = ex.what();
    auto pos = what.find("] ");
    PTW_FAIL(origin, ": invalid JSON: ", pos == std::string::npos ? what : what.substr(pos + 2));
  }
  try {
    return fromJsonValue(root);
  } catch (const Error& ex) {
    PTW_FAIL(origin, ": ", ex.what());
  }
}

Profile parseProfileFields(const std::string& text, std::vector<FieldError>& errors) {
  Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    errors.push_back({"", "invalid JSON"});
    return Profile{};
  }
  return fromJsonCollecting(root, errors);
}

std::vector<std::pair<std::string, std::string>> profileFields(const Profile& profile) {
  Profile p = profile;
  std::vector<std::pair<std::string, std::string>> out{{"name", Json(p.name).dump()}};
  visitSections(p, [&](const char* sectionName, auto& section) {
    visit(section, [&](const char* name, auto& field) {
      out.emplace_back(std::string(sectionName) + "." + name, Json(field).dump());
    });
  });
  return out;
}

std::vector<std::string> fieldChoices(const std::string& path) {
  static const std::map<std::string, std::vector<std::string>> choices = {
      {"model.kind", {"linear", "mlp", "cnn", "torchscript"}},
      {"model.activation", {"relu", "tanh", "gelu"}},
      {"data.task", {"regression", "classification"}},
      {"strategy.device", {"cpu", "cuda"}},
      {"strategy.pool_mode", {"sync", "hogwild"}},
      {"hyper.optimizer", {"sgd", "adam", "adamw"}},
      {"hyper.schedule", {"constant", "step", "cosine"}},
      {"hyper.precision", {"fp32", "bf16"}},
      {"run.on_nan", {"warn", "stop"}},
  };
  if (path == "strategy.kind" || path == "strategy.backend") {  // from the table of strategies
    std::vector<std::string> names;
    for (const auto& s : strategies()) {
      if (s.hidden) continue;
      const auto& add = path == "strategy.kind" ? std::vector<std::string>{s.name} : s.backends;
      for (const auto& n : add)
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
    return names;
  }
  std::vector<std::string> names;  // from their tables
  if (path == "data.kind")
    for (const auto& k : dataKinds()) names.push_back(k.name);
  if (path == "hosts.launcher")
    for (const auto& l : launchers()) names.push_back(l.name);
  if (!names.empty()) return names;
  auto it = choices.find(path);
  return it == choices.end() ? std::vector<std::string>{} : it->second;
}

const std::map<std::string, std::string>& fieldHelp() {
  // docs/profiles.md's "meaning" column holds these same lines (tests/core/test_profile.cpp
  // compares them), so the editor's tooltips and the manual cannot drift apart.
  static const std::map<std::string, std::string> help = {
      {"name", "shown in run folder names and the run history"},
      {"model.kind",
       "`linear`: one Linear layer; `mlp`: Linear layers with `hidden` widths and `activation` between them; `cnn`: "
       "LeNet-5 on 1×28×28 images; `torchscript`: a model made in Python"},
      {"model.in_features", "inputs per sample"},
      {"model.out_features", "outputs per sample; for classification, the number of classes"},
      {"model.hidden", "`mlp`: the hidden layers' widths, e.g. `[64, 64]`"},
      {"model.activation", "`mlp`: the activation between layers"},
      {"model.path",
       "`torchscript`: a `.pt` from `torch.jit.script(m).save(path)` or `torch.jit.trace`; trained and saved back as "
       "TorchScript (`model.final.pt`); a weight tied to two names is one parameter, as in PyTorch"},
      {"data.kind",
       "generated regression data (the seed workload); Gaussian blobs, one per class; a CSV file; IDX files "
       "(`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`) in a folder; CIFAR-10 binary batches "
       "(`data_batch_*.bin`) in a folder; a folder of PNG/JPEG images, one subfolder per class; `.npy` arrays "
       "(features in `data.path`, labels in `data.labels_path`); see [data.md](data.md)"},
      {"data.samples",
       "synthetic: how many samples; files: the first N samples, 0 = all; the training part must hold at least "
       "`strategy.ranks` samples"},
      {"data.seed", "synthetic: the generator's seed"},
      {"data.noise", "synthetic: the noise scale"},
      {"data.path", "where the data is"},
      {"data.features", "`csv`: the feature columns; empty = every column but the target"},
      {"data.target", "`csv`: the target column"},
      {"data.task", "`csv`, `npy`: regression (MSE) or classification (cross-entropy on integer class labels)"},
      {"data.val_fraction",
       "the share held out from the end of the data (an image folder: from the end of every class) for validation: "
       "its loss (and accuracy) every `run.eval_every` steps and at the end"},
      {"data.labels_path", "`npy`: the labels' `.npy` (int64 class labels, or float targets for regression)"},
      {"data.mean", "images: per-channel mean, subtracted after scaling pixels to [0, 1]; empty = none"},
      {"data.std", "images: per-channel standard deviation, divided by after the mean; one per `data.mean`"},
      {"data.crop_padding",
       "images: pad by this many zeros on each side, then crop a random window of the image's size; 0 = off"},
      {"data.flip", "images: flip half of the samples left to right, at random"},
      {"strategy.kind",
       "one process; one process with a replica per CPU lane or GPU; one process per rank, gradients all-reduced; a "
       "coordinator and workers on parameters in shared memory; your own program, a process per rank (the `command` "
       "section)"},
      {"strategy.ranks",
       "`ddp`, `command`: processes; `dataparallel`: replicas (lanes); `pool`: workers (plus a coordinator process)"},
      {"strategy.backend",
       "`ddp`: how gradients are reduced. `auto` is `shm` on `cpu` (or `gloo` for a model whose parameters are not all "
       "dense float32), `nccl` on `cuda` (`gloo` where this build has no NCCL); rank 0's log names the choice. `shm`: "
       "same-machine CPU ranks through a segment in `/dev/shm`, reserved at start (too small a `/dev/shm` fails the "
       "run at once)"},
      {"strategy.device", "rank or lane *i* uses `cuda:i`, or the *i*-th of `strategy.gpus`"},
      {"strategy.gpus",
       "the GPU of each rank or lane, e.g. `[2, 3]`; empty = `cuda:0` onwards; a sweep gives each configuration the "
       "first of them it needs"},
      {"strategy.bucket_mb",
       "`ddp` over Gloo or NCCL: gradient bucket size; buckets are all-reduced from autograd hooks as they fill"},
      {"strategy.pool_mode",
       "`pool`: `sync` averages the workers' gradients every step (Single's result); `hogwild` lets each worker step "
       "the shared parameters without locks (a resume restores the parameters and the step, not the workers' "
       "momentum)"},
      {"hyper.lr", "learning rate (the peak, with a schedule)"},
      {"hyper.batch_size", "batch per rank, lane or worker; the global batch is ranks × this"},
      {"hyper.max_steps",
       "stop after this many optimizer steps; 0 = no limit. A `command` program not passed `{hyper.max_steps}` is "
       "stopped gracefully once every rank has reported it ([scripts.md](scripts.md))"},
      {"hyper.epochs", "stop after this many epochs; 0 = no limit"},
      {"hyper.optimizer", "the optimizer"},
      {"hyper.momentum", "`sgd`: momentum"},
      {"hyper.nesterov", "`sgd`: Nesterov momentum"},
      {"hyper.weight_decay", "weight decay (decoupled for `adamw`)"},
      {"hyper.schedule",
       "the learning rate over steps: constant; × `gamma` every `step_size` steps; cosine decay to `max_steps`; each "
       "times a linear warm-up"},
      {"hyper.warmup_steps", "linear warm-up from 0 to `lr` over this many steps"},
      {"hyper.step_size", "`step` schedule: steps between decays"},
      {"hyper.gamma", "`step` schedule: the decay factor"},
      {"hyper.accumulate", "micro-batches per optimizer step; DDP communicates once per step"},
      {"hyper.clip_norm", "clip the global gradient norm to this; 0 = off"},
      {"hyper.precision", "`bf16`: autocast on CUDA"},
      {"hyper.seed", "seeds the model's initial parameters, the sampler and image augmentation"},
      {"hyper.shuffle",
       "sampler: shuffle every epoch (a permutation seeded with seed + epoch, as `DistributedSampler`)"},
      {"hyper.drop_last", "sampler: drop the tail that does not divide evenly over the ranks instead of padding it"},
      {"run.timeout_s",
       "a rank silent this long, or no rank past a step this long, is reported stalled; the ranks' own collective "
       "timeout is 5 s more"},
      {"run.threads_per_rank", "intra-op (and OpenBLAS) threads per worker process"},
      {"run.loader_threads",
       "threads per rank that prepare the next batches (gather, augment; pinned memory on a GPU) during the step; "
       "0 prepares each in the step"},
      {"run.port", "0: ranks meet through a `FileStore` in the run folder; else a `TCPStore` on this port"},
      {"run.eval_every", "validation every N steps, and at the end; 0 = only at the end"},
      {"run.checkpoint_every", "checkpoint every N steps, and at the end; 0 = only at the end"},
      {"run.resume_from",
       "continue from it exactly (parameters, optimizer state, step, epoch position, RNG); empty starts fresh"},
      {"run.max_restarts", "after a failure, restart the whole run from its last checkpoint this many times"},
      {"run.keep_every", "past `run.keep_all_until`, the store keeps the records of every N-th step (1 keeps all)"},
      {"run.keep_all_until", "the store keeps every step's records up to this step"},
      {"run.metrics", "stream every step's record; `false` sends only heartbeats (to measure what watching costs)"},
      {"run.on_nan",
       "a loss that is NaN or infinite: `warn` names the rank and step and goes on, `stop` fails the run there "
       "(exit 3)"},
      {"command.program",
       "`command`: the program each rank runs, e.g. `python3`, or a launcher such as `mpirun`; a bare name is looked "
       "up on `PATH`"},
      {"command.args",
       "`command`: its arguments, one string each, never through a shell; `{hyper.lr}` (any `section.field`) is "
       "replaced by the profile's value"},
      {"command.cwd", "`command`: the working directory, relative to the profile's folder; empty = that folder"},
      {"command.env", "`command`: extra environment, `\"KEY=VALUE\"` each; templates as in `command.args`"},
      {"command.pattern",
       "`command`: picks metrics out of output lines for a script that does not report them, e.g. `step {step} loss "
       "{loss}`; `{name}` matches a number, the rest is a regular expression"},
      {"command.report_ranks",
       "`command`: the ranks its records name; 0 = `strategy.ranks` (`mpirun -np 4` under one process: 4)"},
      {"command.stop_grace_s", "`command`: a stop sends SIGINT, then SIGTERM, then SIGKILL, this many seconds apart"},
      {"hosts.launcher",
       "`local`: every rank on this machine; `ssh`: each rank started on its host through OpenSSH in batch mode; "
       "`slurm`: each node's ranks started by one job step there (`srun`), in the allocation ptw runs in or in a "
       "job ptw writes for `sbatch` ([multihost.md](multihost.md))"},
      {"hosts.hosts",
       "`ssh`: the hosts as `host:slots` (horovodrun's form), e.g. `[\"node1:2\", \"node2:2\"]`; ranks fill them "
       "in order; the slots add up to the ranks; `slurm`: the nodes, the same way; empty = the allocation's"},
      {"hosts.interface",
       "`ssh`, `slurm`: the network interface the ranks talk over: Gloo's device, as `GLOO_SOCKET_IFNAME`, and "
       "`NCCL_SOCKET_IFNAME`; empty = what the host's name resolves to; the window offers this machine's "
       "interfaces"},
      {"hosts.address", "`ssh`, `slurm`: where the ranks meet (rank 0's `TCPStore`); empty = the first host"},
      {"hosts.port",
       "`ssh`, `slurm`: the rendezvous port, on the first host; 0 = `ssh`: a port free there, which the check before "
       "a run asks it for; `slurm`: 20000 + the job's id modulo 20000"},
      {"hosts.worker",
       "`ssh`, `slurm`: `ptw-worker`'s absolute path on the hosts; empty = the same path as on this machine"},
      {"hosts.ssh_user", "`ssh`: the user on the hosts (`ssh -l`); empty = ssh's default"},
      {"hosts.ssh_port", "`ssh`: the hosts' ssh port (`ssh -p`); 0 = ssh's default"},
      {"hosts.ssh_identity", "`ssh`: the private key (`ssh -i`); empty = ssh's default"},
      {"hosts.ssh_config", "`ssh`: an ssh configuration file (`ssh -F`); empty = ssh's default"},
      {"hosts.alive_interval_s",
       "`ssh`: seconds between ssh's keep-alives (`ServerAliveInterval`); a host silent for 3 of them is lost and "
       "its ranks named"},
  };
  return help;
}

Profile loadProfile(const std::string& path) {
  std::error_code missing;
  PTW_CHECK(std::filesystem::exists(path, missing), "profile ", path,
            " does not exist; give an existing profile file to -p/--profile (examples: resources/profiles/)");
  std::ifstream in(path, std::ios::binary);
  PTW_CHECK(in, path, ": cannot open profile (", std::strerror(errno), ")");
  std::stringstream buffer;
  buffer << in.rdbuf();
  Profile p = parseProfile(buffer.str(), path);
  resolvePaths(p, std::filesystem::absolute(std::filesystem::path(path)).parent_path().string());
  return p;
}

void resolvePaths(Profile& p, const std::string& folder) {
  // Files a profile names are relative to the profile, so a folder of profiles and data
  // can be moved or shipped as one.
  const std::filesystem::path base(folder);
  for (std::string* file : {&p.model.path, &p.data.path, &p.data.labelsPath, &p.run.resumeFrom}) {
    if (!file->empty() && std::filesystem::path(*file).is_relative())
      *file = (base / *file).lexically_normal().string();
  }
  // A script's folder, likewise; templates in it are replaced later, against this path.
  if (const StrategyInfo* s = findStrategy(p.strategy.kind); s && s->runsCommand)
    p.command.cwd = (base / p.command.cwd).lexically_normal().string();
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

int processCount(const Profile& p) {
  const StrategyInfo* s = findStrategy(p.strategy.kind);
  if (!s) return 1;
  if (s->ranksPerProcess > 0) return (p.strategy.ranks + s->ranksPerProcess - 1) / s->ranksPerProcess;
  return (s->processPerRank ? p.strategy.ranks : 1) + (s->coordinator ? 1 : 0);
}

std::string collectiveBackend(const Profile& p, bool haveNccl) {
  if (p.strategy.backend != "auto") return p.strategy.backend;
  if (p.strategy.device == "cpu") return ranksMayBeRemote(p) ? "gloo" : "shm";  // shm needs one host
  return haveNccl ? "nccl" : "gloo";
}

std::int64_t cudaIndexFor(const Profile& p, int index) {
  const auto& gpus = p.strategy.gpus;
  return index >= 0 && static_cast<std::size_t>(index) < gpus.size() ? gpus[static_cast<std::size_t>(index)] : index;
}

int reportingRanks(const Profile& p) {
  const StrategyInfo* s = findStrategy(p.strategy.kind);
  if (s && s->runsCommand && p.command.reportRanks > 0) return p.command.reportRanks;
  return trainingRanks(p) + (hasCoordinator(p) ? 1 : 0);
}

std::int64_t warmupSteps(const Profile& profile) {
  const std::int64_t steps = profile.hyper.maxSteps;
  return steps > 0 ? std::min<std::int64_t>(steps / 10, 10) : 10;
}

Profile defaultProfile() {
  Profile p;
  p.name = "seed-ddp";
  return p;
}

}  // namespace ptw::core
