// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/model.h"

#include <torch/script.h>

#include <sstream>
#include <unordered_set>

#include "common/error.h"

namespace ptw::engine {
namespace {

// Note [Gradients by hand]
// A network that is a chain of Linear layers, with ReLU, Tanh or GELU between them (the
// linear and mlp kinds), is trained on the CPU without autograd. The forward pass calls what
// the modules call and keeps what autograd would save (each layer's input, each activation's
// output or input); the backward pass calls the kernels autograd's formulas call, in its
// order: nll_loss's and log_softmax's backward (or mse_loss's), then per layer the
// activation's *_backward, the weight's product as mm_mat2_backward forms it (grad^T x),
// the bias's column sum and the input's product (grad W). Gradients are added into .grad in
// place, as AccumulateGrad adds into a .grad that exists, so strategies whose .grad are views
// of shared memory find them there; the weight's product goes straight in (addmm_) instead
// of into a new tensor that is then added. Into zeroed or new gradients the result is
// autograd's to the bit; into gradients that already hold a micro-batch's, addmm_ adds
// inside the product where autograd adds the finished one, which can round differently.
// What is saved is autograd's bookkeeping (recording the graph, the engine's task and queue,
// a node per operation) and that temporary: most of a small model's step, and a noticeable
// share of the mlp's (BENCHMARKS.md).
// test_workload checks the gradients against autograd's. Left to autograd: CUDA tensors
// (not yet run on a GPU by hand), autocast, DDP over Gloo or NCCL (its buckets start from
// autograd's hooks), cnn and TorchScript models, frozen layers, and inputs or targets whose
// type or shape autograd would have to convert or broadcast. The worker flag --gradients
// autograd turns it off, to compare.
enum class Activation { None, Relu, Tanh, Gelu };

struct DenseLayer {
  torch::nn::Linear linear;
  Activation after = Activation::None;
  std::string geluApproximate;
};

// The layers of `net` if it is Linear (activation? Linear)*, else none.
std::vector<DenseLayer> denseChain(const torch::nn::Sequential& net) {
  std::vector<DenseLayer> chain;
  for (const auto& child : net->children()) {
    if (auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(child)) {
      for (const auto& p : linear->parameters())
        if (!p.requires_grad()) return {};  // a frozen layer: autograd gives it no gradient
      chain.push_back({torch::nn::Linear(linear), Activation::None, ""});
      continue;
    }
    if (chain.empty() || chain.back().after != Activation::None) return {};
    if (std::dynamic_pointer_cast<torch::nn::ReLUImpl>(child)) {
      chain.back().after = Activation::Relu;
    } else if (std::dynamic_pointer_cast<torch::nn::TanhImpl>(child)) {
      chain.back().after = Activation::Tanh;
    } else if (auto gelu = std::dynamic_pointer_cast<torch::nn::GELUImpl>(child)) {
      chain.back().after = Activation::Gelu;
      chain.back().geluApproximate = gelu->options.approximate();
    } else {
      return {};
    }
  }
  if (chain.empty() || chain.back().after != Activation::None) return {};
  return chain;
}

class SequentialModel final : public Model {
 public:
  explicit SequentialModel(torch::nn::Sequential net) : m_net(std::move(net)), m_chain(denseChain(m_net)) {}
  torch::Tensor forward(const torch::Tensor& x) override { return m_net->forward(x); }

