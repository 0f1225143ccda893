// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/kernels.h"

#include <algorithm>
#include <cstring>

namespace ptw::engine {

void sgdUpdate(float* __restrict w, float* __restrict buf, const float* __restrict g, std::int64_t n,
               const SgdScalars& s, bool first) {
  const float lr = s.lr, momentum = s.momentum, decay = s.decay, keep = s.keep;
  if (buf && !first && decay == 0 && !s.nesterov) {  // the usual case
    for (std::int64_t i = 0; i < n; ++i) {
      buf[i] = buf[i] * momentum + keep * g[i];
      w[i] -= lr * buf[i];
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if (decay != 0) d += decay * w[i];
    if (buf) {
      buf[i] = first ? d : buf[i] * momentum + keep * d;
      d = s.nesterov ? d + momentum * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  }
}

namespace {

void sumInto(float* __restrict out, const float* const* parts, int count, std::size_t at, std::size_t n) {
  const float* __restrict first = parts[0] + at;
  for (std::size_t i = 0; i < n; ++i) out[i] = first[i];
  for (int r = 1; r < count; ++r) {
    const float* __restrict part = parts[r] + at;
    for (std::size_t i = 0; i < n; ++i) out[i] += part[i];
  }
}

}  // namespace

void averageInto(float* __restrict out, const float* const* slots, int world, std::size_t at, std::size_t n) {
  sumInto(out, slots, world, at, n);
  const float scale = 1.0f / static_cast<float>(world);
  for (std::size_t i = 0; i < n; ++i) out[i] *= scale;
}

namespace {
constexpr std::size_t kBlock = 512;  // floats: a block of sums stays in L1 until it is used
}

void averageIntoSlots(float* const* slots, int world, std::size_t lo, std::size_t hi) {
  alignas(64) float sum[kBlock];
  for (std::size_t b = lo; b < hi; b += kBlock) {
    const std::size_t n = std::min(kBlock, hi - b);
    averageInto(sum, slots, world, b, n);
    for (int r = 0; r < world; ++r) std::memcpy(slots[r] + b, sum, n * sizeof(float));
  }
}

void averageThenSgd(float* w, float* buf, float* const* slots, int world, std::size_t lo, std::size_t hi,
                    const SgdScalars& s, bool first) {
  alignas(64) float grad[kBlock];
  for (std::size_t b = lo; b < hi; b += kBlock) {
    const std::size_t n = std::min(kBlock, hi - b);
    averageInto(grad, slots, world, b, n);
    for (int r = 0; r < world; ++r) std::memset(slots[r] + b, 0, n * sizeof(float));
    sgdUpdate(w + (b - lo), buf ? buf + (b - lo) : nullptr, grad, static_cast<std::int64_t>(n), s, first);
  }
}

void sumThenSgd(float* w, float* buf, float* const* parts, int count, std::size_t lo, std::size_t hi,
                const SgdScalars& s, bool first) {
  alignas(64) float grad[kBlock];
  for (std::size_t b = lo; b < hi; b += kBlock) {
    const std::size_t n = std::min(kBlock, hi - b);
    sumInto(grad, parts, count, b, n);
    for (int r = 1; r < count; ++r) std::memset(parts[r] + b, 0, n * sizeof(float));
    sgdUpdate(w + (b - lo), buf ? buf + (b - lo) : nullptr, grad, static_cast<std::int64_t>(n), s, first);
  }
}

}  // namespace ptw::engine
