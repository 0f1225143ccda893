// SPDX-License-Identifier: GPL-3.0-or-later
// ptw-worker: one rank of a run (see core/engine/worker.h).
#include "engine/worker.h"

int main(int argc, char** argv) { return ptw::engine::workerMain(argc, argv); }
