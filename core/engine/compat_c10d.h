// SPDX-License-Identifier: GPL-3.0-or-later
// How c10d differs between LibTorch 1.13 and 2.x (compat.h has the rest): in 2.x
// ProcessGroupGloo/NCCL became Backends behind a ProcessGroup. The engine talks to the
// backend directly, under the name Group.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "engine/compat.h"
// PTW_WITH_GLOO: CMake found the gloo headers (pip wheels of torch 2.x ship without them);
// USE_C10D_GLOO: LibTorch was built with Gloo.
#if defined(PTW_WITH_GLOO) && defined(USE_C10D_GLOO)
#define PTW_HAVE_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#else
#define PTW_HAVE_GLOO 0
#endif
// PTW_WITH_NCCL: CMake found nccl.h; USE_C10D_NCCL: LibTorch was built with NCCL.
#if defined(PTW_WITH_NCCL) && defined(USE_C10D_NCCL)
#define PTW_HAVE_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define PTW_HAVE_NCCL 0
#endif

namespace ptw::engine::compat {

#if PTW_TORCH_AT_LEAST(2, 0)
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

#if PTW_HAVE_GLOO
// Note [Gloo interface]
// A local run (master 127.0.0.1 or localhost) binds Gloo to loopback: it never listens on an
// outside interface. A run whose master is another address spans hosts: Gloo then uses the
// interface GLOO_SOCKET_IFNAME names (the first of a comma-separated list, as Python's
// binding reads it), else the address the host's name resolves to, which Debian's
// /etc/hosts maps to 127.0.1.1: set GLOO_SOCKET_IFNAME there (docs/multihost.md).
inline c10::intrusive_ptr<Group> makeGloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                          std::chrono::milliseconds timeout,
                                          const std::string& masterAddr = "127.0.0.1") {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (masterAddr == "127.0.0.1" || masterAddr == "localhost")
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else if (ifname && *ifname)
    opts->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForInterface(std::string(ifname).substr(0, std::strcspn(ifname, ","))));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}
#endif

namespace detail {
template <class G>
auto shutdownIfAble(G& group, int) -> decltype(group.shutdown(), void()) {
  group.shutdown();
}
template <class G>
void shutdownIfAble(G&, long) {}
}  // namespace detail

/// Ends the group's communicators at the end of a run: NCCL's Backend in 2.x expects this
/// before it is destroyed (and warns at exit otherwise); versions and backends without a
/// shutdown() need nothing.
inline void shutdown(Group& group) {
#if PTW_HAVE_NCCL
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(&group)) detail::shutdownIfAble(*nccl, 0);
#else
  (void)group;
#endif
}

#if PTW_HAVE_NCCL
inline c10::intrusive_ptr<Group> makeNccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                          std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
}
#endif

}  // namespace ptw::engine::compat
