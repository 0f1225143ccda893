// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/strategies.h"

#include "common/error.h"

namespace ptw::core {

// Note [One name, one meaning]
// A sweep variant named after a strategy is that strategy as a profile runs it by default:
// sweep "ddp" is the profile's ddp with strategy.backend auto (shared memory on cpu, NCCL on
// cuda). A variant that sets anything else says so in its name (ddp-gloo, ddp-shm,
// pool-hogwild), so a name means the same in a profile, the sweep and the window.
const std::vector<StrategyInfo>& strategies() {
  static const std::vector<StrategyInfo> table = [] {
    std::vector<StrategyInfo> t(6);
    t[0].name = "single";
    t[0].label = "Single process";
    t[0].description = "one process {where}";
    t[0].oneRank = true;
    t[0].sweep = {SweepVariant("single", "one process: the baseline", "single").setBaseline(true).setByDefault(true)};

    t[1].name = "dataparallel";
    t[1].label = "DataParallel (threads in one process)";
    t[1].description = "DataParallel with {ranks} replicas {where}";
    t[1].sweep = {
        SweepVariant("dataparallel", "a replica per lane, one process", "dataparallel").setByDefault(true).setColor(2)};

    t[2].name = "ddp";
    t[2].label = "DDP (a process per rank)";
    t[2].description = "{ranks} ranks of DDP {where}";
    t[2].processPerRank = true;
    t[2].backends = {"auto", "gloo", "nccl", "shm"};
    t[2].readsBucketMb = true;
    t[2].acrossHosts = true;
    t[2].sweep = {SweepVariant("ddp", "DDP as a profile runs it (backend auto)", "ddp")
                      .setBackend("auto")
                      .setByDefault(true)
                      .setColor(0),
                  SweepVariant("ddp-gloo", "DDP over Gloo", "ddp").setBackend("gloo").setByDefault(true).setColor(5),
                  SweepVariant("ddp-shm", "DDP over shared memory", "ddp").setBackend("shm").setColor(9)};

    t[3].name = "pool";
    t[3].label = "Process pool (shared memory)";
    t[3].description = "a pool of {ranks} workers ({pool_mode}) {where}";
    t[3].processPerRank = true;
    t[3].coordinator = true;
    t[3].devices = {"cpu"};
    t[3].deviceAdvice = "the process pool shares CPU memory; use ddp or dataparallel for cuda";
    t[3].readsPoolMode = true;
    t[3].sweep = {
        SweepVariant("pool", "coordinator and workers, sync", "pool")
            .setPoolMode("sync")
            .setByDefault(true)
            .setColor(1),
        SweepVariant("pool-hogwild", "workers step on their own (hogwild)", "pool").setPoolMode("hogwild").setColor(3)};

    t[4].name = "command";
    t[4].label = "Your command (a process per rank)";
    t[4].description = "{processes} of your command";
    t[4].processPerRank = true;
    t[4].runsCommand = true;
    t[4].acrossHosts = true;  // through the ssh launcher alone (validate in profile.cpp)

    // Note [Synthetic ranks] in engine/synthetic_ranks.h: 512 ranks a process keep a
    // thousand ranks to a few processes on a machine of two cores.
    t[5].name = "synthetic";
    t[5].label = "Synthetic ranks (measuring ptw)";
    t[5].description = "{ranks} synthetic ranks in {processes}";
    t[5].synthetic = true;
    t[5].hidden = true;
    t[5].ranksPerProcess = 512;
    t[5].maxRanks = kMaxSyntheticRanks;
    t[5].devices = {"cpu"};
    t[5].deviceAdvice = "synthetic ranks make up their records on the CPU; use \"cpu\"";
    return t;
  }();
  return table;
}

const StrategyInfo* findStrategy(const std::string& name) {
  for (const auto& s : strategies())
    if (s.name == name) return &s;
  return nullptr;
}

const StrategyInfo& strategyOf(const Profile& profile) {
  if (const StrategyInfo* s = findStrategy(profile.strategy.kind)) return *s;
  std::string known;
  for (const auto& s : strategies())
    if (!s.hidden) known += (known.empty() ? "" : ", ") + s.name;
  PTW_FAIL("strategy.kind: expected one of ", known, ", got \"", profile.strategy.kind, "\"");
}

const std::vector<SweepVariant>& sweepVariants() {
  static const std::vector<SweepVariant> all = [] {
    std::vector<SweepVariant> v;
    for (const auto& s : strategies()) v.insert(v.end(), s.sweep.begin(), s.sweep.end());
    return v;
  }();
  return all;
}

const SweepVariant* findSweepVariant(const std::string& name) {
  for (const auto& v : sweepVariants())
    if (v.name == name) return &v;
  return nullptr;
}

const SweepVariant& sweepBaseline() {
  for (const auto& v : sweepVariants())
    if (v.baseline) return v;
  PTW_FAIL("the table of strategies names no sweep baseline");
}

std::string storedStrategyName(const Profile& profile) {
  const StrategyInfo* s = findStrategy(profile.strategy.kind);
  return s && s->readsPoolMode ? profile.strategy.kind + "/" + profile.strategy.poolMode : profile.strategy.kind;
}

const StrategyInfo* findStoredStrategy(const std::string& stored) {
  return findStrategy(stored.substr(0, stored.find('/')));
}

std::string acrossHostsStrategies() {
  std::string names;
  for (const auto& s : strategies())
    if (s.acrossHosts) names += (names.empty() ? "\"" : " or \"") + s.name + "\"";
  return names;
}

bool hasCoordinator(const Profile& profile) {
  const StrategyInfo* s = findStrategy(profile.strategy.kind);
  return s && s->coordinator;
}

int trainingRanks(const Profile& profile) {
  const StrategyInfo* s = findStrategy(profile.strategy.kind);
  return s && s->oneRank ? 1 : profile.strategy.ranks;
}

int trainingThreads(const Profile& profile) {
  const StrategyInfo* s = findStrategy(profile.strategy.kind);
  return s && !s->processPerRank && s->ranksPerProcess == 0 ? trainingRanks(profile) : processCount(profile);
}

}  // namespace ptw::core
