// SPDX-License-Identifier: GPL-3.0-or-later
// Which RankStarter starts a run's ranks: the one for its hosts.launcher (common/launcher_kinds.h),
// chosen here alone, so that the supervisor and the launcher never look at the launcher's name.
#pragma once

#include <memory>
#include <string>

#include "common/profile.h"
#include "launch/rank_starter.h"

namespace ptw::core {

class SlurmJob;

/// The starter of `profile`'s ranks: LocalStarter (local), SshStarter (ssh; rendezvous on
/// `rendezvousPort` when it is not 0, Note [Rendezvous port]), SlurmStarter (slurm; in `job`,
/// which must be given: Note [SLURM job]). `workerPath`: this machine's ptw-worker.
/// Example: lo.starter = makeRankStarter(profile, workerPath, port, slurm.get());
std::shared_ptr<const RankStarter> makeRankStarter(const Profile& profile, const std::string& workerPath,
                                                   int rendezvousPort = 0, const SlurmJob* job = nullptr);

}  // namespace ptw::core
