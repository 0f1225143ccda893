// SPDX-License-Identifier: GPL-3.0-or-later
// Strategy: how one process takes part in a training step: which batches it sees, how
// its gradients are computed and meet the other ranks' before the optimizer steps. One
// class per strategy and per algorithm within one (single.cpp, data_parallel.cpp, ddp.cpp,
// ddp_shm.cpp, process_pool.cpp, pool_sync.cpp, pool_hogwild.cpp), chosen by name from one
// registry, so adding a strategy is a file and a registry line. The Trainer owns the loop
// and calls, each step:
//
//   beginStep(localStop)
//   zeroGradients(optimizer)
//   computeGradients(micro-batches): for each, setSyncGradients(last); backward(...)
//   reduce(...)                          -> every rank's gradients are the average
//   optimizerStep(...)
//
// A strategy owns the phases it differs in (Note [Chosen once]): the pool's coordinator
// computes nothing in computeGradients, DDP over shared memory with SGD leaves out
// zero_grad and averages inside optimizerStep, each rank its share (Note [Sharded SGD
// step]), so after reduce its gradients are still its own.
//
// Note [Chosen once]
// Where a strategy runs one of several algorithms (DDP over shared memory: one barrier,
// sharded SGD or all-reduce; the pool: sync or hogwild, coordinator or worker, workers'
// SGD or the coordinator's optimizer), each algorithm is a class of its own, picked once,
// as Horovod's OperationManager picks the first op whose Enabled() holds: from the
// profile by the factory, or, where the choice needs the model (its size, its dtype),
// by choose() on the model before plan() and attach(). No step then branches on a mode.
//
// Note [Buffers]
// A model's buffers (BatchNorm's running mean and variance and its batch count) are not
// trained: each forward in training mode updates them from its own batch, so ranks that see
// different batches drift apart. As PyTorch's DDP does by default (broadcast_buffers=True),
// every DDP rank's step starts from rank 0's buffers: they are broadcast at attach with the
// parameters, and before each step's first forward. Over c10d that is one broadcast of
// them all in one float64 tensor (exact for float32 values and for counts below 2^53) in
// beginStep; over shared memory rank 0 leaves its buffers in the segment before the barrier
// that reduce() has anyway and the others copy them after it, ready for the next step, so
// no barrier is added (ddp_shm.cpp). The micro-batches of an accumulated step run on from
// the rank's own. After a step rank 0 holds its own buffers, as in PyTorch, and its
// checkpoint saves them. A model without buffers pays nothing: no collective, no copy.
// DataParallel does what PyTorch's does: each forward gives the replicas the model's
// (lane 0's) buffers, and the buffers that result are lane 0's. The process pool is that
// with the coordinator as the module, which runs no forward: each step a worker's forward
// starts from the coordinator's buffers (those every process was built or resumed with),
// whose updates are dropped as a DataParallel replica's are, and the coordinator's
// checkpoint keeps them unchanged. (Running statistics that learn in the pool would need a
// worker to publish its own, as rank 0 does over shared memory; not done yet.)
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/profile.h"
#include "engine/sampler.h"

namespace ptw::engine {

class Model;

/// The batches of one epoch, as dataset indices.
using BatchPlan = std::function<std::vector<std::vector<std::int64_t>>(std::int64_t epoch)>;

/// The DistributedSampler plan of rank `rank` of `world` over `samples` training samples.
BatchPlan shardPlan(const core::Profile& profile, std::int64_t samples, int rank, int world);
/// Rank `rank` of `world`'s sampler in `epoch`, with the profile's seed, shuffle and drop_last.
SamplerOptions samplerOptions(const core::Profile& profile, std::int64_t samples, int world, int rank,
                              std::int64_t epoch);

struct SyncContext {
  const core::Profile& profile;
  int rank = 0;                          ///< this process
  int world = 1;                         ///< processes in the run (core::processCount)
  int port = 0;                          ///< the run's store port; also names its shared-memory segments
  std::string storeFile = "";            ///< rendezvous through this c10d FileStore; "" uses a TCPStore on `port`
  std::string masterAddr = "127.0.0.1";  ///< the TCPStore's host (rank 0's); not loopback: Gloo leaves it too
  int localRank = -1;                    ///< this process among its host's ranks (cuda:localRank); -1: `rank`
};

/// One series of the per-step report (a DataParallel replica reports one per lane).
struct LaneReport {
  int lane = 0;
  double loss = 0;
  std::int64_t samples = 0;
  double computeMs = 0;
  double waitMs = 0;  ///< waiting for the slowest lane and summing gradients
};

/// What a step produced, as reduce() sees and may complete it.
struct StepState {
  bool localStop = false;
  double loss = 0;           ///< this process's loss; the pool coordinator sets the workers' mean
  std::int64_t samples = 0;  ///< this process's samples; likewise
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  /// The batches this process trains on, out of `samples` training samples.
  virtual BatchPlan plan(const core::Profile& profile, std::int64_t samples) const = 0;
  /// Called once before training, with parameters initialised (or resumed): DDP broadcasts
  /// rank 0's, the pool maps them into shared memory, DataParallel makes its replicas.
  virtual void attach(Model& model) = 0;
  /// The class that trains `model` when the choice needs the model (Note [Chosen once]);
  /// null keeps this one. chooseFor() asks it once, before plan() and attach().
  virtual std::unique_ptr<Strategy> choose(Model& /*model*/) { return nullptr; }

