// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/worker_invocation.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace ptw::core {
namespace {

// The value `v` of flag `k`, an integer.
long long toLong(const std::string& k, const std::string& v) {
  try {
    std::size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used == v.size()) return x;
  } catch (...) {
  }
  PTW_FAIL(k, ": expected an integer, got \"", v, "\"");
}

int toInt(const std::string& k, const std::string& v) {
  const long long x = toLong(k, v);
  PTW_CHECK(x >= INT_MIN && x <= INT_MAX, k, ": expected an integer, got \"", v, "\"");
  return static_cast<int>(x);
}

InjectedFault parseFault(const std::string& spec) {
  const auto malformed = [&] {
    PTW_FAIL(
        "--fault: expected throw-at-start:RANK, hang-at-start:RANK, kill-at-step:RANK:STEP, hang-at-step:RANK:STEP "
        "or slow-at-step:RANK:STEP:FACTOR (FACTOR > 1), got \"",
        spec, "\"");
  };
  auto number = [&](const std::string& s) {
    std::size_t used = 0;
    long long x = -1;
    try {
      x = std::stoll(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used != s.size() || x < 0 || x > INT_MAX) malformed();
    return x;
  };
  std::vector<std::string> parts;
  for (std::size_t at = 0;;) {
    const auto colon = spec.find(':', at);
    parts.push_back(spec.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  InjectedFault f;
  f.kind = parts[0];
  const bool atStart = f.kind == "throw-at-start" || f.kind == "hang-at-start";
  const bool atStep = f.kind == "kill-at-step" || f.kind == "hang-at-step";
  const bool slow = f.kind == "slow-at-step";
  if (parts.size() != (atStart ? 2u : atStep ? 3u : slow ? 4u : 0u)) malformed();
  f.rank = static_cast<int>(number(parts[1]));
  if (atStep || slow) f.step = number(parts[2]);
  if (slow) {
    std::size_t used = 0;
    try {
      f.factor = std::stod(parts[3], &used);
    } catch (...) {
      used = 0;
    }
    if (used != parts[3].size() || !(f.factor > 1) || !std::isfinite(f.factor)) malformed();
  }
  return f;
}

std::string faultSpec(const InjectedFault& f) {
  std::string spec = f.kind + ":" + std::to_string(f.rank);
  if (f.kind == "kill-at-step" || f.kind == "hang-at-step" || f.kind == "slow-at-step")
    spec += ":" + std::to_string(f.step);
  if (f.kind == "slow-at-step") {
    std::ostringstream factor;
    factor << std::setprecision(17) << f.factor;
    spec += ":" + factor.str();
  }
  return spec;
}

using Value = std::optional<std::string>;

// A flag that takes a value: its name, its value in an invocation (nullopt where the field
// is at its default, and so not written), and how its value is read into one.
struct ValueFlag {
  const char* name;
  Value (*write)(const WorkerInvocation&);
  void (*read)(WorkerInvocation&, const std::string& flag, const std::string& value);
};

Value text(const std::string& v) { return v.empty() ? Value() : Value(v); }
template <class T>
Value number(T v, T unset) {
  return v == unset ? Value() : Value(std::to_string(v));
}

// The flags with a value that a rank's launcher or a probe's caller gives, in the order
// written: the probe's, the rank's place, its files, the hidden flags. Then come the flags
// passed on, then kStarterFlags.
const ValueFlag kFlags[] = {
    {"--check-port", [](const WorkerInvocation& w) { return number(w.checkPort, -1); },
     [](WorkerInvocation& w, const std::string& k, const std::string& v) {
       w.checkPort = toInt(k, v);
       PTW_CHECK(w.checkPort >= 0 && w.checkPort <= 65535, k, ": expected a port, 0-65535, got ", v);
     }},
    {"--profile", [](const WorkerInvocation& w) { return text(w.profile); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.profile = v; }},
    {"--samples", [](const WorkerInvocation& w) { return text(w.samples); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.samples = v; }},
    {"--rank", [](const WorkerInvocation& w) { return number(w.rank, -1); },
     [](WorkerInvocation& w, const std::string& k, const std::string& v) { w.rank = toInt(k, v); }},
    {"--world", [](const WorkerInvocation& w) { return number(w.world, -1); },
     [](WorkerInvocation& w, const std::string& k, const std::string& v) { w.world = toInt(k, v); }},
    {"--port", [](const WorkerInvocation& w) { return number(w.port, 0); },
     [](WorkerInvocation& w, const std::string& k, const std::string& v) { w.port = toInt(k, v); }},
    {"--out", [](const WorkerInvocation& w) { return text(w.out); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.out = v; }},
    {"--store", [](const WorkerInvocation& w) { return text(w.store); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.store = v; }},
    {"--steps", [](const WorkerInvocation& w) { return text(w.steps); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.steps = v; }},
    {"--steps-limit", [](const WorkerInvocation& w) { return number(w.stepsLimit, 0LL); },
     [](WorkerInvocation& w, const std::string& k, const std::string& v) { w.stepsLimit = toLong(k, v); }},
    {"--attempt", [](const WorkerInvocation& w) { return number(w.attempt, 0); },
     [](WorkerInvocation& w, const std::string& k, const std::string& v) { w.attempt = toInt(k, v); }},
    {"--fault", [](const WorkerInvocation& w) { return w.fault.kind.empty() ? Value() : Value(faultSpec(w.fault)); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.fault = parseFault(v); }},
    {"--metrics-phases", [](const WorkerInvocation& w) { return text(w.metricsPhases); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.metricsPhases = v; }},
    {"--synthetic-rate",
     [](const WorkerInvocation& w) {
       std::ostringstream v;
       v << std::setprecision(17) << w.syntheticRate;
       return w.syntheticRate == 0 ? Value() : Value(v.str());
     },
     [](WorkerInvocation& w, const std::string& k, const std::string& v) {
       std::size_t used = 0;
       double rate = -1;
       try {
         rate = std::stod(v, &used);
       } catch (...) {
         used = 0;
       }
       PTW_CHECK(used == v.size() && rate > 0 && rate <= 100000, k,
                 ": expected steps a second of each rank, > 0 and at most 100000, got \"", v, "\"");
       w.syntheticRate = rate;
     }},
    {"--gradients", [](const WorkerInvocation& w) { return w.autogradOnly ? Value("autograd") : Value(); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) {
       PTW_CHECK(v == "autograd", "--gradients: expected \"autograd\", got \"", v, "\"");
       w.autogradOnly = true;
     }},
};

// What a starter adds: where the records go, and for a rank on another host, where it is.
const ValueFlag kStarterFlags[] = {
    {"--records", [](const WorkerInvocation& w) { return number(w.records, -1); },
     [](WorkerInvocation& w, const std::string& k, const std::string& v) { w.records = toInt(k, v); }},
    {"--remote", [](const WorkerInvocation& w) { return text(w.remote); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.remote = v; }},
    {"--master",  // a remote rank is always told where its master is
     [](const WorkerInvocation& w) {
       return w.master == WorkerInvocation().master && w.remote.empty() ? Value() : Value(w.master);
     },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.master = v; }},
    {"--interface", [](const WorkerInvocation& w) { return text(w.interface); },
     [](WorkerInvocation& w, const std::string&, const std::string& v) { w.interface = v; }},
};

// The probes' flags without a value, first on a command line. --help and --version, which
// end the reading, come last.
struct Switch {
  const char* name;
  bool WorkerInvocation::*field;
};
const Switch kProbeSwitches[] = {
    {"--preflight", &WorkerInvocation::preflight},
    {"--devices", &WorkerInvocation::devices},
    {"--blas", &WorkerInvocation::blas},
};
constexpr const char* kHelpFlag = "--help";
constexpr const char* kVersionFlag = "--version";

template <std::size_t N>
const ValueFlag* find(const ValueFlag (&table)[N], const std::string& k) {
  for (const ValueFlag& f : table)
    if (k == f.name) return &f;
  return nullptr;
}

// Flag `k` with its value `v`.
void setFlag(WorkerInvocation& w, const std::string& k, const std::string& v) {
  const ValueFlag* f = find(kFlags, k);
  if (!f) f = find(kStarterFlags, k);
  PTW_CHECK(f, "unknown argument ", k, " (see --help)");
  f->read(w, k, v);
}

template <std::size_t N>
void writeTable(const WorkerInvocation& w, const ValueFlag (&table)[N], std::vector<std::string>& out) {
  for (const ValueFlag& f : table)
    if (const Value v = f.write(w)) out.insert(out.end(), {f.name, *v});
}

}  // namespace

std::vector<std::string> WorkerInvocation::flags() const {
  std::vector<std::string> out;
  for (const Switch& s : kProbeSwitches)
    if (this->*s.field) out.push_back(s.name);
  writeTable(*this, kFlags, out);
  out.insert(out.end(), passOn.begin(), passOn.end());
  writeTable(*this, kStarterFlags, out);
  if (help) out.push_back(kHelpFlag);
  if (version) out.push_back(kVersionFlag);
  return out;
}

std::vector<std::string> WorkerInvocation::toArgs() const {
  std::vector<std::string> argv = flags();
  argv.insert(argv.begin(), program);
  return argv;
}

WorkerInvocation WorkerInvocation::parse(const std::vector<std::string>& argv) {
  WorkerInvocation w(argv.empty() ? std::string("ptw-worker") : argv.front());
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& k = argv[i];
    if (k == kHelpFlag || k == "-h" || k == kVersionFlag) {
      (k == kVersionFlag ? w.version : w.help) = true;
      return w;
    }
    const auto probe = std::find_if(std::begin(kProbeSwitches), std::end(kProbeSwitches),
                                    [&k](const Switch& s) { return k == s.name; });
    if (probe != std::end(kProbeSwitches)) {
      w.*probe->field = true;
      continue;
    }
    const auto eq = k.rfind("--", 0) == 0 ? k.find('=') : std::string::npos;
    if (eq != std::string::npos) {
      setFlag(w, k.substr(0, eq), k.substr(eq + 1));
      continue;
    }
    PTW_CHECK(i + 1 < argv.size(), k, ": missing value");
    setFlag(w, k, argv[++i]);
  }
  return w;
}

