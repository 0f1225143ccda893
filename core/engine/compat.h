// SPDX-License-Identifier: GPL-3.0-or-later
// The one place that knows how the LibTorch C++ API differs between 1.13 (Debian) and
// 2.x (what most users download): autocast takes a device type, the optimizer's state is
// keyed by the parameter's TensorImpl rather than a string of its address, and (in
// compat_c10d.h) ProcessGroupGloo/NCCL became Backends behind a ProcessGroup. Everything
// else in the engine uses these names.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>

/// True when the LibTorch being compiled against is version major.minor or later.
#define PTW_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ptw::engine::compat {

/// The key of a parameter's entry in `Optimizer::state()`: a string of the TensorImpl's
/// address in 1.13, the TensorImpl pointer itself in later versions.
using OptimizerStateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

template <class Key = OptimizerStateKey>  // a template, so that only the branch taken is compiled
Key optimizerStateKey(const torch::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // what 1.13's c10::guts::to_string(pointer) writes
    key << static_cast<const void*>(param.unsafeGetTensorImpl());
    return key.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

/// bf16 autocast on CUDA for the lifetime of the guard (the forward pass).
class CudaAutocastGuard {
 public:
  explicit CudaAutocastGuard(bool on) : m_on(on) {
    if (!m_on) return;
#if PTW_TORCH_AT_LEAST(2, 4)
    m_was = at::autocast::is_autocast_enabled(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    m_was = at::autocast::is_enabled();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
#endif
  }
  ~CudaAutocastGuard() {
    if (!m_on) return;
#if PTW_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_enabled(at::kCUDA, m_was);
#else
    at::autocast::set_enabled(m_was);
#endif
    at::autocast::clear_cache();
  }
  CudaAutocastGuard(const CudaAutocastGuard&) = delete;
  CudaAutocastGuard& operator=(const CudaAutocastGuard&) = delete;

 private:
  bool m_on;
  bool m_was = false;
};

}  // namespace ptw::engine::compat