  std::optional<double> gradientsByHand(const torch::Tensor& x, const torch::Tensor& y, double weight,
                                        bool classification) override {
    if (m_chain.empty() || !x.device().is_cpu() || x.dim() != 2) return std::nullopt;
    const auto& first = m_chain.front().linear->weight;
    if (x.scalar_type() != first.scalar_type()) return std::nullopt;  // autograd's casts are its own
    const auto outFeatures = m_chain.back().linear->options.out_features();
    const bool targetFits = classification
                                ? y.dim() == 1 && y.scalar_type() == torch::kLong
                                : y.dim() == 2 && y.size(1) == outFeatures && y.scalar_type() == x.scalar_type();
    if (!targetFits || y.size(0) != x.size(0)) return std::nullopt;  // autograd's path says what is wrong
    torch::NoGradGuard noGrad;
    const std::size_t n = m_chain.size();
    std::vector<torch::Tensor> inputs(n), saved(n);  // each layer's input; what its activation's backward reads
    torch::Tensor a = x;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& layer = m_chain[i];
      inputs[i] = a;
      const auto& w = layer.linear->weight;
      const auto& b = layer.linear->bias;
      a = b.defined() ? at::addmm(b, a, w.t()) : at::mm(a, w.t());
      switch (layer.after) {
        case Activation::Relu: a = saved[i] = at::relu(a); break;
        case Activation::Tanh: a = saved[i] = at::tanh(a); break;
        case Activation::Gelu:
          saved[i] = a;
          a = at::gelu(a, layer.geluApproximate);
          break;
        case Activation::None: break;
      }
    }
    const auto seed = at::scalar_tensor(weight, a.options());  // d(weight * loss) / d loss
    torch::Tensor loss, grad;
    if (classification) {
      auto logp = at::_log_softmax(a, 1, false);
      auto [mean, total] = at::nll_loss_forward(logp, y, {}, at::Reduction::Mean, -100);
      loss = mean;
      grad = at::_log_softmax_backward_data(at::nll_loss_backward(seed, logp, y, {}, at::Reduction::Mean, -100, total),
                                            logp, 1, a.scalar_type());
    } else {
      loss = at::mse_loss(a, y);
      grad = at::mse_loss_backward(seed, a, y, at::Reduction::Mean);
    }
    for (std::size_t i = n; i-- > 0;) {
      const auto& layer = m_chain[i];
      switch (layer.after) {
        case Activation::Relu: grad = at::threshold_backward(grad, saved[i], 0); break;
        case Activation::Tanh: grad = at::tanh_backward(grad, saved[i]); break;
        case Activation::Gelu: grad = at::gelu_backward(grad, saved[i], layer.geluApproximate); break;
        case Activation::None: break;
      }
      const auto& w = layer.linear->weight;
      const auto& b = layer.linear->bias;
      if (auto& g = w.mutable_grad(); g.defined())
        g.addmm_(grad.t(), inputs[i]);
      else
        g = at::mm(grad.t(), inputs[i]);
      if (b.defined()) {
        if (auto& g = b.mutable_grad(); g.defined())
          g.add_(grad.sum(0));
        else
          g = grad.sum(0);
      }
      if (i > 0) grad = at::mm(grad, w);
    }
    return loss.item<double>();
  }

  std::vector<torch::Tensor> parameters() override { return m_net->parameters(); }
  std::vector<torch::Tensor> buffers() override { return m_net->buffers(); }
  std::unique_ptr<Model> replicate(const torch::Device& device) const override {
    auto copy = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(m_net->clone(device));
    return std::make_unique<SequentialModel>(torch::nn::Sequential(copy));
  }
  void to(const torch::Device& device) override { m_net->to(device); }
  void setTraining(bool on) override { m_net->train(on); }
  void save(const std::string& path) override {
    std::vector<torch::Tensor> cpu;
    for (const auto& p : m_net->parameters()) cpu.push_back(p.detach().cpu());
    torch::save(cpu, path);
  }

