#include "engine/trainer.h"

#include <unistd.h>

#include <chrono>
#include <fstream>

#include "engine/sampler.h"

namespace ptw::engine {
namespace {
using Clock = std::chrono::steady_clock;
double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }
}  // namespace

BatchPlan shardPlan(const core::Profile& p, int rank, int world) {
  return [=](std::int64_t epoch) {
    SamplerOptions o(p.data.samples, world, rank);
    o.seed = p.hyper.seed;
    o.epoch = epoch;
    o.shuffle = p.hyper.shuffle;
    o.dropLast = p.hyper.dropLast;
    return shardBatches(o, p.hyper.batchSize);
  };
}

std::int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::int64_t>(::sysconf(_SC_PAGESIZE));
}

Trainer::Trainer(core::Profile profile, int rank, int world, std::unique_ptr<GradientSync> sync, BatchPlan plan,
                 RecordSink sink)
    : m_profile(std::move(profile)),
      m_rank(rank),
      m_world(world),
      m_sync(std::move(sync)),
      m_plan(std::move(plan)),
      m_sink(std::move(sink)),
      m_data(makeDataset(m_profile.data, m_profile.model)),
      m_model(makeModel(m_profile.model, m_profile.hyper.seed)) {
  m_sync->attach(parameters());
  m_optimizer = makeOptimizer(m_profile.hyper, m_model->parameters());
}

std::vector<torch::Tensor> Trainer::parameters() const { return m_model->parameters(); }

std::int64_t Trainer::run(const std::atomic<bool>& stopRequested) {
  const auto& h = m_profile.hyper;
  auto params = m_model->parameters();
  std::int64_t memBytes = residentBytes();
  auto memReadAt = Clock::now();
  bool stop = false;
  for (std::int64_t epoch = 0; !stop && (h.epochs == 0 || epoch < h.epochs); ++epoch) {
    auto batches = m_plan(epoch);
    if (batches.empty()) break;
    for (const auto& batch : batches) {
      if (h.maxSteps > 0 && m_step >= h.maxSteps) { stop = true; break; }
      auto t0 = Clock::now();
      auto idx = torch::from_blob(const_cast<std::int64_t*>(batch.data()),
                                  {static_cast<std::int64_t>(batch.size())}, torch::kInt64);
      auto x = m_data.x.index_select(0, idx);
      auto y = m_data.y.index_select(0, idx);
      auto t1 = Clock::now();
      m_optimizer->zero_grad();
      auto loss = computeLoss(m_model->forward(x), y, m_data.classification);
      loss.backward();
      auto t2 = Clock::now();
      stop = m_sync->reduce(params, stopRequested.load(std::memory_order_relaxed));
      auto t3 = Clock::now();
      m_optimizer->step();
      auto t4 = Clock::now();
      ++m_step;

      if (m_sink) {
        if (ms(memReadAt, t4) > 250) {  // /proc is cheap but not free: read it a few times a second
          memBytes = residentBytes();
          memReadAt = t4;
        }
        core::Record r;
        auto& s = r.step;
        s.rank = m_rank;
        s.step = m_step;
        s.epoch = epoch;
        s.loss = loss.item<double>();
        s.stepMs = ms(t0, t4);
        s.samplesPerS = s.stepMs > 0 ? static_cast<double>(batch.size()) * 1000.0 / s.stepMs : 0.0;
        s.dataMs = ms(t0, t1);
        s.computeMs = ms(t1, t2);
        s.commMs = ms(t2, t3);
        s.optMs = ms(t3, t4);
        s.lr = h.lr;
        s.memBytes = memBytes;
        m_sink(r);
      }
      if (stop) break;
    }
    if (h.epochs == 0 && h.maxSteps == 0) break;
  }
  return m_step;
}

}  // namespace ptw::engine
