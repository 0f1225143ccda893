#include "engine/workload.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "common/data_files.h"
#include "common/error.h"
#include "engine/compat.h"
#include "engine/model.h"

namespace ptw::engine {
namespace {

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Numeric CSV with a header row; features and target picked by column name.
void loadCsv(const core::DataSpec& spec, Dataset& d) {
  std::ifstream in(spec.path);
  PTW_CHECK(in, "data.path: cannot open \"", spec.path, "\" (", std::strerror(errno), ")");
  std::string line;
  PTW_CHECK(std::getline(in, line), "data.path: \"", spec.path, "\" is empty; expected a header row of column names");
  auto header = core::splitCsvLine(line);
  std::map<std::string, std::size_t> column;
  for (std::size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  auto find = [&](const std::string& name, const char* field) {
    auto it = column.find(name);
    PTW_CHECK(it != column.end(), core::missingColumnMessage(field, name, spec.path, header));
    return it->second;
  };
  const std::size_t target = find(spec.target, "data.target");
  std::vector<std::size_t> features;
  if (spec.features.empty()) {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (i != target) features.push_back(i);
  } else {
    for (const auto& f : spec.features) features.push_back(find(f, "data.features"));
  }
  PTW_CHECK(!features.empty(), "data.features: \"", spec.path, "\" has no column besides the target");

  std::vector<float> xs, ys;
  std::int64_t rows = 0;
  for (std::int64_t lineNo = 2; std::getline(in, line); ++lineNo) {
    if (trim(line).empty()) continue;
    if (spec.samples > 0 && rows == spec.samples) break;
    auto cells = core::splitCsvLine(line);
    PTW_CHECK(cells.size() == header.size(), "data.path: \"", spec.path, "\" line ", lineNo, ": ", cells.size(),
              " cells, expected ", header.size(), " (one per header column)");
    auto number = [&](std::size_t c) {
      const std::string& cell = cells[c];
      char* end = nullptr;
      errno = 0;
      double v = std::strtod(cell.c_str(), &end);
      PTW_CHECK(!cell.empty() && end == cell.c_str() + cell.size() && errno == 0 && std::isfinite(v), "data.path: \"",
                spec.path, "\" line ", lineNo, ", column \"", header[c], "\": expected a number, got \"", cell, "\"");
      return v;
    };
    for (auto c : features) xs.push_back(static_cast<float>(number(c)));
    double t = number(target);
    if (spec.task == "classification")
      PTW_CHECK(t >= 0 && std::floor(t) == t, "data.path: \"", spec.path, "\" line ", lineNo, ", column \"",
                header[target], "\": a class label must be an integer >= 0, got ", cells[target]);
    ys.push_back(static_cast<float>(t));
    ++rows;
  }
  PTW_CHECK(rows > 0, "data.path: \"", spec.path, "\" has a header but no data rows");
  const auto nf = static_cast<std::int64_t>(features.size());
  d.x = torch::from_blob(xs.data(), {rows, nf}, torch::kFloat32).clone();
  auto y = torch::from_blob(ys.data(), {rows}, torch::kFloat32).clone();
  d.classification = spec.task == "classification";
  d.y = d.classification ? y.to(torch::kInt64) : y.unsqueeze(1);
}

std::uint32_t bigEndian32(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
}

std::vector<unsigned char> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PTW_CHECK(in, "data.path: cannot open \"", path, "\" (", std::strerror(errno),
            "); an mnist folder holds train-images-idx3-ubyte and train-labels-idx1-ubyte");
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// The IDX format of the MNIST files: a big-endian magic (0x00000800 | dims), the sizes, the bytes.
void loadMnist(const core::DataSpec& spec, Dataset& d) {
  const std::string imagesPath = spec.path + "/train-images-idx3-ubyte";
  const std::string labelsPath = spec.path + "/train-labels-idx1-ubyte";
  auto images = readFile(imagesPath), labels = readFile(labelsPath);
  PTW_CHECK(images.size() >= 16 && bigEndian32(images.data()) == 0x803, "data.path: \"", imagesPath,
            "\": bad magic number, expected 0x00000803 (IDX unsigned-byte images, 3 dimensions)");
  PTW_CHECK(labels.size() >= 8 && bigEndian32(labels.data()) == 0x801, "data.path: \"", labelsPath,
            "\": bad magic number, expected 0x00000801 (IDX unsigned-byte labels, 1 dimension)");
  const std::int64_t n = bigEndian32(images.data() + 4), rows = bigEndian32(images.data() + 8),
                     cols = bigEndian32(images.data() + 12), nLabels = bigEndian32(labels.data() + 4);
  PTW_CHECK(rows == 28 && cols == 28, "data.path: \"", imagesPath, "\": images are ", rows, "×", cols,
            ", expected 28×28");
  PTW_CHECK(n == nLabels, "data.path: ", n, " images but ", nLabels, " labels");
  const auto need = static_cast<std::size_t>(16 + n * 784);
  PTW_CHECK(images.size() >= need, "data.path: \"", imagesPath, "\" is truncated: ", n, " images need ", need,
            " bytes, the file has ", images.size());
  PTW_CHECK(labels.size() >= static_cast<std::size_t>(8 + n), "data.path: \"", labelsPath, "\" is truncated: ", n,
            " labels need ", 8 + n, " bytes, the file has ", labels.size());
  const std::int64_t use = spec.samples > 0 ? std::min(spec.samples, n) : n;
  auto x = torch::from_blob(images.data() + 16, {use, 784}, torch::kUInt8).to(torch::kFloat32);
  d.x = (x / 255.0 - 0.1307) / 0.3081;  // the usual MNIST normalisation
  d.y = torch::from_blob(labels.data() + 8, {use}, torch::kUInt8).to(torch::kInt64);
  d.classification = true;
  auto maxLabel = d.y.max().item<std::int64_t>();
  PTW_CHECK(maxLabel <= 9, "data.path: \"", labelsPath, "\": label ", maxLabel, " out of range 0-9");
}

}  // namespace

Dataset makeDataset(const core::DataSpec& data, const core::ModelSpec& model) {
  torch::NoGradGuard noGrad;
  Dataset d;
  const std::string missing = core::dataFileProblem(data);  // the launcher's check, in case the files went since
  PTW_CHECK(missing.empty(), missing);
  if (data.kind == "csv") {
    loadCsv(data, d);
  } else if (data.kind == "mnist") {
    loadMnist(data, d);
  } else {
    auto gen = at::detail::createCPUGenerator(data.seed);
    const auto n = data.samples, in = model.inFeatures, out = model.outFeatures;
    if (data.kind == "synthetic-regression") {
      // Inputs ~ N(0, 1); target = x·W + b + noise·N(0, 1), with W and b drawn from the same seed.
      d.x = torch::randn({n, in}, gen, torch::kFloat32);
      auto w = torch::randn({in, out}, gen, torch::kFloat32);
      auto b = torch::randn({out}, gen, torch::kFloat32);
      d.y = d.x.matmul(w) + b + data.noise * torch::randn({n, out}, gen, torch::kFloat32);
    } else if (data.kind == "synthetic-classification") {
      // Gaussian blobs: one centre per class, samples assigned round-robin, shuffled by the sampler.
      auto centres = 3.0 * torch::randn({out, in}, gen, torch::kFloat32);
      d.y = torch::arange(n, torch::kInt64).remainder(out);
      d.x = centres.index_select(0, d.y) + (1.0 + data.noise) * torch::randn({n, in}, gen, torch::kFloat32);
      d.classification = true;
    } else {
      PTW_FAIL("data.kind: unsupported \"", data.kind, "\"");
    }
  }
  const std::int64_t total = d.x.size(0);
  const auto held = static_cast<std::int64_t>(static_cast<double>(total) * data.valFraction);
  if (held > 0) {
    d.valX = d.x.narrow(0, total - held, held);
    d.valY = d.y.narrow(0, total - held, held);
    d.x = d.x.narrow(0, 0, total - held);
    d.y = d.y.narrow(0, 0, total - held);
  }
  PTW_CHECK(d.size() >= 1, "data.val_fraction: ", data.valFraction, " leaves no training samples out of ", total);
  return d;
}

void checkWorkload(Model& model, const Dataset& data, const core::Profile& profile) {
  std::ostringstream have;
  have << data.x.sizes();
  PTW_CHECK(profile.model.kind == "torchscript" || data.x.size(1) == profile.model.inFeatures,
            "model.in_features: the data has ", data.x.size(1), " features per sample (inputs ", have.str(),
            "), the model expects ", profile.model.inFeatures, "; set model.in_features to ", data.x.size(1));
  const std::int64_t world = profile.strategy.ranks;
  PTW_CHECK(data.size() >= world, "strategy.ranks: more ranks (", world, ") than training samples (", data.size(),
            "); lower strategy.ranks or use more data");
  torch::NoGradGuard noGrad;
  auto x = data.x.narrow(0, 0, std::min<std::int64_t>(2, data.size()));
  auto y = data.y.narrow(0, 0, x.size(0));
  torch::Tensor out;
  model.setTraining(false);  // a forward in training mode would move BatchNorm's buffers (Note [Buffers])
  try {
    out = model.forward(x);
    model.setTraining(true);
  } catch (const c10::Error& e) {
    model.setTraining(true);
    std::string what = e.what_without_backtrace();
    PTW_FAIL("model: forward on inputs of shape ", have.str(), " failed: ", what.substr(0, what.find('\n')),
             "; check model.in_features and the model's expected input");
  }
  std::ostringstream got, want;
  got << out.sizes();
  if (data.classification) {
    const auto classes = data.y.max().item<std::int64_t>() + 1;
    PTW_CHECK(out.dim() == 2 && out.size(1) >= classes, "model: output shape ", got.str(),
              " does not fit cross-entropy over ", classes, " classes; the model must output [batch, ", classes,
              "] (model.out_features = ", classes, ")");
  } else {
    want << y.sizes();
    PTW_CHECK(out.sizes() == y.sizes(), "model: output shape ", got.str(), " does not fit the target shape ",
              want.str(), " of the MSE loss; set model.out_features to ", y.size(1));
  }
}

torch::Tensor computeLoss(const torch::Tensor& output, const torch::Tensor& target, bool classification) {
  return classification ? torch::nn::functional::cross_entropy(output, target) : torch::mse_loss(output, target);
}

torch::Tensor* findMomentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& state = optimizer.state();
  auto it = state.find(compat::optimizerStateKey(param));
  if (it == state.end()) return nullptr;
  auto& buffer = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
  PTW_CHECK(buffer.is_contiguous() && buffer.scalar_type() == torch::kFloat && buffer.numel() == param.numel(),
            "optimizer state: a momentum buffer does not match its parameter (", buffer.sizes(), " against ",
            param.sizes(), ")");
  return &buffer;
}

torch::Tensor& addMomentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param, torch::Tensor buffer) {
  auto st = std::make_unique<torch::optim::SGDParamState>();
  st->momentum_buffer(std::move(buffer));
  auto& added = *optimizer.state().insert_or_assign(compat::optimizerStateKey(param), std::move(st)).first->second;
  return static_cast<torch::optim::SGDParamState&>(added).momentum_buffer();
}

float* momentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param, bool& first) {
  torch::Tensor* b = findMomentumBuffer(optimizer, param);
  first = b == nullptr;
  if (first)
    b = &addMomentumBuffer(optimizer, param, torch::empty_like(param, torch::MemoryFormat::Contiguous).detach());
  return b->data_ptr<float>();
}

std::vector<SgdPiece> sgdPieces(torch::optim::SGD& sgd, const std::function<bool(torch::Tensor&)>& take) {
  std::vector<SgdPiece> pieces;
  std::size_t at = 0;
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!take(p)) continue;
      SgdPiece piece;
      piece.w = p.data_ptr<float>();
      piece.at = at;
      piece.n = static_cast<std::size_t>(p.numel());
      piece.scalars = sgdScalars(o);
      if (o.momentum() != 0) piece.buf = momentumBuffer(sgd, p, piece.first);
      at += piece.n;
      pieces.push_back(piece);
    }
  }
  return pieces;
}

SgdScalars sgdScalars(const torch::optim::SGDOptions& o) {
  SgdScalars s;
  s.lr = static_cast<float>(o.lr());
  s.momentum = static_cast<float>(o.momentum());
  s.decay = static_cast<float>(o.weight_decay());
  s.keep = static_cast<float>(1 - o.dampening());
  s.nesterov = o.nesterov();
  return s;
}

