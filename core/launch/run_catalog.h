// SPDX-License-Identifier: GPL-3.0-or-later
// RunCatalog: the run store's list of runs (the `runs` table): a run recorded as it begins,
// its verdict when it ends, and the runs that a supervisor left `running` and no live process
// owns any more marked `interrupted`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/profile.h"

namespace ptw::core {

class StoreDatabase;

struct RunRow {
  std::int64_t id = 0;
  std::string dir;
  std::string name;
  std::string strategy;
  int world = 0;
  std::string status;              ///< running | finished | failed | stopped | interrupted
  std::string startedAt, endedAt;  ///< UTC, ISO 8601
  std::string message;
  double finalLoss = 0;
  double samplesPerS = 0;
  int attempts = 0;
  std::string profileJson;
  std::string ptwVersion;  ///< the ptw that made the run; "" for runs of builds before it was recorded
  std::int64_t pid = 0;    ///< its supervisor's process
  std::string host;        ///< the host its supervisor runs on
};

/// Whether the supervisor of `run`, recorded as running, is known to be gone: it ran on this
/// host, no process has its pid, and nobody reads its control channel (one in a PID namespace
/// of its own still does). A run of another host is not known to be gone.
bool supervisorGone(const RunRow& run);

/// How a run ended, as RunCatalog::end records it.
struct RunVerdict {
  std::string status;
  std::string message;
  double finalLoss = 0;    ///< NaN: none (stored as NULL)
  double samplesPerS = 0;  ///< NaN: none (stored as NULL)
  int attempts = 1;
};

class RunCatalog {
 public:
  explicit RunCatalog(StoreDatabase& db);

  /// Marks `interrupted` the runs left `running` by a supervisor that is gone (supervisorGone).
  void markInterrupted();
  /// Records a new run as `running` by this process; returns its id.
  std::int64_t begin(const std::string& dir, const Profile& profile);
  /// Records how the run ended; false, with `error` set, when it cannot.
  bool end(std::int64_t runId, const RunVerdict& verdict, std::string& error);

  /// Every run, oldest first.
  std::vector<RunRow> runs();
  /// The run `id`; throws ptw::Error naming it when there is none.
  RunRow run(std::int64_t id);
  /// The run a command line names: its id, `latest` (the newest run), or its folder (a path
  /// with a '/'). Throws ptw::Error
  /// naming `spec` when it is neither or names no run, or when the store holds no runs.
  RunRow named(const std::string& spec);

 private:
  std::vector<RunRow> select(const char* where, std::int64_t id);

  StoreDatabase& m_db;
};

}  // namespace ptw::core
