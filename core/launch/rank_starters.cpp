// SPDX-License-Identifier: GPL-3.0-or-later
#include "launch/rank_starters.h"

#include "common/error.h"
#include "common/launcher_kinds.h"
#include "launch/slurm_job.h"
#include "launch/slurm_starter.h"
#include "launch/ssh_starter.h"

namespace ptw::core {

std::shared_ptr<const RankStarter> makeRankStarter(const Profile& profile, const std::string& workerPath,
                                                   int rendezvousPort, const SlurmJob* job) {
  switch (launcherOf(profile).kind) {
    case LauncherKind::Local: return std::make_shared<LocalStarter>();
    case LauncherKind::Ssh: {  // Note [Remote ranks]
      HostsSpec hosts = profile.hosts;
      if (rendezvousPort != 0) hosts.port = rendezvousPort;
      return std::make_shared<SshStarter>(hosts, rankHosts(profile), workerPath);
    }
    case LauncherKind::Slurm:  // Note [SLURM ranks]
      PTW_CHECK(job, "hosts.launcher \"", profile.hosts.launcher, "\": the ranks need the SLURM job they run in");
      return std::make_shared<SlurmStarter>(profile.hosts, job->id(), job->rankHosts(), workerPath);
  }
  PTW_FAIL("hosts.launcher \"", profile.hosts.launcher, "\": no rank starter");
}

}  // namespace ptw::core
