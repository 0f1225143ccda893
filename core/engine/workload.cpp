#include "engine/workload.h"

#include "common/error.h"

namespace ptw::engine {

Dataset makeDataset(const core::DataSpec& data, const core::ModelSpec& model) {
  torch::NoGradGuard noGrad;
  auto gen = at::detail::createCPUGenerator(data.seed);
  const auto n = data.samples, in = model.inFeatures, out = model.outFeatures;
  Dataset d;
  if (data.kind == "synthetic-regression") {
    // Inputs ~ N(0, 1); target = x·W + b + noise·N(0, 1), with W and b drawn from the same seed.
    d.x = torch::randn({n, in}, gen, torch::kFloat32);
    auto w = torch::randn({in, out}, gen, torch::kFloat32);
    auto b = torch::randn({out}, gen, torch::kFloat32);
    d.y = d.x.matmul(w) + b + data.noise * torch::randn({n, out}, gen, torch::kFloat32);
  } else if (data.kind == "synthetic-classification") {
    // Gaussian blobs: one centre per class, samples assigned round-robin then shuffled by the sampler.
    auto centres = 3.0 * torch::randn({out, in}, gen, torch::kFloat32);
    d.y = torch::arange(n, torch::kInt64).remainder(out);
    d.x = centres.index_select(0, d.y) + (1.0 + data.noise) * torch::randn({n, in}, gen, torch::kFloat32);
    d.classification = true;
  } else {
    PTW_FAIL("data.kind: unsupported \"", data.kind, "\"");
  }
  return d;
}

torch::nn::Sequential makeModel(const core::ModelSpec& spec, std::uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential net;
  std::int64_t width = spec.inFeatures;
  if (spec.kind == "mlp") {
    for (auto h : spec.hidden) {
      net->push_back(torch::nn::Linear(width, h));
      if (spec.activation == "tanh") net->push_back(torch::nn::Tanh());
      else if (spec.activation == "gelu") net->push_back(torch::nn::GELU());
      else net->push_back(torch::nn::ReLU());
      width = h;
    }
  } else {
    PTW_CHECK(spec.kind == "linear", "model.kind: unsupported \"", spec.kind, "\"");
  }
  net->push_back(torch::nn::Linear(width, spec.outFeatures));
  return net;
}

torch::Tensor computeLoss(const torch::Tensor& output, const torch::Tensor& target, bool classification) {
  return classification ? torch::nn::functional::cross_entropy(output, target)
                        : torch::mse_loss(output, target);
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const core::HyperSpec& h,
                                                       const std::vector<torch::Tensor>& params) {
  if (h.optimizer == "adam")
    return std::make_unique<torch::optim::Adam>(params,
                                                torch::optim::AdamOptions(h.lr).weight_decay(h.weightDecay));
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(h.lr).momentum(h.momentum).weight_decay(h.weightDecay));
}

}  // namespace ptw::engine
