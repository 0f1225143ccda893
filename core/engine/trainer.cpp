// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "common/error.h"
#include "engine/compat.h"
#ifdef PTW_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ptw::engine {
namespace {
using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

torch::Tensor scalar(std::int64_t v) { return torch::tensor(v, torch::kInt64); }

// Rows `index` of `from`. A contiguous CPU tensor is gathered with one memcpy a row into
// `into`, which is kept between steps (the step before has finished its backward by
// then); anything else through index_select. `pinned` allocates `into` in pinned memory.
torch::Tensor gatherRows(const torch::Tensor& from, const std::vector<std::int64_t>& index, torch::Tensor& into,
                         bool pinned = false) {
  const auto n = static_cast<std::int64_t>(index.size());
  if (!from.device().is_cpu() || !from.is_contiguous() || from.dim() == 0 || from.size(0) == 0)
    return from.index_select(0, torch::from_blob(const_cast<std::int64_t*>(index.data()), {n}, torch::kInt64));
  if (!into.defined() || into.size(0) != n || into.scalar_type() != from.scalar_type()) {
    auto sizes = from.sizes().vec();
    sizes[0] = n;
    into = torch::empty(sizes, from.options().pinned_memory(pinned));
  }
  const std::int64_t rows = from.size(0);
  const auto rowBytes = static_cast<std::size_t>(from.numel() / rows) * from.element_size();
  const auto* src = static_cast<const char*>(from.data_ptr());
  auto* dst = static_cast<char*>(into.data_ptr());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t row = index[static_cast<std::size_t>(i)];
    PTW_CHECK(row >= 0 && row < rows, "batch index ", row, " out of range 0..", rows - 1);
    std::memcpy(dst + static_cast<std::size_t>(i) * rowBytes, src + static_cast<std::size_t>(row) * rowBytes, rowBytes);
  }
  return into;
}
}  // namespace

std::int64_t memoryBytes(const torch::Device& device) {
#ifdef PTW_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    // Index 0 is StatType::AGGREGATE (all pools), whichever namespace the enum lives in (it moved in 2.x).
    return stats.allocated_bytes[0].current;
  }
#endif
  return device.is_cpu() ? residentBytes() : 0;
}

std::int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
}

Trainer::Trainer(TrainerOptions options, std::unique_ptr<Strategy> strategy, RecordSink sink)
    : m_options(std::move(options)),
      m_profile(m_options.profile),
      m_strategy(std::move(strategy)),
      m_sink(std::move(sink)),
      m_data(makeDataset(m_profile.data, m_profile.model)),
      m_model(makeModel(m_profile.model, m_profile.hyper.seed)) {
  m_model->setInputShape(m_data.sampleShape);
  checkWorkload(*m_model, m_data, m_profile);
  m_strategy = chooseFor(std::move(m_strategy), *m_model);
  m_plan = m_options.plan ? m_options.plan : m_strategy->plan(m_profile, m_data.size());
  m_model->to(m_strategy->device());
  m_optimizer = makeOptimizer(m_profile.hyper, m_model->parameters());
  if (!m_profile.run.resumeFrom.empty()) loadCheckpoint(m_profile.run.resumeFrom);
  m_strategy->attach(*m_model);
  if (m_profile.run.loaderThreads > 0)
    m_loader = std::make_unique<BatchLoader>(
        BatchLoaderOptions(m_profile.run.loaderThreads),
        [this](std::int64_t epoch, std::int64_t index, const std::vector<std::int64_t>& rows) {
          return loadBatch(epoch, index, rows);
        });
}

std::pair<double, double> Trainer::validate() {
  if (m_data.valSize() == 0) return {0.0, -1.0};
  torch::NoGradGuard noGrad;
  m_model->setTraining(false);
  const auto dev = m_strategy->device();
  double lossSum = 0, correct = 0;
  const std::int64_t n = m_data.valSize(), chunk = 1024;
  for (std::int64_t at = 0; at < n; at += chunk) {
    auto len = std::min(chunk, n - at);
    auto x = m_data.valX.narrow(0, at, len).to(dev);
    auto y = m_data.valY.narrow(0, at, len).to(dev);
    auto out = m_model->forward(x);
    lossSum += computeLoss(out, y, m_data.classification).item<double>() * static_cast<double>(len);
    if (m_data.classification) correct += out.argmax(1).eq(y).sum().item<double>();
  }
  m_model->setTraining(true);
  return {lossSum / static_cast<double>(n), m_data.classification ? correct / static_cast<double>(n) : -1.0};
}