 private:
  torch::nn::Sequential m_net;
  std::vector<DenseLayer> m_chain;  ///< empty where gradients are autograd's
};

class ScriptModel final : public Model {
 public:
  explicit ScriptModel(torch::jit::Module module) : m_module(std::move(module)) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    if (m_inputShape.empty() || x.dim() != 2) return m_module.forward({x}).toTensor();
    std::vector<std::int64_t> sizes{x.size(0)};
    sizes.insert(sizes.end(), m_inputShape.begin(), m_inputShape.end());
    return m_module.forward({x.view(sizes)}).toTensor();
  }
  void setInputShape(const std::vector<std::int64_t>& shape) override { m_inputShape = shape; }
  // A tied weight (one submodule used under two names) is listed once, as PyTorch's
  // Module.parameters() does; the module's own list holds it under each name, and an
  // optimizer given it twice would step it twice.
  std::vector<torch::Tensor> parameters() override {
    std::vector<torch::Tensor> out;
    std::unordered_set<const void*> seen;
    for (const auto& p : m_module.parameters())
      if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
    return out;
  }
  // A submodule used under two names lists its buffers once, as its parameters.
  std::vector<torch::Tensor> buffers() override {
    std::vector<torch::Tensor> out;
    std::unordered_set<const void*> seen;
    for (const auto& b : m_module.buffers())
      if (seen.insert(b.unsafeGetTensorImpl()).second) out.push_back(b);
    return out;
  }
  // Module::clone() copies a submodule used under two names twice, which would untie a tied
  // weight in the replica (and list more parameters than this model); the serialized form
  // records the submodule once, so a round trip through it keeps the replica's weights tied.
  std::unique_ptr<Model> replicate(const torch::Device& device) const override {
    std::stringstream bytes;
    m_module.save(bytes);
    auto copy = std::make_unique<ScriptModel>(torch::jit::load(bytes, device));
    copy->m_inputShape = m_inputShape;
    return copy;
  }
  void to(const torch::Device& device) override { m_module.to(device); }
  void setTraining(bool on) override { m_module.train(on); }
  void save(const std::string& path) override { m_module.save(path); }

 private:
  torch::jit::Module m_module;
  std::vector<std::int64_t> m_inputShape;  ///< empty: batches as the data holds them
};

torch::nn::AnyModule activation(const std::string& name) {
  if (name == "tanh") return torch::nn::AnyModule(torch::nn::Tanh());
  if (name == "gelu") return torch::nn::AnyModule(torch::nn::GELU());
  return torch::nn::AnyModule(torch::nn::ReLU());
}

}  // namespace

std::unique_ptr<Model> makeSequentialModel(torch::nn::Sequential net) {
  return std::make_unique<SequentialModel>(std::move(net));
}

std::unique_ptr<Model> makeModel(const core::ModelSpec& spec, std::uint64_t seed) {
  if (spec.kind == "torchscript") {
    torch::jit::Module module;
    try {
      module = torch::jit::load(spec.path);
    } catch (const c10::Error& e) {
      std::string what = e.what_without_backtrace();
      PTW_FAIL("model.path: cannot load TorchScript from \"", spec.path, "\": ", what.substr(0, what.find('\n')),
               " (make it in Python with torch.jit.script(model).save(path) or torch.jit.trace)");
    }
    module.train();
    auto model = std::make_unique<ScriptModel>(std::move(module));
    PTW_CHECK(!model->parameters().empty(), "model.path: \"", spec.path, "\" has no trainable parameters");
    return model;
  }
  torch::manual_seed(seed);
  torch::nn::Sequential net;
  if (spec.kind == "cnn") {
    // LeNet-5 for 1×28×28 input (padding 2 keeps the classic 32×32 geometry).
    net->push_back(torch::nn::Unflatten(torch::nn::UnflattenOptions(1, {1, 28, 28})));
    net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 6, 5).padding(2)));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::MaxPool2d(2));
    net->push_back(torch::nn::Conv2d(6, 16, 5));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::MaxPool2d(2));
    net->push_back(torch::nn::Flatten());
    net->push_back(torch::nn::Linear(16 * 5 * 5, 120));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::Linear(120, 84));
    net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::Linear(84, spec.outFeatures));
    return std::make_unique<SequentialModel>(net);
  }
  std::int64_t width = spec.inFeatures;
  if (spec.kind == "mlp") {
    for (auto h : spec.hidden) {
      net->push_back(torch::nn::Linear(width, h));
      net->push_back(activation(spec.activation));
      width = h;
    }
  } else {
    PTW_CHECK(spec.kind == "linear", "model.kind: unsupported \"", spec.kind, "\"");
  }
  net->push_back(torch::nn::Linear(width, spec.outFeatures));
  return std::make_unique<SequentialModel>(net);
}

}  // namespace ptw::engine