// Note [Fused SGD]
// torch::optim::SGD spends about ten small operator calls per parameter and step (each
// dispatched, some wrapping the scalar into a tensor and converting it), which on a small
// model is a noticeable share of the whole step. For the common case (dense float32 parameters and
// gradients on the CPU, contiguous) this does the same arithmetic in one pass over each
// tensor (sgdUpdate, kernels.h), in float like the kernels do, and keeps its momentum buffers where SGD does
// (state_, one SGDParamState per parameter), so checkpoints load into either. Anything
// else (CUDA, other dtypes, sparse gradients) takes SGD's own step. test_workload holds
// it to torch::optim::SGD, option by option. DDP over shared memory runs the same update on
// its share of the parameters (Note [Sharded SGD step]).
namespace {

class FusedSgd final : public torch::optim::SGD {
 public:
  using SGD::SGD;

  torch::Tensor step(LossClosure closure = nullptr) override {
    if (closure || !fusable()) return SGD::step(std::move(closure));
    for (auto& group : param_groups_) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      for (auto& p : group.params()) {
        const auto& grad = p.grad();
        if (!grad.defined()) continue;
        float* w = p.data_ptr<float>();
        const float* g = grad.data_ptr<float>();
        const std::int64_t n = p.numel();
        bool first = false;
        float* buf = o.momentum() != 0 ? momentumBuffer(*this, p, first) : nullptr;
        sgdUpdate(w, buf, g, n, sgdScalars(o), first);
      }
    }
    return {};
  }