void Trainer::saveCheckpoint(const std::string& path) {
  torch::serialize::OutputArchive archive;
  archive.write("libtorch_version", c10::IValue(std::string(TORCH_VERSION)));
  archive.write("step", scalar(m_step));
  archive.write("epoch", scalar(m_epoch));
  archive.write("batch_in_epoch", scalar(m_batchInEpoch));
  auto params = m_model->parameters();
  archive.write("parameter_count", scalar(static_cast<std::int64_t>(params.size())));
  for (std::size_t i = 0; i < params.size(); ++i)
    archive.write("parameter." + std::to_string(i), params[i].detach().cpu());
  // Note [Buffers]: rank 0's, which every rank's next forward starts from.
  auto buffers = m_model->buffers();
  archive.write("buffer_count", scalar(static_cast<std::int64_t>(buffers.size())));
  for (std::size_t i = 0; i < buffers.size(); ++i)
    archive.write("buffer." + std::to_string(i), buffers[i].detach().cpu(), /*is_buffer=*/true);
  torch::serialize::OutputArchive optimizer;
  m_optimizer->save(optimizer);
  archive.write("optimizer", optimizer);
  archive.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  const std::string tmp = path + ".tmp";
  archive.save_to(tmp);
  PTW_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "checkpoint: cannot write ", path);
  // The step beside it, for a supervisor that restarts from it without reading tensors.
  const std::string stepPath = path.substr(0, path.rfind('.')) + ".step";
  {
    std::ofstream out(stepPath + ".tmp", std::ios::trunc);
    out << m_step << "\n";
  }
  std::rename((stepPath + ".tmp").c_str(), stepPath.c_str());
}

void Trainer::loadCheckpoint(const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    PTW_FAIL("run.resume_from: cannot read checkpoint \"", path, "\": ", what.substr(0, what.find('\n')));
  }
  // The optimizer's state is saved in LibTorch's own layout, which changed between versions
  // (1.13 keys it by a string, 2.x by number): a checkpoint resumes only under the LibTorch
  // major.minor that wrote it. One without the stamp is older than the stamp, from the only
  // LibTorch ptw built on then: 1.13.
  c10::IValue written;
  const std::string was =
      archive.try_read("libtorch_version", written) && written.isString() ? written.toStringRef() : "1.13";
  auto majorMinor = [](const std::string& version) {  // "2.11.0a0+git1.2" -> "2.11"
    const auto first = version.find('.');
    return first == std::string::npos ? version : version.substr(0, version.find_first_not_of("0123456789", first + 1));
  };
  const std::string now = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  PTW_CHECK(majorMinor(was) == now, "run.resume_from: \"", path, "\" was written by a ptw built on LibTorch ", was,
            ", this one is built on ", TORCH_VERSION, "; resume it with a build on LibTorch ", majorMinor(was),
            " (the optimizer state's layout differs between them)");
  auto read = [&](const char* key) {
    torch::Tensor t;
    archive.read(key, t);
    return t.item<std::int64_t>();
  };
  auto params = m_model->parameters();
  const auto count = read("parameter_count");
  PTW_CHECK(count == static_cast<std::int64_t>(params.size()), "run.resume_from: \"", path, "\" holds ", count,
            " parameter tensors, this model has ", params.size(), "; was it written for another model?");
  torch::NoGradGuard noGrad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    torch::Tensor t;
    archive.read("parameter." + std::to_string(i), t);
    PTW_CHECK(t.sizes() == params[i].sizes(), "run.resume_from: parameter ", i, " has another shape in \"", path,
              "\"; was it written for another model?");
    params[i].copy_(t);
  }
  // A checkpoint older than buffer_count holds none: the model keeps its initial buffers.
  auto buffers = m_model->buffers();
  torch::Tensor bufferCount;
  if (archive.try_read("buffer_count", bufferCount)) {
    PTW_CHECK(bufferCount.item<std::int64_t>() == static_cast<std::int64_t>(buffers.size()), "run.resume_from: \"",
              path, "\" holds ", bufferCount.item<std::int64_t>(), " buffers, this model has ", buffers.size(),
              "; was it written for another model?");
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      torch::Tensor t;
      archive.read("buffer." + std::to_string(i), t, /*is_buffer=*/true);
      PTW_CHECK(t.sizes() == buffers[i].sizes() && t.scalar_type() == buffers[i].scalar_type(),
                "run.resume_from: buffer ", i, " has another shape or type in \"", path,
                "\"; was it written for another model?");
      buffers[i].copy_(t);
    }
  }
  torch::serialize::InputArchive optimizer;
  archive.read("optimizer", optimizer);
  m_optimizer->load(optimizer);
  torch::Tensor rng;
  archive.read("rng", rng);
  auto generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(rng);
  m_step = read("step");
  m_epoch = read("epoch");
  m_batchInEpoch = read("batch_in_epoch");
}

