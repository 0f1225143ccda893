// RankStarter: how the launcher starts one rank's process. The launcher forks and execs the
// command it is given, reads what the process writes and supervises it; what the command is
// (the worker itself here, or ssh starting it on another host) is the starter's.
#pragma once

#include <string>
#include <vector>

namespace ptw::core {

/// The process that stands for one rank.
/// Example: RankCommand{{"bin/ptw-worker", "--profile", "p.json", "--records", "3"}, false, ""}
struct RankCommand {
  std::vector<std::string> argv;  ///< argv[0] is the program, run without a shell
  /// Note [Remote ranks] (ssh_starter.h): records come on the process's stdout (there is no
  /// descriptor 3 across a connection), its stdin is the rank's control line, and a stop is a
  /// line on it rather than a signal.
  bool remote = false;
  std::string host = "";  ///< where the rank runs, for messages; "" = this machine
};

class RankStarter {
 public:
  virtual ~RankStarter() = default;
  /// The command that starts rank `rank`; `workerArgs` are the worker's arguments as the
  /// launcher makes them (argv[0] is this machine's ptw-worker, no --records).
  virtual RankCommand command(int rank, const std::vector<std::string>& workerArgs) const = 0;
  /// The TCPStore port the ranks meet on, or 0 for the launcher's local rendezvous (Note
  /// [Local rendezvous] in launcher.cpp).
  virtual int rendezvousPort() const { return 0; }
};

/// Starts each rank as a child process of this machine, its records on descriptor 3.
class LocalStarter final : public RankStarter {
 public:
  RankCommand command(int rank, const std::vector<std::string>& workerArgs) const override;
};

}  // namespace ptw::core