  virtual void beginStep(bool localStop) { m_localStop = localStop; }
  /// Clears the gradients before a step's micro-batches. A strategy whose step leaves every
  /// gradient zero (it zeroes what it reads: averageThenSgd) leaves this out.
  virtual void zeroGradients(torch::optim::Optimizer& optimizer) { optimizer.zero_grad(); }
  /// Runs the step's forward and backward passes (`microBatches`, which calls backward()
  /// for each); a process that computes no gradients (the pool's coordinator) skips them.
  virtual void computeGradients(const std::function<void()>& microBatches) { microBatches(); }
  /// False on all but the last micro-batch of an accumulated step (no_sync semantics).
  virtual void setSyncGradients(bool /*on*/) {}
  /// Forward and backward of one micro-batch, its loss scaled by `weight` (its share of the
  /// step's samples). Returns the unscaled loss. DataParallel splits it over replicas.
  virtual double backward(Model& model, const torch::Tensor& x, const torch::Tensor& y, double weight,
                          bool classification);
  /// Makes this process's gradients the average over ranks (or, for a strategy that averages
  /// inside optimizerStep, only meets the other ranks). Returns whether any rank asked to
  /// stop, so that every rank leaves after the same step.
  virtual bool reduce(Model& model, StepState& state) = 0;
  /// Clips the gradients' norm to `clipNorm` (if > 0) and steps `optimizer`, and whatever
  /// the strategy does around the step: DDP over shared memory steps its share of
  /// parameters that all ranks share, DataParallel updates its replicas, the pool's
  /// processes meet or report progress.
  virtual void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm);
  /// Called once after the last step (a pool worker says it is done).
  virtual void finish() {}

  /// Per-replica timings of the last step; empty unless the strategy has replicas.
  virtual const std::vector<LaneReport>& lanes() const {
    static const std::vector<LaneReport> none;
    return none;
  }

  /// How the last micro-batch's gradients were computed: "by hand" or "autograd"; null
  /// before any (and in a process that computes none).
  virtual const char* gradients() const { return m_gradients.load(std::memory_order_relaxed); }

  /// Gradient exchanges this process has launched: a collective per bucket over c10d, a
  /// meeting of the ranks' gradients over shared memory. With accumulation, one a step.
  std::int64_t exchanges() const { return m_exchanges; }

  /// False computes every gradient with autograd, as a reference (worker flag --gradients).
  void setGradientsByHand(bool on) { m_byHand = on; }
  bool gradientsByHand() const { return m_byHand; }
  void setAutocast(bool on) { m_autocast = on; }
  bool autocast() const { return m_autocast; }
  void setDevice(torch::Device d) { m_device = d; }
  torch::Device device() const { return m_device; }

 protected:
  /// One micro-batch's forward and backward on `model` (a replica, for DataParallel): by hand
  /// where the model can and this strategy lets it (Note [Gradients by hand]), else autograd
  /// under the strategy's autocast. Returns the unscaled loss.
  double lossAndGradients(Model& model, const torch::Tensor& x, const torch::Tensor& y, double weight,
                          bool classification);

  bool m_localStop = false;
  bool m_autocast = false;
  bool m_byHand = true;
  std::int64_t m_exchanges = 0;
  bool m_needsAutograd = false;  ///< set by a strategy whose work hangs on autograd's nodes (DDP's hooks)
  std::atomic<const char*> m_gradients{nullptr};  ///< DataParallel's lanes set it at once
  torch::Device m_device = torch::kCPU;
};

using StrategyFactory = std::function<std::unique_ptr<Strategy>(const SyncContext&)>;

/// Strategy name (profile strategy.kind) -> factory: every engine registered with
/// PTW_REGISTER_STRATEGY.
const std::map<std::string, StrategyFactory>& strategyRegistry();

// Note [Strategy registration]
// Each engine file registers its own factory under its row's name in the table of strategies
// (common/strategies.h), so that adding a strategy is that file and that row: no list names
// the engines. Registration runs while static objects are built, before main(). ptw_engine is
// an object library, so every engine file is linked into every program that uses the engine
// and no registration is dropped by the linker; test_workload checks that the registry and
// the table agree.
struct StrategyRegistration {
  StrategyRegistration(const char* name, StrategyFactory factory);
};

/// Registers `factory` as the engine of strategy `name` (Note [Strategy registration]).
#define PTW_REGISTER_STRATEGY(name, factory) \
  static const ::ptw::engine::StrategyRegistration ptwRegisterStrategy_##factory { name, factory }

std::unique_ptr<Strategy> makeStrategy(const SyncContext& ctx);

/// `strategy`, or the class it chooses for `model` (Note [Chosen once]), with its settings.
std::unique_ptr<Strategy> chooseFor(std::unique_ptr<Strategy> strategy, Model& model);

/// The device of process `rank` under the profile: cpu, or cuda:rank after checking that
/// LibTorch sees that device. Throws ptw::Error naming strategy.device otherwise.
torch::Device deviceFor(const core::Profile& profile, int index);

}  // namespace ptw::engine
