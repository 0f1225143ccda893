// SPDX-License-Identifier: GPL-3.0-or-later
// FollowSource: a run followed from outside its supervisor, here or on another host, for the
// window's attach and `ptw follow --runs-dir HOST:DIR`. It runs `ptw follow --format frames`
// (locally, or through ssh with the hosts.ssh_* options), reads its frames into the calls a
// LaunchObserver gets from a run of its own, and when the stream breaks before the run's end
// reports itself detached and tries again with backoff, resuming where it was.
//
// Note [Reattaching]
// The follower writes every record of steps from --from-step on (docs/follow.md). A source
// that lost its stream asks again from the smallest last step it has of any rank, validation or
// named scalar (scalars and validation are committed later than step records, so they lag),
// and drops, of what comes again, each record at or below the last step it had of that rank,
// of validation, or of that rank's scalar of that name; log lines, which come all again, are
// dropped by count per rank. Only what was had before the stream broke is dropped: the
// records a restart replays (Note [Restarts]) in one stream still pass. A run whose rank had
// sent nothing before the break is asked from the others' step: the lag between ranks is a
// step or two in lockstep strategies, and a pool's ranks report together. The run is asked for
// by its id once the first header has named it, so that `latest` cannot move to another run.
// Before the first stream has started, a failure is the caller's input (an unknown run, a host
// ssh cannot reach, a folder with no runs): follow() throws it and does not retry.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/profile.h"
#include "launch/follow_stream.h"
#include "launch/launcher.h"
#include "launch/run_catalog.h"

namespace ptw::core {

/// Splits "HOST:DIR" into its parts; false for a folder of this machine (no ':' before the
/// first '/'). Throws ptw::Error when HOST is not a host name or DIR is empty.
bool splitRemoteRunsDir(const std::string& runsDir, std::string& host, std::string& dir);

/// ssh's command line up to the host, with hosts.ssh_* as the ssh launcher gives them.
std::vector<std::string> sshCommandLine(const HostsSpec& hosts, const std::string& host);

/// This ptw's own path: the program a local follower runs, and the one a host is asked for.
std::string thisPtwProgram();

/// Runs `ptw ARGS...` on `host` through ssh (a request: stop, runs); returns its exit code and
/// output. Throws ptw::Error saying so when ssh cannot reach the host.
int runRemotePtw(const HostsSpec& hosts, const std::string& host, const std::vector<std::string>& args,
                 std::string& output, double limitS = 60);

/// The runs of `runsDir` (a folder here, or HOST:DIR, asked through ssh with `ptw runs`), oldest
/// first; `running` only: those whose supervisor is not known to be gone. Of a HOST:DIR's runs
/// only what `ptw runs` prints is known: id, status, start, strategy, world, version and name.
/// Throws ptw::Error naming what is wrong: no runs there, a host ssh cannot reach.
std::vector<RunRow> listRuns(const std::string& runsDir, const HostsSpec& hosts, bool running);

/// Example: FollowSourceOptions("node7:/scratch/runs", "latest").setHosts(profile.hosts)
struct FollowSourceOptions {
  FollowSourceOptions(std::string runsDir, std::string run) : runsDir(std::move(runsDir)), run(std::move(run)) {}
  std::string runsDir;   ///< a folder here, or HOST:DIR
  std::string run;       ///< a run id, `latest`, or a run folder
  HostsSpec hosts = {};  ///< ssh_user, ssh_port, ssh_identity, ssh_config, alive_interval_s for HOST
  std::string ptw = "";  ///< the ptw that follows, here and on HOST; "": thisPtwProgram()
  /// Records of steps below this are left out (`ptw follow --from-step`).
  std::int64_t fromStep = std::numeric_limits<std::int64_t>::min();
  std::chrono::milliseconds firstRetry = std::chrono::milliseconds(1000);  ///< then doubled each time
  std::chrono::milliseconds maxRetry = std::chrono::milliseconds(30000);
  /// A run not there yet (a submitted job's, named by its folder) is waited for, as a broken
  /// stream is: the first failures are retried rather than thrown.
  bool waitForStart = false;
  FollowSourceOptions& setWaitForStart(bool v) {
    waitForStart = v;
    return *this;
  }
  FollowSourceOptions& setHosts(HostsSpec v) {
    hosts = std::move(v);
    return *this;
  }
  FollowSourceOptions& setFromStep(std::int64_t v) {
    fromStep = v;
    return *this;
  }
  FollowSourceOptions& setPtw(std::string v) {
    ptw = std::move(v);
    return *this;
  }
  FollowSourceOptions& setRetry(std::chrono::milliseconds first, std::chrono::milliseconds max) {
    firstRetry = first;
    maxRetry = max;
    return *this;
  }
};

class FollowSource {
 public:
  enum class State { Attached, Detached, Ended };
  /// What a source tells besides the records and log lines (LaunchObserver's onRecords, onLog).
  class Listener : public LaunchObserver {
   public:
    /// Attached: a stream began (the run's id known); Detached: it broke, `message` says why and
    /// when the next try is; Ended: the run ended, `message` is "status\tmessage".
    virtual void onState(State /*state*/, const std::string& /*message*/) {}
  };

  explicit FollowSource(FollowSourceOptions options);
  ~FollowSource();
  FollowSource(const FollowSource&) = delete;
  FollowSource& operator=(const FollowSource&) = delete;

  /// Follows until the run ends (its exit code, followExitCode's) or stop() (-1). Throws
  /// ptw::Error when the first stream cannot start (Note [Reattaching]).
  int follow(Listener& listener);
  /// Ends follow() soon, from any thread; the run goes on.
  void stop();

  std::int64_t runId() const { return m_runId.load(); }
  const std::string& host() const { return m_host; }
  const std::string& dir() const { return m_dir; }
  /// How many times a broken stream was started again.
  int reattaches() const { return m_reattaches.load(); }

 private:
  struct Stream;
  enum class Outcome { Ended, Lost, Stopped };
  Outcome once(Listener& listener, std::string& why, bool& started, int& exitCode);
  std::vector<std::string> commandLine() const;
  bool keep(const Record& r);
  bool deliver(Listener& listener, std::string& buf, FollowStream::Decoded& decoded, std::vector<Record>& batch,
               int& exitCode);
  bool waitBeforeRetry(std::chrono::milliseconds delay);

  FollowSourceOptions m_options;
  std::string m_host, m_dir;
  std::atomic<std::int64_t> m_runId{0};
  std::atomic<int> m_reattaches{0};
  std::atomic<bool> m_stop{false};
  int m_wake[2] = {-1, -1};  ///< stop() writes here to end a wait or a read at once
  // Note [Reattaching]: the last step had, per rank, of validation, per (rank, scalar name);
  // what the current stream started from; and log lines had per rank.
  std::map<int, std::int64_t> m_lastStep;
  std::int64_t m_lastValidation = std::numeric_limits<std::int64_t>::min();
  std::map<std::pair<int, std::string>, std::int64_t> m_lastScalar;
  std::map<int, std::int64_t> m_resumeStep;
  std::int64_t m_resumeValidation = std::numeric_limits<std::int64_t>::min();
  std::map<std::pair<int, std::string>, std::int64_t> m_resumeScalar;
  std::map<int, std::int64_t> m_logsHad, m_logsThisStream;
  bool m_resuming = false;
};

}  // namespace ptw::core