std::int64_t Trainer::run(const std::atomic<bool>& stopRequested) {
  const auto& h = m_profile.hyper;
  const auto& opts = m_profile.run;
  std::shared_ptr<const Batches> next;  // the next epoch's plan, when the loader has it already
  for (;; ++m_epoch, m_batchInEpoch = 0) {
    if (h.epochs > 0 && m_epoch >= h.epochs) break;
    const auto batches = next ? std::move(next) : std::make_shared<const Batches>(m_plan(m_epoch));
    next.reset();
    if (m_loader) queueBatches(batches, next);
    if (batches->empty() || trainEpoch(*batches, stopRequested)) break;
  }
  m_strategy->finish();
  const bool primary = m_options.rank == 0;
  if (primary && (opts.evalEvery == 0 || m_step % opts.evalEvery != 0)) validateAndPublish();
  if (primary && !m_options.outDir.empty()) saveCheckpoint(checkpointPath());
  return m_step;
}

bool Trainer::trainEpoch(const Batches& batches, const std::atomic<bool>& stopRequested) {
  const auto& h = m_profile.hyper;
  const auto& opts = m_profile.run;
  const bool primary = m_options.rank == 0;
  while (m_batchInEpoch < static_cast<std::int64_t>(batches.size())) {
    if (h.maxSteps > 0 && m_step >= h.maxSteps) return true;
    const bool stop = trainStep(batches, stopRequested.load(std::memory_order_relaxed));
    if (primary && opts.evalEvery > 0 && m_step % opts.evalEvery == 0) validateAndPublish();
    if (primary && !m_options.outDir.empty() && opts.checkpointEvery > 0 && m_step % opts.checkpointEvery == 0)
      saveCheckpoint(checkpointPath());
    if (stop) return true;
  }
  return false;
}

bool Trainer::trainStep(const Batches& batches, bool localStop) {
  const auto& h = m_profile.hyper;
  StepTimes t;
  t.start = Clock::now();
  const double lr = learningRate(h, m_step);
  for (auto& group : m_optimizer->param_groups()) group.options().set_lr(lr);
  m_strategy->beginStep(localStop);
  m_strategy->zeroGradients(*m_optimizer);
  // The micro-batches of this step: `accumulate` of them, fewer at the end of an epoch.
  const std::int64_t micro = std::min(h.accumulate, static_cast<std::int64_t>(batches.size()) - m_batchInEpoch);
  std::int64_t stepSamples = 0;
  for (std::int64_t k = 0; k < micro; ++k)
    stepSamples += static_cast<std::int64_t>(batches[static_cast<std::size_t>(m_batchInEpoch + k)].size());
  double loss = 0;
  m_strategy->computeGradients([&] { loss = microBatches(batches, micro, stepSamples, t); });
  t.computed = Clock::now();
  StepState state{false, loss, stepSamples};
  const bool stop = m_strategy->reduce(*m_model, state);
  t.reduced = Clock::now();
  m_strategy->optimizerStep(*m_optimizer, h.clipNorm);
  t.stepped = Clock::now();
  m_batchInEpoch += micro;
  ++m_step;
  if (m_sink) publishStep(state, lr, t);
  return stop;
}

void Trainer::queueBatches(const std::shared_ptr<const Batches>& batches, std::shared_ptr<const Batches>& next) {
  // Within one run the queue already holds this epoch from here, queued with the one before.
  if (!m_loader->isNext(m_epoch, m_batchInEpoch)) {
    m_loader->clear();
    m_loader->queue(m_epoch, batches, std::min<std::int64_t>(m_batchInEpoch, batches->size()));
  }
  const auto epochs = m_profile.hyper.epochs;
  if (epochs > 0 && m_epoch + 1 >= epochs) return;
  next = std::make_shared<const Batches>(m_plan(m_epoch + 1));
  m_loader->queue(m_epoch + 1, next);
}

LoadedBatch Trainer::loadBatch(std::int64_t epoch, std::int64_t index, const std::vector<std::int64_t>& rows) const {
  // Pinned memory, so that the copy to the GPU can be asynchronous (batchOnDevice).
  torch::Tensor x, y;  // fresh: the batch waits in the queue while the next is made
  return prepareBatch(epoch, index, rows, x, y, m_strategy->device().is_cuda());
}

