// SPDX-License-Identifier: GPL-3.0-or-later
// Sharding that follows torch.utils.data.DistributedSampler exactly, so that rank r sees
// the indices, in the order, that it would see in PyTorch for the same settings.
#pragma once

#include <cstdint>
#include <vector>

namespace ptw::engine {

/// Example: SamplerOptions o(100, 2, 0); o.epoch = 3;  (engine::samplerOptions fills it from a profile)
struct SamplerOptions {
  SamplerOptions(std::int64_t samples, int world, int rank) : samples(samples), world(world), rank(rank) {}
  std::int64_t samples;
  int world;
  int rank;
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  bool shuffle = true;
  bool dropLast = false;
};

/// The indices rank `rank` visits in `epoch`: a permutation from randperm with a
/// generator seeded with seed + epoch, padded by wrapping (or cut when dropLast) to a
/// multiple of world, then every world-th index starting at rank.
std::vector<std::int64_t> shardIndices(const SamplerOptions& o);

/// shardIndices cut into batches of `batchSize` (the last one may be smaller).
std::vector<std::vector<std::int64_t>> shardBatches(const SamplerOptions& o, std::int64_t batchSize);

/// Batch k of every rank concatenated, rank 0 first: the global batches that one process
/// must train on to reproduce a data-parallel run (the reference of every equivalence test).
std::vector<std::vector<std::int64_t>> globalBatches(SamplerOptions o, std::int64_t batchSize);

}  // namespace ptw::engine
