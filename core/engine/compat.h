// The one place that knows how the LibTorch C++ API differs between 1.13 (Debian) and
// 2.x (what most users download): in 2.x ProcessGroupGloo/NCCL became Backends behind a
// ProcessGroup, and autocast takes a device type. Everything else in the engine uses
// these names.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(PTW_WITH_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ptw::engine::compat {

#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

inline c10::intrusive_ptr<Group> makeGloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                          std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  // Loopback only: a local run never listens on an outside interface.
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}

#if defined(PTW_WITH_CUDA) && defined(USE_C10D_NCCL)
inline c10::intrusive_ptr<Group> makeNccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                          std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
}
#endif

/// bf16 autocast on CUDA for the lifetime of the guard (the forward pass).
class CudaAutocastGuard {
 public:
  explicit CudaAutocastGuard(bool on) : m_on(on) {
    if (!m_on) return;
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
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
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4
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
