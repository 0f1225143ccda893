// SPDX-License-Identifier: GPL-3.0-or-later
// Model: the network a profile names, behind one interface whether it is built here
// (linear, mlp, cnn) or loaded from TorchScript, so every strategy trains either.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/profile.h"

namespace ptw::engine {

class Model {
 public:
  virtual ~Model() = default;
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  /// The trainable parameters, in a fixed order shared by every rank.
  virtual std::vector<torch::Tensor> parameters() = 0;
  /// The buffers (BatchNorm's running statistics and batch count), in a fixed order shared by
  /// every rank and replica; empty for most models (Note [Buffers]).
  virtual std::vector<torch::Tensor> buffers() = 0;
  /// A deep copy on `device` (a DataParallel replica).
  virtual std::unique_ptr<Model> replicate(const torch::Device& device) const = 0;
  virtual void to(const torch::Device& device) = 0;
  virtual void setTraining(bool on) = 0;
  /// Writes the model as its own kind: TorchScript for torchscript models (readable by
  /// Python's torch.jit.load), else the parameter list (torch::save).
  virtual void save(const std::string& path) = 0;
  /// One micro-batch's loss and gradients without autograd (Note [Gradients by hand]), where
  /// the model can: adds `weight` times the mean loss's gradient into each parameter's .grad
  /// and returns the unscaled loss. Otherwise nothing is touched and the caller uses autograd.
  virtual std::optional<double> gradientsByHand(const torch::Tensor& /*x*/, const torch::Tensor& /*y*/,
                                                double /*weight*/, bool /*classification*/) {
    return std::nullopt;
  }
  /// The shape of one sample, {C, H, W} for images (Dataset::sampleShape). A torchscript model
  /// gets batches in it, [N, C, H, W]; the built-in models keep the flat rows [N, C·H·W].
  virtual void setInputShape(const std::vector<std::int64_t>& /*shape*/) {}
};

/// Built from the spec; parameters initialised from `seed`, so every rank starts equal.
/// A torchscript model that does not load throws ptw::Error naming model.path.
std::unique_ptr<Model> makeModel(const core::ModelSpec& spec, std::uint64_t seed);

/// A model around a network built by the caller (makeModel's linear, mlp and cnn are these).
std::unique_ptr<Model> makeSequentialModel(torch::nn::Sequential net);

}  // namespace ptw::engine