WorkerInvocation WorkerInvocation::parse(int argc, char** argv) {
  return parse(std::vector<std::string>(argv, argv + argc));
}

bool WorkerInvocation::operator==(const WorkerInvocation& o) const {
  const auto fields = [](const WorkerInvocation& w) {
    return std::tie(w.program, w.preflight, w.devices, w.blas, w.checkPort, w.help, w.version, w.profile, w.samples,
                    w.rank, w.world, w.port, w.out, w.store, w.steps, w.stepsLimit, w.attempt, w.records, w.remote,
                    w.master, w.interface, w.fault, w.metricsPhases, w.autogradOnly, w.syntheticRate, w.passOn);
  };
  return fields(*this) == fields(o);
}

bool WorkerInvocation::trainsRank() const {
  return !preflight && !devices && !blas && checkPort < 0 && !help && !version;
}

void WorkerInvocation::checkComplete() const {
  if (devices || blas || checkPort >= 0 || help || version) return;
  PTW_CHECK(!profile.empty(), "--profile is required");
  if (preflight) return;
  PTW_CHECK(world >= 1, "--world: expected >= 1, got ", world);
  PTW_CHECK(rank >= 0 && rank < world, "--rank: expected 0..", world - 1, ", got ", rank);
}

std::string WorkerInvocation::usage() {
  return "usage: ptw-worker --profile FILE [--out DIR]\n"
         "         one rank of a run that torchrun, srun or mpirun started: its place from their\n"
         "         variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; SLURM_PROCID,\n"
         "         SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST; OMPI_COMM_WORLD_RANK, ..._SIZE,\n"
         "         ..._LOCAL_RANK), the ranks meeting at rank 0's TCPStore on MASTER_ADDR:MASTER_PORT\n"
         "         (default port 29500); records as text lines on stdout (docs/multihost.md)\n"
         "       ptw-worker --profile FILE --rank R --world W --port P [--out DIR] [--store FILE] [--attempt N]\n"
         "                  [--records FD]   binary records to descriptor FD (else text lines on stdout)\n"
         "                  [--steps FILE [--steps-limit BYTES]]   append step records to the run's step\n"
         "                                   file, send groups of them (past BYTES: a full disk)\n"
         "                  [--master ADDR] [--interface IF]   the TCPStore's host; the network interface\n"
         "                  [--remote HOST]  started on another host HOST: records on stdout, \"stop\" on stdin\n"
         "                                   stops, its end of file ends the rank (docs/protocol.md)\n"
         "         one rank as ptw's launcher starts it (these flags win over a launcher's variables)\n"
         "       ptw-worker --preflight --profile FILE [--samples PNG]\n"
         "         load the workload, check it, print its shapes (JSON); with --samples, write a grid\n"
         "         of 16 training images after augmentation to PNG (image data only)\n"
         "       ptw-worker --devices                    print the devices LibTorch sees (JSON lines)\n"
         "       ptw-worker --blas                       print the OpenBLAS kernels ranks train with (JSON)\n"
         "       ptw-worker --version                    print its version\n"
         "       ptw-worker --check-port PORT            open PORT on every interface as rank 0's TCPStore\n"
         "         would, and close it: print the port (0: the free one it got) and exit 0, or exit 1\n"
         "         saying why not (docs/multihost.md)\n"
         "       ptw-worker --agent [--version]          the host agent of ptw's ssh launcher: ptw's request\n"
         "         and control lines on stdin, the frames of its host's ranks on stdout (docs/protocol.md)\n";
}

