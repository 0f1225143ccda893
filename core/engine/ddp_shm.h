// SPDX-License-Identifier: GPL-3.0-or-later
// DDP over shared memory (ddp_shm.cpp), as the DDP factory and its choice on CPU ranks
// (ddp.cpp, Note [Auto backend on CPU]) see it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "engine/strategy.h"

namespace ptw::engine {

/// Why DDP over shared memory cannot reduce `params` ("" when it can): it needs dense float32
/// CPU parameters, each listed once.
std::string shmRefusal(const std::vector<torch::Tensor>& params);

/// The algorithm over shared memory that trains `model` (Note [Chosen once]): one barrier for
/// a small model, else sharded SGD, else all-reduce. Throws ptw::Error naming
/// strategy.backend when shared memory cannot reduce the model.
std::unique_ptr<Strategy> makeShmDdp(const SyncContext& ctx, Model& model);

}  // namespace ptw::engine
