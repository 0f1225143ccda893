// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/strategy.h"

#include <cstdio>
#include <string>

#include "common/error.h"
#include "engine/compat.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/workload.h"

namespace ptw::engine {

namespace {
std::map<std::string, StrategyFactory>& registry() {
  static std::map<std::string, StrategyFactory> engines;
  return engines;
}
}  // namespace

StrategyRegistration::StrategyRegistration(const char* name, StrategyFactory factory) {
  registry().emplace(name, std::move(factory));
}

const std::map<std::string, StrategyFactory>& strategyRegistry() { return registry(); }

std::unique_ptr<Strategy> makeStrategy(const SyncContext& ctx) {
  const auto& reg = strategyRegistry();
  auto it = reg.find(ctx.profile.strategy.kind);
  PTW_CHECK(it != reg.end(), "strategy.kind: no engine for \"", ctx.profile.strategy.kind, "\"");
  auto s = it->second(ctx);
  s->setAutocast(ctx.profile.hyper.precision == "bf16");
  if (s->device().is_cuda())  // which GPU, as the engine will use it (strategy.gpus)
    std::fprintf(stderr, "[rank %d] device %s\n", ctx.rank, s->device().str().c_str());
  return s;
}

std::unique_ptr<Strategy> chooseFor(std::unique_ptr<Strategy> strategy, Model& model) {
  auto chosen = strategy->choose(model);
  if (!chosen) return strategy;
  chosen->setAutocast(strategy->autocast());
  chosen->setGradientsByHand(strategy->gradientsByHand());
  return chosen;
}

BatchPlan shardPlan(const core::Profile& p, std::int64_t samples, int rank, int world) {
  return [=](std::int64_t epoch) {
    return shardBatches(samplerOptions(p, samples, world, rank, epoch), p.hyper.batchSize);
  };
}

SamplerOptions samplerOptions(const core::Profile& p, std::int64_t samples, int world, int rank, std::int64_t epoch) {
  SamplerOptions o(samples, world, rank);
  o.seed = p.hyper.seed;
  o.epoch = epoch;
  o.shuffle = p.hyper.shuffle;
  o.dropLast = p.hyper.dropLast;
  return o;
}

torch::Device deviceFor(const core::Profile& p, int index) {
  if (p.strategy.device != "cuda") return torch::kCPU;
  const auto count = static_cast<int>(torch::cuda::device_count());
  PTW_CHECK(count > 0, core::kNoCudaDeviceMessage);
  const std::int64_t gpu = core::cudaIndexFor(p, index);
  const bool listed = !p.strategy.gpus.empty();
  PTW_CHECK(gpu < count, listed ? "strategy.gpus" : "strategy.device", ": rank/lane ", index,
            listed ? " is given cuda:" : " needs cuda:", gpu, " but this machine has ", count, " CUDA device(s)",
            listed ? " (cuda:0 to cuda:" + std::to_string(count - 1) + ")"
                   : "; lower strategy.ranks to " + std::to_string(count));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu));
}

double Strategy::backward(Model& model, const torch::Tensor& x, const torch::Tensor& y, double weight,
                          bool classification) {
  return lossAndGradients(model, x, y, weight, classification);
}

double Strategy::lossAndGradients(Model& model, const torch::Tensor& x, const torch::Tensor& y, double weight,
                                  bool classification) {
  if (!m_autocast && !m_needsAutograd && m_byHand) {
    if (auto loss = model.gradientsByHand(x, y, weight, classification)) {
      m_gradients = "by hand";
      return *loss;
    }
  }
  m_gradients = "autograd";
  torch::Tensor loss;
  {
    compat::CudaAutocastGuard autocast(m_autocast);
    loss = computeLoss(model.forward(x), y, classification);
  }
  if (weight == 1.0)
    loss.backward();  // no extra node in the graph for the usual step of one micro-batch
  else
    (loss * weight).backward();
  return loss.item<double>();
}

void Strategy::optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) {
  if (clipNorm > 0) {
    std::vector<torch::Tensor> params;
    for (const auto& group : optimizer.param_groups())
      params.insert(params.end(), group.params().begin(), group.params().end());
    torch::nn::utils::clip_grad_norm_(params, clipNorm);
  }
  optimizer.step();
}

}  // namespace ptw::engine