 private:
  bool fusable() const {
    for (const auto& group : param_groups_)
      for (const auto& p : group.params()) {
        const auto& g = p.grad();
        if (!p.device().is_cpu() || p.scalar_type() != torch::kFloat || !p.is_contiguous()) return false;
        if (g.defined() &&
            (g.is_sparse() || g.scalar_type() != torch::kFloat || !g.is_contiguous() || g.numel() != p.numel()))
          return false;
      }
    return true;
  }
};

}  // namespace

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const core::HyperSpec& h,
                                                       const std::vector<torch::Tensor>& params) {
  if (h.optimizer == "adam")
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(h.lr).weight_decay(h.weightDecay));
  if (h.optimizer == "adamw")
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(h.lr).weight_decay(h.weightDecay));
  return std::make_unique<FusedSgd>(
      params, torch::optim::SGDOptions(h.lr).momentum(h.momentum).nesterov(h.nesterov).weight_decay(h.weightDecay));
}

double learningRate(const core::HyperSpec& h, std::int64_t step) {
  double lr = h.lr;
  if (h.schedule == "step") {
    lr *= std::pow(h.gamma, static_cast<double>(step / h.stepSize));
  } else if (h.schedule == "cosine" && h.maxSteps > 0) {
    const double t = std::min(1.0, static_cast<double>(step) / static_cast<double>(h.maxSteps));
    lr *= 0.5 * (1.0 + std::cos(M_PI * t));
  }
  if (step < h.warmupSteps) lr *= static_cast<double>(step + 1) / static_cast<double>(h.warmupSteps);
  return lr;
}

}  // namespace ptw::engine
