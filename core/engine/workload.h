// Workload: the model and the data a profile names, built identically on every rank.
#pragma once

#include <torch/torch.h>

#include "common/profile.h"

namespace ptw::engine {

struct Dataset {
  torch::Tensor x;  ///< [n, in_features], float32
  torch::Tensor y;  ///< regression: [n, out_features] float32; classification: [n] int64
  bool classification = false;
  std::int64_t size() const { return x.size(0); }
};

/// Seeded, so every rank and every reference run builds the same samples.
Dataset makeDataset(const core::DataSpec& data, const core::ModelSpec& model);

/// Parameters are initialised from `seed`, so ranks agree before the first broadcast.
torch::nn::Sequential makeModel(const core::ModelSpec& model, std::uint64_t seed);

/// MSE for regression, cross-entropy for classification.
torch::Tensor computeLoss(const torch::Tensor& output, const torch::Tensor& target, bool classification);

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const core::HyperSpec& hyper,
                                                       const std::vector<torch::Tensor>& params);

}  // namespace ptw::engine
