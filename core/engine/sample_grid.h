// SPDX-License-Identifier: GPL-3.0-or-later
// Sample images as Check workload shows them: a grid of training images after augmentation,
// with the normalisation undone, written as a PNG by `ptw-worker --preflight --samples FILE`.
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "common/profile.h"

namespace ptw::engine {

struct Dataset;

/// What sampleGrid lays out.
/// Example: sampleGrid(data, profile.data, SampleGridOptions(profile.hyper.seed).count(16).columns(4))
struct SampleGridOptions {
  explicit SampleGridOptions(std::uint64_t seed) : seed_(seed) {}
  SampleGridOptions& count(int n) { return count_ = n, *this; }
  SampleGridOptions& columns(int n) { return columns_ = n, *this; }
  std::uint64_t seed_;  ///< the augmentation's draws (augmentSeed(seed, 0, 0, 0))
  int count_ = 16;      ///< images, at most the training samples
  int columns_ = 4;
};

/// `count` training images spread evenly over the training set (sample i·n/count, so that a
/// folder sorted by class shows each class), augmented as data.crop_padding and data.flip ask
/// (draws from the options' seed), with data.mean and data.std undone (x·std + mean) and
/// clamped to [0, 1]; laid out `columns` to a row, a 1-pixel white gap between them. Returns
/// float32 [C, rows·(H+1)−1, columns·(W+1)−1]. Throws ptw::Error for data that is not images.
torch::Tensor sampleGrid(const Dataset& data, const core::DataSpec& spec, const SampleGridOptions& options);

/// Writes `image` (float32 [C, H, W] in [0, 1]) to `path` as an 8-bit PNG: gray for 1
/// channel, RGB for 3, the first channel as gray otherwise. Throws ptw::Error naming the file.
void writePng(const torch::Tensor& image, const std::string& path);

}  // namespace ptw::engine
