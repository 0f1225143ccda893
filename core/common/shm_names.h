// SPDX-License-Identifier: GPL-3.0-or-later
// Names of a run's POSIX shared-memory segments (/dev/shm), shared by the ranks that make
// them (core/engine) and the launcher that removes them after the run (core/launch).
#pragma once

#include <string>

namespace ptw::core {

/// What a run's ranks may share a segment for: DDP over shared memory, the process pool.
inline constexpr const char* kSharedSegmentUses[] = {"ddp", "pool"};

/// The segment of the run whose ranks were given `port` (Note [Local rendezvous]), for `use`.
inline std::string sharedSegmentName(int port, const std::string& use) {
  return "/ptw-" + std::to_string(port) + "-" + use;
}

}  // namespace ptw::core
