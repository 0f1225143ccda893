// SPDX-License-Identifier: GPL-3.0-or-later
// Workload: the data a profile names (generated or read from files), built identically on
// every rank; the loss, the optimizer and the learning-rate schedule that go with it.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include <torch/torch.h>

#include "common/profile.h"
#include "engine/kernels.h"

namespace ptw::engine {

class Model;

struct Dataset {
  /// Training inputs [n, in_features], float32; an image is flattened C·H·W (sampleShape says how).
  torch::Tensor x;
  torch::Tensor y;     ///< regression: [n, outputs] float32; classification: [n] int64
  torch::Tensor valX;  ///< held-out split (data.val_fraction), maybe empty
  torch::Tensor valY;
  bool classification = false;
  /// Images: {C, H, W} of one sample (a torchscript model gets [N, C, H, W]); empty otherwise.
  std::vector<std::int64_t> sampleShape;
  std::int64_t size() const { return x.size(0); }
  std::int64_t valSize() const { return valX.defined() ? valX.size(0) : 0; }
};

/// Synthetic data is seeded, so every rank and every reference run builds the same
/// samples; csv and mnist are read from data.path. Throws ptw::Error naming the file, the
/// row and the column of anything malformed. The last val_fraction of rows is held out (an
/// image folder's: of every class, Note [Every class in both splits]).
Dataset makeDataset(const core::DataSpec& data, const core::ModelSpec& model);

/// Whether data.crop_padding or data.flip asks for augmentation.
bool augments(const core::DataSpec& data);

/// The seed of one batch's augmentation: from hyper.seed, the rank, the epoch and the batch's
/// place in the epoch, so a run (and a resumed run) augments alike.
std::uint64_t augmentSeed(std::uint64_t seed, int rank, std::int64_t epoch, std::int64_t batch);

/// A new batch of images [n, C·H·W] (shape {C, H, W}): each sample padded by data.crop_padding
/// zeros and cropped back to H×W at a random place, then flipped left to right with chance 1/2
/// where data.flip. Draws come from `seed` only, so the same seed gives the same batch. Written
/// into `into` when it is a contiguous float32 CPU tensor of the batch's shape (pinned memory, say).
torch::Tensor augmentImages(const torch::Tensor& batch, const std::vector<std::int64_t>& shape,
                            const core::DataSpec& data, std::uint64_t seed, torch::Tensor into = {});

/// Runs the model on two samples and checks that its output fits the loss, so a shape
/// mistake is reported before training starts, with the fix.
void checkWorkload(Model& model, const Dataset& data, const core::Profile& profile);

/// MSE for regression, cross-entropy for classification.
torch::Tensor computeLoss(const torch::Tensor& output, const torch::Tensor& target, bool classification);

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const core::HyperSpec& hyper,
                                                       const std::vector<torch::Tensor>& params);

/// SGD's momentum buffer of `param` in `optimizer`'s state (torch's SGDParamState, so
/// checkpoints load either way), or null when SGD has none for it yet. Throws ptw::Error
/// unless it is a dense float32 buffer shaped like `param` (a checkpoint may hold anything).
torch::Tensor* findMomentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param);

/// Makes `buffer` SGD's momentum buffer of `param` in `optimizer`'s state; returns it.
torch::Tensor& addMomentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param, torch::Tensor buffer);

/// The momentum buffer of `param` in `optimizer`'s state, made (uninitialised, `first` set)
/// when SGD has none yet: SGD starts it at the first gradient (sgdUpdate's `first`).
float* momentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param, bool& first);

/// The scalars of SGD's update (kernels.h) from its options.
SgdScalars sgdScalars(const torch::optim::SGDOptions& options);

/// A parameter as a fused SGD step over shares of the parameters sees it (DataParallel's
/// lane-split step): where its elements and momentum buffer are, where it starts among the
/// parameters laid end to end, and SGD's arithmetic for it.
struct SgdPiece {
  float* w = nullptr;
  float* buf = nullptr;  ///< momentum buffer, or null without momentum
  std::size_t at = 0;    ///< first element among the parameters laid end to end
  std::size_t n = 0;
  SgdScalars scalars;
  bool first = false;  ///< SGD had no momentum buffer for it yet (momentumBuffer)
};

/// One piece per parameter of `sgd` that `take` accepts (it may prepare the parameter, or
/// check it), in the optimizer's order, laid end to end from 0; momentum buffers are made
/// where SGD has none.
std::vector<SgdPiece> sgdPieces(torch::optim::SGD& sgd, const std::function<bool(torch::Tensor&)>& take);

/// Calls f(index, a, b) for every piece with elements in [lo, hi) of the whole: those are its
/// elements [a, b), counted from the piece's start.
template <typename F>
void forEachInShare(const std::vector<SgdPiece>& pieces, std::size_t lo, std::size_t hi, F&& f) {
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto& piece = pieces[i];
    const std::size_t a = std::max(piece.at, lo), b = std::min(piece.at + piece.n, hi);
    if (a < b) f(i, a - piece.at, b - piece.at);
  }
}

/// Learning rate for optimizer step `step` (0-based): the schedule times the warm-up ramp.
double learningRate(const core::HyperSpec& hyper, std::int64_t step);

}  // namespace ptw::engine
