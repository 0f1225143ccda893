// SPDX-License-Identifier: GPL-3.0-or-later
// The table of launchers: what each value of hosts.launcher means, in one place. Profile
// validation, the check before a run, the choice of RankStarter (launch/rank_starters.h), the
// headless printer and the editor read this table instead of comparing names. Plain C++: no
// LibTorch, no Qt.
#pragma once

#include <string>
#include <vector>

#include "common/profile.h"

namespace ptw::core {

/// hosts.launcher, parsed (launcherOf): where the ranks run and what starts them.
enum class LauncherKind { Local, Ssh, Slurm };

/// One launcher. Example: LauncherInfo{}.name = "ssh";
struct LauncherInfo {
  LauncherKind kind = LauncherKind::Local;
  std::string name = "";   ///< hosts.launcher
  std::string label = "";  ///< the editor's tooltip
  /// Its ranks may run on other hosts: they meet at hosts.address:hosts.port, the strategy
  /// must run across hosts, and the hosts section applies (Note [Remote ranks]).
  bool remoteRanks = false;
  /// hosts.hosts must name a host; else an empty list is every rank here (local) or the
  /// allocation's nodes (slurm).
  bool needsHosts = false;
  /// hosts.ssh_* and hosts.alive_interval_s mean something to it.
  bool readsSshOptions = false;
};

/// Every launcher, in the order the editor lists them (the default first).
const std::vector<LauncherInfo>& launchers();
/// The row named `name`, or nullptr.
const LauncherInfo* findLauncher(const std::string& name);
/// The row of `kind`.
const LauncherInfo& launcherInfo(LauncherKind kind);
/// The row of profile.hosts.launcher. Throws ptw::Error, as validation words it, when there
/// is none: `hosts.launcher: expected one of local, ssh, slurm, got "pdsh"`.
const LauncherInfo& launcherOf(const Profile& profile);
/// Whether the ranks of `profile` may run on other hosts: its launcher's remoteRanks, and
/// true for a launcher not in the table, of which nothing is known.
bool ranksMayBeRemote(const Profile& profile);

}  // namespace ptw::core
