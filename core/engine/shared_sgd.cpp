// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/shared_sgd.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/shm_segment.h"
#include "engine/workload.h"

namespace ptw::engine {

SharedSgd::SharedSgd(std::shared_ptr<ShmSegment> segment, const std::vector<torch::Tensor>& params, float* weights,
                     float* buffers)
    : m_segment(std::move(segment)), m_weights(weights), m_buffers(buffers) {
  std::size_t off = 0;
  for (const auto& p : params) {
    m_offset.emplace(p.unsafeGetTensorImpl(), off);
    off += static_cast<std::size_t>(p.numel());
  }
}

void SharedSgd::step(torch::optim::Optimizer& optimizer, float* const* slots, int count, std::size_t lo,
                     std::size_t hi) {
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    const SgdScalars scalars = sgdScalars(o);
    for (auto& p : group.params()) {
      const auto found = m_offset.find(p.unsafeGetTensorImpl());
      PTW_CHECK(found != m_offset.end(), "internal: the optimizer steps a parameter that is not shared");
      const std::size_t off = found->second, n = static_cast<std::size_t>(p.numel());
      const std::size_t a = std::max(off, lo), b = std::min(off + n, hi);
      bool first = false;
      float* buf = o.momentum() != 0 ? bindMomentumBuffer(optimizer, p, off, a, b, first) : nullptr;
      if (a < b) averageThenSgd(m_weights + a, buf ? buf + (a - off) : nullptr, slots, count, a, b, scalars, first);
    }
  }
}

float* SharedSgd::bindMomentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& p, std::size_t off,
                                     std::size_t a, std::size_t b, bool& first) {
  PTW_CHECK(m_buffers, "internal: SGD has momentum but the profile said none");
  float* shared = m_buffers + off;
  torch::Tensor* old = findMomentumBuffer(optimizer, p);
  first = old == nullptr;
  if (first) {
    addMomentumBuffer(optimizer, p, segmentView(m_segment, shared, p.sizes()));
  } else if (old->data_ptr() != static_cast<void*>(shared)) {
    if (b > a) std::memcpy(shared + (a - off), old->data_ptr<float>() + (a - off), (b - a) * sizeof(float));
    *old = segmentView(m_segment, shared, p.sizes());
  }
  return shared;
}

}  // namespace ptw::engine
