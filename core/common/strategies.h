// SPDX-License-Identifier: GPL-3.0-or-later
// The table of strategies: what each strategy is, in one place, for everything that is not
// its engine (core/engine, one file per strategy). Profile validation, the launcher, the
// store, the sweep, the headless printer, throughput and the window read this table
// instead of comparing names. Plain C++: no LibTorch, no Qt.
//
// Adding a strategy is one row here plus its engine file (docs/architecture.md).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/profile.h"

namespace ptw::core {

/// One configuration the scaling sweep runs: a strategy with some fields of the profile set.
/// Example: SweepVariant("ddp-gloo", "DDP over Gloo", "ddp").setBackend("gloo").setColor(5)
struct SweepVariant {
  SweepVariant(std::string name, std::string label, std::string strategy)
      : name(std::move(name)), label(std::move(label)), strategy(std::move(strategy)) {}
  std::string name;           ///< as --strategies and the sweep panel name it, e.g. "ddp-gloo"
  std::string label;          ///< the sweep panel's tooltip
  std::string strategy;       ///< its row's name (strategy.kind)
  std::string backend = "";   ///< strategy.backend it sets; "" leaves the profile's
  std::string poolMode = "";  ///< strategy.pool_mode it sets; "" leaves the profile's
  bool baseline = false;      ///< the run every other is compared with (efficiency); always runs
  bool byDefault = false;     ///< run when the user names none (ptw sweep, the panel's ticks)
  int color = -1;             ///< the window's series colour (ui/palette.h index); -1 black
  SweepVariant& setBackend(std::string v) {
    backend = std::move(v);
    return *this;
  }
  SweepVariant& setPoolMode(std::string v) {
    poolMode = std::move(v);
    return *this;
  }
  SweepVariant& setBaseline(bool v) {
    baseline = v;
    return *this;
  }
  SweepVariant& setByDefault(bool v) {
    byDefault = v;
    return *this;
  }
  SweepVariant& setColor(int v) {
    color = v;
    return *this;
  }
};

/// One strategy. Example: StrategyInfo{}.name = "ddp";
struct StrategyInfo {
  std::string name = "";   ///< strategy.kind
  std::string label = "";  ///< in the window
  /// What a run of it is, in a line for the window ("2 ranks of DDP on the CPU"): the window
  /// fills in {ranks} (strategy.ranks), {processes} ("one process", "4 processes"),
  /// {pool_mode} and {where} ("on the CPU", "on 2 GPUs").
  std::string description = "";
  /// strategy.ranks must be 1: the run has one rank (Single).
  bool oneRank = false;
  /// A worker process per rank; else every rank (lane) is a thread of one process.
  bool processPerRank = false;
  /// Plus a coordinator process, rank 0, which reports the whole run's loss and samples:
  /// its series stands for the run, the others are its workers'.
  bool coordinator = false;
  std::vector<std::string> devices = {"cpu", "cuda"};  ///< strategy.device values it runs on
  std::string deviceAdvice = "";                       ///< said when strategy.device is not one of them
  /// strategy.backend values it reads (auto first); empty when it reads none.
  std::vector<std::string> backends = {};
  bool readsPoolMode = false;  ///< strategy.pool_mode means something to it (and is stored)
  bool readsBucketMb = false;  ///< strategy.bucket_mb means something to it
  /// Its ranks may run on other hosts (hosts.launcher ssh, slurm; a standard launcher's ranks
  /// on several); else every rank is on one host.
  bool acrossHosts = false;
  /// Its ranks run the profile's `command` (a user's program), not ptw's engine: no model,
  /// data or hyperparameters of ptw's own apply (Note [Script ranks]).
  bool runsCommand = false;
  /// Its ranks make up their records without training (Note [Synthetic ranks] in
  /// engine/synthetic_ranks.h): no model, data or hyperparameters of ptw's own apply but
  /// hyper.max_steps and hyper.batch_size.
  bool synthetic = false;
  /// Never listed where a user picks a strategy (the profile editor, the errors' lists of
  /// names), though a profile may name it: for measuring ptw, not for users.
  bool hidden = false;
  /// The ranks one worker process stands for, its records naming each; 0: one process per
  /// rank (processPerRank) or all in one.
  int ranksPerProcess = 0;
  int maxRanks = 255;  ///< strategy.ranks at most
  std::vector<SweepVariant> sweep = {};
};

/// The most ranks a synthetic run may have (Note [Synthetic ranks]).
inline constexpr int kMaxSyntheticRanks = 16384;

/// Every strategy, in the order the window lists them (hidden ones last, never listed).
const std::vector<StrategyInfo>& strategies();
/// The row named `name`, or nullptr.
const StrategyInfo* findStrategy(const std::string& name);
/// The row of profile.strategy.kind. Throws ptw::Error naming strategy.kind and the known
/// names when there is none.
const StrategyInfo& strategyOf(const Profile& profile);

/// Every sweep variant of every row, in table order (the baseline first).
const std::vector<SweepVariant>& sweepVariants();
/// The variant named `name`, or nullptr.
const SweepVariant* findSweepVariant(const std::string& name);
/// The variant the sweep compares every other with.
const SweepVariant& sweepBaseline();

/// The strategy as the run store keeps it: the name, with the pool mode for a strategy that
/// reads it ("pool/sync").
std::string storedStrategyName(const Profile& profile);
/// The row of a name the run store kept (storedStrategyName), or nullptr.
const StrategyInfo* findStoredStrategy(const std::string& stored);

/// The strategies that run across hosts, quoted, for messages: "\"ddp\"" (or "\"a\" or \"b\"").
std::string acrossHostsStrategies();
/// True when rank 0 is a coordinator that reports for the whole run (null-safe on unknown kinds).
bool hasCoordinator(const Profile& profile);
/// Ranks (or lanes) that train: strategy.ranks, or 1 for a one-rank strategy.
int trainingRanks(const Profile& profile);
/// Threads that train at once: one per lane of a one-process strategy, else one per process.
int trainingThreads(const Profile& profile);

}  // namespace ptw::core
