// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/sampler.h"

#include <torch/torch.h>

#include "common/error.h"

namespace ptw::engine {

std::vector<std::int64_t> shardIndices(const SamplerOptions& o) {
  PTW_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world, "rank ", o.rank, " outside world of ", o.world);
  const std::int64_t n = o.samples, w = o.world;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
  if (o.shuffle) {
    auto gen = at::detail::createCPUGenerator(o.seed + static_cast<std::uint64_t>(o.epoch));
    auto perm = torch::randperm(n, gen, torch::kInt64);
    std::memcpy(indices.data(), perm.data_ptr<std::int64_t>(), sizeof(std::int64_t) * static_cast<std::size_t>(n));
  } else {
    for (std::int64_t i = 0; i < n; ++i) indices[static_cast<std::size_t>(i)] = i;
  }
  std::int64_t perRank = (o.dropLast && n % w != 0) ? (n - w + w - 1) / w  // ceil((n - w) / w)
                                                    : (n + w - 1) / w;
  std::int64_t total = perRank * w;
  if (total > n) {
    // Pad by repeating from the start, as many times as needed.
    for (std::int64_t i = 0; static_cast<std::int64_t>(indices.size()) < total; ++i)
      indices.push_back(indices[static_cast<std::size_t>(i % n)]);
  } else {
    indices.resize(static_cast<std::size_t>(total));
  }
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(perRank));
  for (std::int64_t i = o.rank; i < total; i += w) mine.push_back(indices[static_cast<std::size_t>(i)]);
  return mine;
}

std::vector<std::vector<std::int64_t>> shardBatches(const SamplerOptions& o, std::int64_t batchSize) {
  PTW_CHECK(batchSize >= 1, "hyper.batch_size: must be >= 1, got ", batchSize);
  auto idx = shardIndices(o);
  std::vector<std::vector<std::int64_t>> batches;
  for (std::size_t i = 0; i < idx.size(); i += static_cast<std::size_t>(batchSize)) {
    auto end = std::min(idx.size(), i + static_cast<std::size_t>(batchSize));
    batches.emplace_back(idx.begin() + static_cast<std::ptrdiff_t>(i), idx.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return batches;
}

std::vector<std::vector<std::int64_t>> globalBatches(SamplerOptions o, std::int64_t batchSize) {
  std::vector<std::vector<std::int64_t>> merged;
  for (int r = 0; r < o.world; ++r) {
    o.rank = r;
    auto mine = shardBatches(o, batchSize);
    if (merged.size() < mine.size()) merged.resize(mine.size());
    for (std::size_t k = 0; k < mine.size(); ++k) merged[k].insert(merged[k].end(), mine[k].begin(), mine[k].end());
  }
  return merged;
}

}  // namespace ptw::engine
