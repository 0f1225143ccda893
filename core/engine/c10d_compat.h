// The one place that knows how the c10d C++ API differs between LibTorch 1.13 (Debian)
// and 2.x: in 2.x ProcessGroupGloo/NCCL became Backends behind a ProcessGroup, and the
// work handle moved to c10d::Work. Everything else in the engine uses these aliases.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(PTW_WITH_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ptw::engine::c10dcompat {

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

}  // namespace ptw::engine::c10dcompat