std::string deviceLine(const DeviceInfo& d) {
  // The worker's layout, keys in this order with a space after each colon and comma; the
  // strings through the JSON library, which escapes what a device's name may hold.
  const auto str = [](const std::string& s) { return nlohmann::json(s).dump(); };
  std::string line =
      "{\"kind\": " + str(d.kind) + ", \"index\": " + std::to_string(d.index) + ", \"name\": " + str(d.name);
  if (d.kind == "cpu")
    line += ", \"cores\": " + std::to_string(d.cores) + ", \"memory_bytes\": " + std::to_string(d.memoryBytes) +
            ", \"openblas_core\": " + str(d.openblasCore);
  else
    line += ", \"memory_bytes\": " + std::to_string(d.memoryBytes) + ", \"used_bytes\": " + std::to_string(d.usedBytes);
  return line + "}\n";
}

std::vector<DeviceInfo> parseDevices(const std::string& jsonLines) {
  std::vector<DeviceInfo> out;
  std::size_t start = 0;
  while (start < jsonLines.size()) {
    const auto end = std::min(jsonLines.find('\n', start), jsonLines.size());
    const auto o = nlohmann::json::parse(jsonLines.begin() + static_cast<std::ptrdiff_t>(start),
                                         jsonLines.begin() + static_cast<std::ptrdiff_t>(end), nullptr, false);
    start = end + 1;
    if (!o.is_object() || o.empty()) continue;
    const auto str = [&o](const char* key) {
      const auto it = o.find(key);
      return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    const auto num = [&o](const char* key) -> long long {
      const auto it = o.find(key);
      if (it == o.end() || !it->is_number()) return 0;
      return it->is_number_integer() ? it->get<long long>() : static_cast<long long>(it->get<double>());
    };
    DeviceInfo d;
    d.kind = str("kind");
    d.index = static_cast<int>(num("index"));
    d.name = str("name");
    d.cores = static_cast<int>(num("cores"));
    d.memoryBytes = num("memory_bytes");
    d.usedBytes = num("used_bytes");
    d.openblasCore = str("openblas_core");
    out.push_back(std::move(d));
  }
  return out;
}

bool anyCudaDevice(const std::vector<DeviceInfo>& devices) {
  return std::any_of(devices.begin(), devices.end(), [](const DeviceInfo& d) { return d.kind == "cuda"; });
}

}  // namespace ptw::core
