// SPDX-License-Identifier: GPL-3.0-or-later
// BatchLoader: threads that prepare a rank's next batches (gather and augment, into pinned
// memory for a GPU) while the trainer computes, and hand them over in the order of the plan
// (run.loader_threads, Note [Batches ahead]).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

namespace ptw::engine {

/// One micro-batch as the trainer takes it: inputs and targets, still on the CPU.
struct LoadedBatch {
  std::int64_t epoch = 0;
  std::int64_t index = 0;  ///< its place in the epoch
  torch::Tensor x, y;
};

/// Example: BatchLoaderOptions(2).setDepth(8)
struct BatchLoaderOptions {
  explicit BatchLoaderOptions(int threads) : threads(threads) {}
  int threads;
  int depth = 0;  ///< batches prepared or being prepared ahead of the trainer; 0 = 2 × threads
  BatchLoaderOptions& setDepth(int v) {
    depth = v;
    return *this;
  }
};

// Note [Batches ahead]
// A batch depends only on its rows and on (rank, epoch, place in the epoch), which seed its
// augmentation (augmentSeed), so threads may prepare batches in any order and on any thread and
// the trainer still gets, in plan order, exactly what it would have made inline. Threads claim
// the next batch of the queued epochs while fewer than `depth` are claimed past the one the
// trainer takes next; results wait in a map keyed by place until the trainer takes them, so
// memory holds at most `depth` batches beyond the trainer's. An epoch's plan is queued when the
// trainer starts it, and the next epoch's with it, so the queue runs on across the boundary; a
// resumed run starts its loader at the checkpoint's place. A failed batch is kept as its
// message and raised, as a ptw::Error, when the trainer takes it. The work is plain loops over
// memory (no intra-op parallel kernels), so a loader thread uses one core and never its own
// pool of intra-op threads beside the rank's.
class BatchLoader {
 public:
  using Batches = std::vector<std::vector<std::int64_t>>;
  /// Prepares batch `index` of `epoch`, whose dataset rows are `rows`; runs on a loader thread.
  using Prepare =
      std::function<LoadedBatch(std::int64_t epoch, std::int64_t index, const std::vector<std::int64_t>& rows)>;

  BatchLoader(BatchLoaderOptions options, Prepare prepare);
  /// Stops the threads: each finishes the batch it is preparing (if any) and leaves.
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  /// Queues batches `from`.. of `epoch` after those queued.
  void queue(std::int64_t epoch, std::shared_ptr<const Batches> batches, std::int64_t from = 0);
  /// Whether the next batch take() hands over is batch `index` of `epoch`.
  bool isNext(std::int64_t epoch, std::int64_t index);
  /// Forgets every batch queued, prepared or being prepared.
  void clear();
  /// The next batch in queue order, waiting for it if needed. Throws ptw::Error when nothing is
  /// queued, or naming the batch and why when preparing it failed.
  LoadedBatch take();

  int threads() const { return static_cast<int>(m_threads.size()); }
  int depth() const { return m_depth; }

 private:
  struct Segment {
    std::int64_t epoch;
    std::shared_ptr<const Batches> batches;
    std::int64_t from;
    std::int64_t begin;  ///< the position of batch `from` in the queue
    std::int64_t end() const { return begin + static_cast<std::int64_t>(batches->size()) - from; }
  };
  struct Result {
    LoadedBatch batch;
    std::string error;  ///< non-empty: preparing the batch failed
  };
  void work();
  const Segment* segmentAt(std::int64_t position) const;  // under m_mutex

  const Prepare m_prepare;
  const int m_depth;
  std::mutex m_mutex;
  std::condition_variable m_wake;    ///< a thread may claim a batch, or must stop
  std::condition_variable m_filled;  ///< a result arrived
  std::deque<Segment> m_segments;
  std::map<std::int64_t, Result> m_ready;
  std::int64_t m_claimed = 0;      ///< the next position a thread claims
  std::int64_t m_taken = 0;        ///< the next position the trainer takes
  std::int64_t m_end = 0;          ///< past the last position queued
  std::uint64_t m_generation = 0;  ///< bumped by clear(): results of older generations are dropped
  bool m_stop = false;
  std::vector<std::thread> m_threads;
};

}  // namespace ptw::engine