LoadedBatch Trainer::prepareBatch(std::int64_t epoch, std::int64_t index, const std::vector<std::int64_t>& rows,
                                  torch::Tensor& x, torch::Tensor& y, bool pinned) const {
  LoadedBatch b;
  if (augments(m_profile.data)) {
    torch::Tensor out;
    const auto rowsX = gatherRows(m_data.x, rows, x);
    if (pinned) out = torch::empty(rowsX.sizes(), rowsX.options().dtype(torch::kFloat32).pinned_memory(true));
    b.x = augmentImages(rowsX, m_data.sampleShape, m_profile.data,
                        augmentSeed(m_profile.hyper.seed, m_options.rank, epoch, index), out);
  } else {
    b.x = gatherRows(m_data.x, rows, x, pinned);
  }
  b.y = gatherRows(m_data.y, rows, y, pinned);
  return b;
}

std::pair<torch::Tensor, torch::Tensor> Trainer::batchOnDevice(std::int64_t index,
                                                               const std::vector<std::int64_t>& rows) {
  const auto dev = m_strategy->device();
  if (m_loader) {
    LoadedBatch b = m_loader->take();
    PTW_CHECK(b.epoch == m_epoch && b.index == index, "data loader: handed batch ", b.index, " of epoch ", b.epoch,
              " for batch ", index, " of epoch ", m_epoch);
    return {b.x.to(dev, /*non_blocking=*/b.x.is_pinned()), b.y.to(dev, /*non_blocking=*/b.y.is_pinned())};
  }
  LoadedBatch b = prepareBatch(m_epoch, index, rows, m_batchX, m_batchY, /*pinned=*/false);
  return {b.x.to(dev), b.y.to(dev)};
}

double Trainer::microBatches(const Batches& batches, std::int64_t micro, std::int64_t stepSamples, StepTimes& t) {
  double loss = 0;
  for (std::int64_t k = 0; k < micro; ++k) {
    const auto& batch = batches[static_cast<std::size_t>(m_batchInEpoch + k)];
    auto a = Clock::now();
    auto [x, y] = batchOnDevice(m_batchInEpoch + k, batch);
    auto b = Clock::now();
    const double weight = static_cast<double>(batch.size()) / static_cast<double>(stepSamples);
    m_strategy->setSyncGradients(k + 1 == micro);
    loss += weight * m_strategy->backward(*m_model, x, y, weight, m_data.classification);
    auto c = Clock::now();
    t.dataMs += ms(a, b);
    t.computeMs += ms(b, c);
    // Note [Injected faults]: a rank slow in its own work, as one on a slower node or disk;
    // the others then wait for it in the collective (their comm time), not in theirs.
    if (m_options.slowFromStep >= 0 && m_step + 1 >= m_options.slowFromStep) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>((m_options.slowFactor - 1) * ms(a, c)));
      t.dataMs += ms(c, Clock::now());
    }
  }
  return loss;
}

void Trainer::publishStep(const StepState& state, double lr, const StepTimes& t) {
  // Read at the end of the first step (what the step took: gradients, optimizer state, the library's
  // workspaces), then a few times a second; always the device's measure, never the resident set for a GPU.
  if (!m_memReadAt || ms(*m_memReadAt, t.stepped) > 250) {  // /proc is cheap but not free
    m_memBytes = memoryBytes(m_strategy->device());
    m_memReadAt = t.stepped;
  }
  const double stepMs = ms(t.start, t.stepped);
  auto record = [&](int rank, double loss, std::int64_t samples, double compute, double comm) {
    core::Record r;
    auto& s = r.step;
    s.rank = rank;
    s.step = m_step;
    s.epoch = m_epoch;
    s.loss = loss;
    s.stepMs = stepMs;
    s.samplesPerS = stepMs > 0 ? static_cast<double>(samples) * 1000.0 / stepMs : 0.0;
    s.dataMs = t.dataMs;
    s.computeMs = compute;
    s.commMs = comm;
    s.optMs = ms(t.reduced, t.stepped);
    s.lr = lr;
    s.memBytes = m_memBytes;
    publish(r);
  };
  const double commMs = ms(t.computed, t.reduced);
  const auto& lanes = m_strategy->lanes();
  if (lanes.empty()) {
    record(m_options.rank, state.loss, state.samples, t.computeMs, commMs);
  } else {
    for (const auto& lane : lanes) record(lane.lane, lane.loss, lane.samples, lane.computeMs, lane.waitMs + commMs);
  }
}

void Trainer::validateAndPublish() {
  if (m_data.valSize() == 0) return;
  auto [loss, accuracy] = validate();
  core::Record v;
  v.kind = core::Record::Kind::Validation;
  v.step.rank = 0;
  v.step.step = m_step;
  v.valLoss = loss;
  v.valAccuracy = accuracy;
  publish(v);
}

}  // namespace ptw::engine
