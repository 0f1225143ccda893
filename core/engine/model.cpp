#include "engine/model.h"

#include <torch/script.h>

#include <sstream>
#include <unordered_set>

#include "common/error.h"

namespace ptw::engine {
namespace {

class SequentialModel final : public Model {
 public:
  explicit SequentialModel(torch::nn::Sequential net) : m_net(std::move(net)) {}
  torch::Tensor forward(const torch::Tensor& x) override { return m_net->forward(x); }
  std::vector<torch::Tensor> parameters() override { return m_net->parameters(); }
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
};

class ScriptModel final : public Model {
 public:
  explicit ScriptModel(torch::jit::Module module) : m_module(std::move(module)) {}
  torch::Tensor forward(const torch::Tensor& x) override { return m_module.forward({x}).toTensor(); }
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
  // Module::clone() copies a submodule used under two names twice, which would untie a tied
  // weight in the replica (and list more parameters than this model); the serialized form
  // records the submodule once, so a round trip through it keeps the replica's weights tied.
  std::unique_ptr<Model> replicate(const torch::Device& device) const override {
    std::stringstream bytes;
    m_module.save(bytes);
    return std::make_unique<ScriptModel>(torch::jit::load(bytes, device));
  }
  void to(const torch::Device& device) override { m_module.to(device); }
  void setTraining(bool on) override { m_module.train(on); }
  void save(const std::string& path) override { m_module.save(path); }

 private:
  torch::jit::Module m_module;
};

torch::nn::AnyModule activation(const std::string& name) {
  if (name == "tanh") return torch::nn::AnyModule(torch::nn::Tanh());
  if (name == "gelu") return torch::nn::AnyModule(torch::nn::GELU());
  return torch::nn::AnyModule(torch::nn::ReLU());
}

}  // namespace

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
