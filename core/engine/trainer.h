// SPDX-License-Identifier: GPL-3.0-or-later
// Trainer: the training loop of one process. It owns the data, the model and the
// optimizer, the schedule, accumulation, clipping, validation and checkpoints, and leaves
// how gradients are computed and combined to a Strategy and reporting to a callback.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>

#include <torch/torch.h>

#include "common/profile.h"
#include "common/record.h"
#include "engine/batch_loader.h"
#include "engine/model.h"
#include "engine/strategy.h"
#include "engine/workload.h"

namespace ptw::engine {

/// Example: TrainerOptions(profile, 0, 1).setOutDir("runs/x").setPlan(myPlan)
struct TrainerOptions {
  TrainerOptions(core::Profile profile, int rank, int world) : profile(std::move(profile)), rank(rank), world(world) {}
  core::Profile profile;
  int rank;
  int world;
  std::string outDir = "";  ///< checkpoints go here; "" writes none
  BatchPlan plan = {};      ///< overrides the strategy's plan (equivalence references)
  /// From step slowFromStep on, each step's data phase waits slowFactor - 1 times the step's
  /// own time (data and compute) more: the injected slow-at-step (Note [Injected faults]).
  double slowFactor = 1;
  std::int64_t slowFromStep = -1;
  TrainerOptions& setOutDir(std::string v) {
    outDir = std::move(v);
    return *this;
  }
  TrainerOptions& setPlan(BatchPlan v) {
    plan = std::move(v);
    return *this;
  }
  TrainerOptions& setSlowdown(double factor, std::int64_t fromStep) {
    slowFactor = factor, slowFromStep = fromStep;
    return *this;
  }
};

class Trainer {
 public:
  using RecordSink = std::function<void(const core::Record&)>;

  /// Loads the data and the model, checks that they fit, resumes from
  /// run.resume_from when set, and attaches the strategy. Throws ptw::Error on bad input.
  Trainer(TrainerOptions options, std::unique_ptr<Strategy> strategy, RecordSink sink = {});

  /// Trains until max_steps / epochs, or until a rank asks to stop (checked every step,
  /// agreed across ranks by the strategy). Returns the number of optimizer steps taken.
  std::int64_t run(const std::atomic<bool>& stopRequested);

  std::vector<torch::Tensor> parameters() const { return m_model->parameters(); }
  Model& model() { return *m_model; }
  /// How the last step's gradients were computed (Strategy::gradients()).
  const char* gradients() const { return m_strategy->gradients(); }
  /// The strategy that trains, as chosen for the model (Note [Chosen once]).
  const Strategy& strategy() const { return *m_strategy; }
  std::int64_t step() const { return m_step; }
  /// Validation loss and accuracy (-1 for regression) on the held-out split.
  std::pair<double, double> validate();

  /// Writes <outDir>/checkpoint.pt atomically: parameters, optimizer state, step, epoch,
  /// position in the epoch and the RNG state.
  void saveCheckpoint(const std::string& path);

 private:
  using Clock = std::chrono::steady_clock;
  using Batches = std::vector<std::vector<std::int64_t>>;
  /// Where one step's time went.
  struct StepTimes {
    Clock::time_point start, computed, reduced, stepped;
    double dataMs = 0, computeMs = 0;
  };
  /// The steps of one epoch from m_batchInEpoch on; true when training stops.
  bool trainEpoch(const Batches& batches, const std::atomic<bool>& stopRequested);
  /// One optimizer step; returns whether any rank asked to stop.
  bool trainStep(const Batches& batches, bool localStop);
  /// Forward and backward of the step's `micro` micro-batches; returns their weighted loss.
  double microBatches(const Batches& batches, std::int64_t micro, std::int64_t stepSamples, StepTimes& t);
  /// Micro-batch `index` of m_epoch (rows `rows`) on the strategy's device: from the loader when
  /// run.loader_threads is set, else gathered and augmented here.
  std::pair<torch::Tensor, torch::Tensor> batchOnDevice(std::int64_t index, const std::vector<std::int64_t>& rows);
  /// What a loader thread makes of one batch (Note [Batches ahead]).
  LoadedBatch loadBatch(std::int64_t epoch, std::int64_t index, const std::vector<std::int64_t>& rows) const;
  /// Rows `rows` gathered (into `x`, `y` when they fit), augmented with the seed of batch `index`
  /// of `epoch`, in pinned memory if `pinned`: what the loader and the inline path both make.
  LoadedBatch prepareBatch(std::int64_t epoch, std::int64_t index, const std::vector<std::int64_t>& rows,
                           torch::Tensor& x, torch::Tensor& y, bool pinned) const;
  /// Queues the epoch's batches from m_batchInEpoch on, and the next epoch's, in the loader.
  void queueBatches(const std::shared_ptr<const Batches>& batches, std::shared_ptr<const Batches>& next);
  void publishStep(const StepState& state, double lr, const StepTimes& t);
  void validateAndPublish();
  std::string checkpointPath() const { return m_options.outDir + "/checkpoint.pt"; }
  void loadCheckpoint(const std::string& path);
  void publish(const core::Record& r) {
    if (m_sink) m_sink(r);
  }

  TrainerOptions m_options;
  const core::Profile& m_profile;
  std::unique_ptr<Strategy> m_strategy;
  RecordSink m_sink;
  Dataset m_data;
  torch::Tensor m_batchX, m_batchY;  ///< the step's batch, gathered in place (trainer.cpp)
  std::unique_ptr<Model> m_model;
  std::unique_ptr<torch::optim::Optimizer> m_optimizer;
  BatchPlan m_plan;
  std::int64_t m_step = 0;
  std::int64_t m_epoch = 0;
  std::int64_t m_batchInEpoch = 0;  ///< micro-batches of m_epoch already trained
  std::int64_t m_memBytes = 0;      ///< memory as last read (publishStep)
  std::optional<Clock::time_point> m_memReadAt;
  std::unique_ptr<BatchLoader> m_loader;  ///< run.loader_threads > 0; last, so it stops before what it reads goes
};

/// Resident set size of this process in bytes.
std::int64_t residentBytes();

/// What a rank reports as its memory: CUDA bytes allocated on a GPU, else the resident set.
std::int64_t memoryBytes(const torch::Device& device);

}  // namespace ptw::engine
