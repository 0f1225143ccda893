// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/launcher_kinds.h"

#include "common/error.h"

namespace ptw::core {
namespace {

LauncherInfo row(LauncherKind kind, const char* name, const char* label) {
  LauncherInfo info;
  info.kind = kind;
  info.name = name;
  info.label = label;
  return info;
}

}  // namespace

const std::vector<LauncherInfo>& launchers() {
  static const std::vector<LauncherInfo> table = [] {
    std::vector<LauncherInfo> t;
    t.push_back(row(LauncherKind::Local, "local", "every rank on this machine"));

    LauncherInfo ssh = row(LauncherKind::Ssh, "ssh", "each rank on its host, through OpenSSH in batch mode");
    ssh.remoteRanks = true;
    ssh.needsHosts = true;
    ssh.readsSshOptions = true;
    t.push_back(ssh);

    LauncherInfo slurm = row(LauncherKind::Slurm, "slurm", "each rank a SLURM job step, started with srun");
    slurm.remoteRanks = true;
    t.push_back(slurm);
    return t;
  }();
  return table;
}

const LauncherInfo* findLauncher(const std::string& name) {
  for (const auto& l : launchers())
    if (l.name == name) return &l;
  return nullptr;
}

const LauncherInfo& launcherInfo(LauncherKind kind) {
  for (const auto& l : launchers())
    if (l.kind == kind) return l;
  PTW_FAIL("the table of launchers has no row for launcher kind ", static_cast<int>(kind));
}

const LauncherInfo& launcherOf(const Profile& profile) {
  if (const LauncherInfo* l = findLauncher(profile.hosts.launcher)) return *l;
  std::string known;
  for (const auto& l : launchers()) known += (known.empty() ? "" : ", ") + l.name;
  PTW_FAIL("hosts.launcher: expected one of ", known, ", got \"", profile.hosts.launcher, "\"");
}

bool ranksMayBeRemote(const Profile& profile) {
  const LauncherInfo* l = findLauncher(profile.hosts.launcher);
  return !l || l->remoteRanks;
}

}  // namespace ptw::core
