// SPDX-License-Identifier: GPL-3.0-or-later
// RunFollower: `ptw follow`. Writes a run's records and its ranks' log lines to a
// FollowStream, first what is stored, then what is stored after, polling the store, the
// run's step file and its rankN.log files, until the run ends.
//
// Note [Following a run]
// A follower only reads: the store is opened read-only, for the length of a poll (a reader
// holding it open when its writer closes it would leave the -wal file in place), and
// nothing in the runs directory is created or written, so a follower that dies or is killed leaves the run as it was.
// Step records come from the two forms a run keeps them in (Note [Step blocks] in
// run_store.h). The run's step file is opened before a snapshot of the database is read,
// as ChunkArchive does: in that snapshot, the chunks and the step file past
// step_files.unpacked_bytes hold each record once. From then on the follower reads the
// file it holds open from where it left off, block by block, a block that is not whole at
// the end of the file waiting for the next poll; a packing when the run ends only copies
// blocks into chunks and removes the file's name, so the open file still holds them all.
// Validation and scalar rows are read by rowid past the last seen (the supervisor commits
// them every 250 ms), log lines from each rankN.log past its last whole line. The run ends
// for the follower when its row is not `running` (its verdict is written after its last
// record), or when its supervisor is gone from this host without one (`interrupted`).
//
// Note [Woken by the step file]
// Between two polls the follower waits on inotify for the ranks' writes to the step file
// and reads the blocks appended at once: a rank appends its blocks as it hands its records
// over (Note [Hand-over of slow steps] in engine/worker.cpp), so a step reaches the
// follower's reader as soon as its rank hands it over, not up to a poll later. The store,
// the logs and the run's end are still looked at once a poll: reading the step file is a
// read of what was appended, a poll opens the database. Where no write is told (inotify
// not to be had, a shared filesystem written from another host) the polls still read it all.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "launch/run_catalog.h"

namespace ptw::core {

class FollowStream;
class StepFileReader;
class StepFileWatch;
class StoreDatabase;

/// Example: FollowOptions("runs", "latest").setFromStep(100)
struct FollowOptions {
  FollowOptions(std::string runsDir, std::string run) : runsDir(std::move(runsDir)), run(std::move(run)) {}
  std::string runsDir;
  std::string run;  ///< a run id, or "latest"
  /// Step, validation and scalar records of steps below this are left out.
  std::int64_t fromStep = std::numeric_limits<std::int64_t>::min();
  /// How often the store and the files are looked at while the run goes on.
  std::chrono::milliseconds pollInterval = std::chrono::milliseconds(150);
  FollowOptions& setFromStep(std::int64_t v) {
    fromStep = v;
    return *this;
  }
  FollowOptions& setPollInterval(std::chrono::milliseconds v) {
    pollInterval = v;
    return *this;
  }
};

/// The exit code `ptw follow` gives for a run's status: headless's (headless.h).
int followExitCode(const std::string& status);

class RunFollower {
 public:
  /// Opens the store read-only and finds the run. Throws ptw::Error naming what is wrong: no
  /// runs there, no such run, a run made by another ptw version. Nothing is written.
  explicit RunFollower(FollowOptions options);
  ~RunFollower();
  RunFollower(const RunFollower&) = delete;
  RunFollower& operator=(const RunFollower&) = delete;

  const RunRow& run() const { return m_run; }

  /// Writes the run to `out` until it ends (or `out` cannot be written); returns the exit
  /// code of its status (followExitCode). Throws ptw::Error when the store cannot be read.
  int follow(FollowStream& out);

 private:
  struct LogFile;
  bool poll(FollowStream& out);
  bool waitForSteps(FollowStream& out, StepFileWatch& watch);
  void readChunks(FollowStream& out);
  void readSteps(FollowStream& out, bool ended);
  void readRows(FollowStream& out);
  /// True when a log file has more to read than one poll reads.
  bool readLogs(FollowStream& out, bool ended);
  void readHosts(FollowStream& out);
  long long packedBytes();
  void openStore();
  void closeStore();

  FollowOptions m_options;
  std::unique_ptr<StoreDatabase> m_db;
  std::unique_ptr<RunCatalog> m_catalog;
  RunRow m_run;
  std::string m_stepFile;
  std::unique_ptr<StepFileReader> m_file;  ///< the run's step file, once open
  bool m_fileDone = false;                 ///< all of the step file is chunks: read no more of it
  long long m_filePos = 0;                 ///< where the next block of the step file starts
  std::int64_t m_chunkRow = 0, m_validationRow = 0, m_scalarRow = 0;  ///< the last rowids read
  std::map<int, LogFile> m_logs;
  bool m_hostsSent = false;  ///< the ranks' nodes were written (readHosts)
};

}  // namespace ptw::core
