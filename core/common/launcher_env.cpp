// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/launcher_env.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <utility>

#include "common/error.h"

extern char** environ;

namespace ptw::core {
namespace {

// Note [Launcher precedence]
// Launchers nest, and the inner one's variables describe the process; the outer one's
// were only inherited. Flags given to ptw-worker (--rank, --world) win over everything:
// the user said them. Then torchrun: it is always the innermost, started on each node by
// srun or mpirun (`srun torchrun ...`), where SLURM_PROCID numbers the torchrun agents,
// not the ranks. Then Open MPI, then SLURM: mpirun run inside an sbatch script hands its
// ranks the batch step's SLURM_PROCID (0 in every one of them) and SLURM_NTASKS, while
// OMPI_COMM_WORLD_RANK is in a process's environment only when mpirun's daemons started
// it (a direct `srun --mpi=pmix` launch sets it later, inside MPI_Init, which ptw never
// calls). So Open MPI's variables, when present, are the nearer launcher's.

using Env = std::map<std::string, std::string>;

const std::string* find(const Env& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// The integer value of `name`, at least `least`.
int integer(const std::string& name, const std::string& value, int least) {
  long long x = LLONG_MIN;
  std::size_t used = 0;
  try {
    x = std::stoll(value, &used);
  } catch (...) {
    used = 0;
  }
  PTW_CHECK(used == value.size() && !value.empty() && !std::isspace(static_cast<unsigned char>(value[0])) &&
                x >= least && x <= INT_MAX,
            name, ": expected an integer >= ", least, ", got \"", value, "\"");
  return static_cast<int>(x);
}

int required(const Env& env, const char* name, int least, const char* launcher) {
  const std::string* v = find(env, name);
  PTW_CHECK(v, name, ": not set, but ", launcher,
            "'s other variables are (a rank needs its rank and the world's size; set it, or start ptw-worker with "
            "--rank and --world)");
  return integer(name, *v, least);
}

std::optional<int> optional(const Env& env, const char* name, int least) {
  const std::string* v = find(env, name);
  if (!v) return std::nullopt;
  return integer(name, *v, least);
}

int port(const Env& env, const char* launcher, bool needed) {
  const std::string* v = find(env, "MASTER_PORT");
  if (!v) {
    PTW_CHECK(!needed, "MASTER_PORT: not set, but ", launcher, " sets it; start ptw-worker from ", launcher,
              " or set it");
    return kDefaultMasterPort;
  }
  const int p = integer("MASTER_PORT", *v, 1);
  PTW_CHECK(p <= 65535, "MASTER_PORT: expected a port 1..65535, got \"", *v, "\"");
  return p;
}

std::optional<std::string> address(const Env& env) {
  const std::string* v = find(env, "MASTER_ADDR");
  if (!v) return std::nullopt;
  PTW_CHECK(!v->empty() && v->find_first_of(" \t\n") == std::string::npos,
            "MASTER_ADDR: expected a host name or address, got \"", *v, "\"");
  return *v;
}

// Checks the numbers of `r` against each other, naming the variables they came from.
void checkPlace(const RankPlace& r, const char* rank, const char* world, const char* localRank,
                const char* localWorld) {
  PTW_CHECK(r.rank < r.world, rank, ": ", r.rank, " is not below ", world, " ", r.world, " (expected 0..", r.world - 1,
            ")");
  if (r.localWorld > 0) {
    PTW_CHECK(r.localRank < r.localWorld, localRank, ": ", r.localRank, " is not below ", localWorld, " ", r.localWorld,
              " (expected 0..", r.localWorld - 1, ")");
    PTW_CHECK(r.localWorld <= r.world, localWorld, ": ", r.localWorld, " is more than ", world, " ", r.world);
  }
  PTW_CHECK(r.localRank <= r.rank, localRank, ": ", r.localRank, " is more than ", rank, " ", r.rank,
            " (a rank's place on its host cannot pass its place in the run)");
}

// torchrun, or anything that sets torch.distributed's env:// variables.
RankPlace torchrun(const Env& env) {
  RankPlace r;
  r.launcher = LaunchedBy::Torchrun;
  r.rank = required(env, "RANK", 0, "torchrun");
  r.world = required(env, "WORLD_SIZE", 1, "torchrun");
  // Without LOCAL_RANK (env:// needs only the four others) the ranks are taken for one host's,
  // as ptw's own launcher places them.
  r.localRank = optional(env, "LOCAL_RANK", 0).value_or(r.rank);
  r.localWorld = optional(env, "LOCAL_WORLD_SIZE", 1).value_or(find(env, "LOCAL_RANK") ? 0 : r.world);
  const auto addr = address(env);
  PTW_CHECK(addr, "MASTER_ADDR: not set, but torchrun sets it; start ptw-worker from torchrun or set it");
  r.masterAddr = *addr;
  r.masterPort = port(env, "torchrun", true);
  checkPlace(r, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  return r;
}

RankPlace openMpi(const Env& env) {
  RankPlace r;
  r.launcher = LaunchedBy::OpenMpi;
  r.rank = required(env, "OMPI_COMM_WORLD_RANK", 0, "Open MPI");
  r.world = required(env, "OMPI_COMM_WORLD_SIZE", 1, "Open MPI");
  r.localRank = required(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, "Open MPI");
  r.localWorld = optional(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1).value_or(0);
  checkPlace(r, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE");
  // mpirun names no master: the user passes it (mpirun -x MASTER_ADDR=host). All ranks on
  // one host need none.
  const auto addr = address(env);
  PTW_CHECK(addr || r.localWorld == r.world,
            "MASTER_ADDR: not set, and Open MPI does not set it; pass the host of rank 0 with mpirun -x "
            "MASTER_ADDR=HOST (and -x MASTER_PORT=PORT, else ",
            kDefaultMasterPort, ")");
  r.masterAddr = addr.value_or("127.0.0.1");
  r.masterPort = port(env, "Open MPI", false);
  return r;
}

RankPlace slurm(const Env& env) {
  RankPlace r;
  r.launcher = LaunchedBy::Slurm;
  r.rank = required(env, "SLURM_PROCID", 0, "SLURM");
  r.world = required(env, "SLURM_NTASKS", 1, "SLURM");
  r.localRank = required(env, "SLURM_LOCALID", 0, "SLURM");
  // SLURM_NTASKS_PER_NODE is there only with --ntasks-per-node; on one node, all are local.
  r.localWorld = optional(env, "SLURM_NTASKS_PER_NODE", 1)
                     .value_or(optional(env, "SLURM_JOB_NUM_NODES", 1).value_or(0) == 1 ? r.world : 0);
  checkPlace(r, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE");
  if (const auto addr = address(env)) {
    r.masterAddr = *addr;
  } else {
    const std::string* nodes = find(env, "SLURM_JOB_NODELIST");
    PTW_CHECK(nodes,
              "SLURM_JOB_NODELIST: not set, and neither is MASTER_ADDR; start ptw-worker from srun, or set "
              "MASTER_ADDR to the host of rank 0");
    r.masterAddr = firstHost(*nodes);
  }
  r.masterPort = port(env, "SLURM", false);
  return r;
}

// One piece of a hostlist name: a literal, or the numbers of a bracket group.
struct Piece {
  std::string literal;
  std::vector<std::pair<std::string, std::string>> ranges;  ///< low, high, as written
  bool bracket = false;
};

// The pieces of one name of a hostlist ("rack[1-2]-n[3-4]").
std::vector<Piece> pieces(const std::string& name, const std::string& list, const char* what) {
  const auto bad = [&](const std::string& why) {
    PTW_FAIL(what, ": expected a SLURM hostlist such as node[01-04,07],gpu3, got \"", list, "\" (", why, ")");
  };
  std::vector<Piece> out;
  std::size_t i = 0;
  while (i < name.size()) {
    Piece p;
    if (name[i] != '[') {
      const std::size_t open = name.find('[', i);
      p.literal = name.substr(i, open == std::string::npos ? std::string::npos : open - i);
      if (p.literal.find(']') != std::string::npos) bad("a ']' with no '['");
      i = open == std::string::npos ? name.size() : open;
      out.push_back(std::move(p));
      continue;
    }
    const std::size_t close = name.find(']', i);
    if (close == std::string::npos) bad("a '[' with no ']'");
    const std::string inside = name.substr(i + 1, close - i - 1);
    if (inside.find('[') != std::string::npos) bad("brackets inside brackets");
    if (inside.empty()) bad("empty brackets");
    p.bracket = true;
    std::size_t at = 0;
    while (at <= inside.size()) {
      const std::size_t comma = std::min(inside.find(',', at), inside.size());
      const std::string item = inside.substr(at, comma - at);
      const std::size_t dash = item.find('-');
      std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
      const auto digits = [](const std::string& s) {
        return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
      };
      if (!digits(lo) || !digits(hi)) bad("\"" + item + "\" in brackets is not a number or a range N-M");
      if (std::stol(hi) < std::stol(lo)) bad("the range " + item + " runs backwards");
      p.ranges.emplace_back(lo, hi);
      at = comma + 1;
    }
    i = close + 1;
    out.push_back(std::move(p));
  }
  return out;
}

// The names of a hostlist: split at the commas outside brackets.
std::vector<std::string> names(const std::string& list, const char* what) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  for (const auto& n : out)
    PTW_CHECK(!n.empty() && n.find_first_of(" \t\n") == std::string::npos, what,
              ": expected a SLURM hostlist such as node[01-04,07],gpu3, got \"", list, "\"",
              list.empty() ? " (empty)" : " (an empty or blank name)");
  return out;
}

// `n` written with at least as many digits as `like` (Slurm pads to the low bound's width).
std::string padded(long n, const std::string& like) {
  std::string s = std::to_string(n);
  if (s.size() < like.size()) s.insert(0, like.size() - s.size(), '0');
  return s;
}

}  // namespace

const char* launcherName(LaunchedBy by) {
  switch (by) {
    case LaunchedBy::Torchrun: return "torchrun";
    case LaunchedBy::Slurm: return "SLURM";
    case LaunchedBy::OpenMpi: return "Open MPI";
  }
  return "?";
}

std::optional<RankPlace> rankFromEnvironment(const Env& env) {
  // Note [Launcher precedence]
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) return torchrun(env);
  if (find(env, "OMPI_COMM_WORLD_RANK") || find(env, "OMPI_COMM_WORLD_SIZE")) return openMpi(env);
  if (find(env, "SLURM_PROCID")) return slurm(env);
  return std::nullopt;
}

std::vector<std::string> expandHostlist(const std::string& list, const char* what) {
  constexpr std::size_t kMost = 65536;
  std::vector<std::string> out;
  for (const auto& name : names(list, what)) {
    std::vector<std::string> hosts = {""};
    for (const Piece& p : pieces(name, list, what)) {
      if (!p.bracket) {
        for (auto& h : hosts) h += p.literal;
        continue;
      }
      std::vector<std::string> next;
      for (const auto& h : hosts)
        for (const auto& [lo, hi] : p.ranges)
          for (long n = std::stol(lo); n <= std::stol(hi); ++n) {
            PTW_CHECK(out.size() + next.size() < kMost, what, ": \"", list, "\" names more than ", kMost, " hosts");
            next.push_back(h + padded(n, lo));
          }
      hosts = std::move(next);
    }
    PTW_CHECK(out.size() + hosts.size() <= kMost, what, ": \"", list, "\" names more than ", kMost, " hosts");
    out.insert(out.end(), hosts.begin(), hosts.end());
  }
  return out;
}

std::vector<int> expandTasksPerNode(const std::string& value, const char* what) {
  constexpr long kMost = 65536;
  const auto bad = [&](const std::string& why) {
    PTW_FAIL(what, ": expected task counts per node such as 2(x3),1, got \"", value, "\" (", why, ")");
  };
  const auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos)
      bad("\"" + s + "\" is not a count");
    return std::stol(s);
  };
  std::vector<int> out;
  std::size_t at = 0;
  while (at <= value.size()) {
    const std::size_t comma = std::min(value.find(',', at), value.size());
    const std::string item = value.substr(at, comma - at);
    const std::size_t open = item.find("(x");
    const long tasks = number(item.substr(0, open));
    long repeat = 1;
    if (open != std::string::npos) {
      if (item.back() != ')') bad("\"" + item + "\" has no closing ')'");
      repeat = number(item.substr(open + 2, item.size() - open - 3));
    }
    if (tasks < 1 || repeat < 1) bad("a count of 0 in \"" + item + "\"");
    if (static_cast<long>(out.size()) + repeat > kMost) bad("more than " + std::to_string(kMost) + " nodes");
    out.insert(out.end(), static_cast<std::size_t>(repeat), static_cast<int>(tasks));
    at = comma + 1;
  }
  return out;
}

std::string firstHost(const std::string& list, const char* what) {
  const auto all = names(list, what);
  std::string host;
  for (const Piece& p : pieces(all.front(), list, what))
    host += p.bracket ? padded(std::stol(p.ranges.front().first), p.ranges.front().first) : p.literal;
  for (std::size_t i = 1; i < all.size(); ++i) pieces(all[i], list, what);  // the rest must be well formed too
  return host;
}

std::map<std::string, std::string> processEnvironment() {
  Env env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace ptw::core
