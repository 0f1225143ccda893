// SPDX-License-Identifier: GPL-3.0-or-later
// Elementwise float loops of the training step that LibTorch's operators would run as
// several dispatched passes: SGD's update and the shared-memory average. Plain C++ in a
// file of their own, compiled for vectorisation (core/CMakeLists.txt: -O3, and
// -ffp-contract=off so that no compiler fuses a multiply and an add) and kept free of
// LibTorch headers. Every element is computed as the scalar expression would, in float,
// so results do not depend on the vector width.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace ptw::engine {

/// `floats` rounded up to whole cache lines (16 floats): a shared segment's regions, and the
/// shares that ranks or lanes write, start on one.
constexpr std::size_t cacheLineFloats(std::size_t floats) { return (floats + 15) / 16 * 16; }

/// Part `index` of `parts` near-equal parts of [0, total): [lo, hi), starting on a cache line
/// (buffers are aligned so) so that no two parts write the same line of one buffer.
inline std::pair<std::size_t, std::size_t> shareOf(std::size_t total, int parts, int index) {
  const std::size_t each =
      cacheLineFloats((total + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts));
  const std::size_t lo = std::min(total, each * static_cast<std::size_t>(index));
  return {lo, std::min(total, lo + each)};
}

/// torch::optim::SGD's arithmetic for one parameter (Note [Fused SGD]).
struct SgdScalars {
  float lr = 0;
  float momentum = 0;
  float decay = 0;  ///< weight decay
  float keep = 1;   ///< 1 - dampening
  bool nesterov = false;
};

/// SGD's update of `n` elements in one pass: `w` the parameters, `g` their gradients, `buf`
/// the momentum buffer (null without momentum), which `first` starts at the gradient as SGD
/// does on a parameter's first step.
void sgdUpdate(float* w, float* buf, const float* g, std::int64_t n, const SgdScalars& s, bool first);

/// out[i] = (slots[0][at + i] + slots[1][at + i] + ... + slots[world-1][at + i]) / world for i
/// in [0, n), summed in slot order.
void averageInto(float* out, const float* const* slots, int world, std::size_t at, std::size_t n);

/// Elements [lo, hi) of every slot become their average over the slots (averageInto).
void averageIntoSlots(float* const* slots, int world, std::size_t lo, std::size_t hi);

/// SGD's update of hi - lo elements at `w` and `buf` (null without momentum) with the
/// average over the slots of elements [lo, hi) as the gradient: averageInto and sgdUpdate in
/// blocks that stay in L1, so the averaged gradient is never written to memory. Each slot's
/// [lo, hi) is zeroed once read, for the next step's backward to accumulate into: the
/// ranks' own zero_grad would be another pass over all of their gradients (Strategy::zeroGradients).
void averageThenSgd(float* w, float* buf, float* const* slots, int world, std::size_t lo, std::size_t hi,
                    const SgdScalars& s, bool first);

/// The same with the sum over the parts (parts[0] + parts[1] + ..., in that order) as the
/// gradient, and each of parts[1..count-1] zeroed over [lo, hi) once read: DataParallel's
/// step, where each lane's gradient is already weighted by its share of the batch.
void sumThenSgd(float* w, float* buf, float* const* parts, int count, std::size_t lo, std::size_t hi,
                const SgdScalars& s, bool first);

}  // namespace ptw::engine
