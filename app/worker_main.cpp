// SPDX-License-Identifier: GPL-3.0-or-later
// ptw-worker: one rank of a run (see core/engine/worker.h), or with --agent the host agent that
// starts every rank of its host for ptw's ssh launcher (Note [Host agent] in launch/host_agent.h).
#include <cstdio>
#include <cstring>

#include "common/version.h"
#include "engine/worker.h"
#include "launch/host_agent.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--agent") == 0) {
    if (argc == 3 && std::strcmp(argv[2], "--version") == 0) {  // what ptw's hosts check asks
      std::printf("ptw-worker %s\n", ptw::kVersion);
      return 0;
    }
    if (argc != 2) {
      std::fprintf(stderr, "error: ptw-worker --agent takes no other argument but --version\n");
      return 2;
    }
    return ptw::core::hostAgentMain(0, 1, 2);
  }
  return ptw::engine::workerMain(argc, argv);
}
