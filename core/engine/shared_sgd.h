// SPDX-License-Identifier: GPL-3.0-or-later
// SGD over parameters and momentum buffers that the processes of a run share in one
// segment, each process stepping its own share with the average of every process's
// gradients (Note [Sharded SGD step] in ddp_shm.cpp): DDP over shared memory, and the
// process pool's workers (Note [Workers step the pool] in process_pool.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

namespace ptw::engine {

class ShmSegment;

class SharedSgd {
 public:
  /// `params`, laid end to end, are views of `weights` in `segment`; `buffers` (null without
  /// momentum) is the region of their momentum buffers, laid out alike.
  SharedSgd(std::shared_ptr<ShmSegment> segment, const std::vector<torch::Tensor>& params, float* weights,
            float* buffers);

  /// Steps elements [lo, hi) of the parameters (laid end to end) with `optimizer`'s SGD
  /// arithmetic and the average of `slots[0..count)` over [lo, hi) as the gradient
  /// (averageThenSgd: the slots' [lo, hi) are zeroed once read). The optimizer's momentum
  /// buffers become views of the shared ones, so that a checkpoint of any process holds them
  /// all; a buffer the optimizer already had (a resumed checkpoint) is copied in over [lo, hi)
  /// first. A process with no share (lo == hi) only binds the buffers.
  void step(torch::optim::Optimizer& optimizer, float* const* slots, int count, std::size_t lo, std::size_t hi);

 private:
  float* bindMomentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& p, std::size_t off, std::size_t a,
                            std::size_t b, bool& first);

  std::shared_ptr<ShmSegment> m_segment;
  std::unordered_map<const void*, std::size_t> m_offset;  ///< parameter -> its first element
  float* m_weights;
  float* m_buffers;
};

}  // namespace ptw::engine
