// DataParallel: one process, one model replica per device of the device set (CUDA GPUs,
// or CPU lanes), one thread per replica. Each step scatters the batch over the replicas,
// runs forward and backward on all of them at once, sums the gradients into the primary
// replica (lane 0, the model the Trainer owns), lets the Trainer step one optimizer, then
// copies the primary's parameters into the other replicas.
//
// Note [Persistent replicas]
// torch::nn::parallel::replicate copies the module onto every device on every step and
// does not handle TorchScript modules; here replicas are made once (Model::replicate)
// and brought up to date by an in-place copy after each optimizer step, which is what
// replicate would produce. Each lane's loss is scaled by its share of the batch, so the
// summed gradient is exactly the gradient of the mean loss over the whole batch.
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "engine/compat.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/strategy.h"
#include "engine/workload.h"

namespace ptw::engine {
namespace {

using Clock = std::chrono::steady_clock;

// Runs one job on every lane: lane 0 on the calling thread, the others on their own
// threads, started once. The first exception is rethrown after every lane has finished.
class LanePool {
 public:
  explicit LanePool(int lanes) : m_lanes(lanes) {
    for (int i = 1; i < lanes; ++i) m_threads.emplace_back([this, i] { loop(i); });
  }
  ~LanePool() {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_quit = true;
    }
    m_wake.notify_all();
    for (auto& t : m_threads) t.join();
  }

  void run(int activeLanes, const std::function<void(int)>& job) {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_job = &job;
      m_active = activeLanes;
      m_remaining = activeLanes - 1;
      m_error = nullptr;
      ++m_generation;
    }
    m_wake.notify_all();
    runLane(0);
    std::unique_lock<std::mutex> lock(m_mutex);
    m_done.wait(lock, [&] { return m_remaining == 0; });
    m_job = nullptr;
    if (m_error) std::rethrow_exception(m_error);
  }

 private:
  void loop(int lane) {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m_mutex);
        m_wake.wait(lock, [&] { return m_quit || m_generation != seen; });
        if (m_quit) return;
        seen = m_generation;
        if (lane >= m_active) continue;
      }
      runLane(lane);
      std::lock_guard<std::mutex> lock(m_mutex);
      if (--m_remaining == 0) m_done.notify_one();
    }
  }

  void runLane(int lane) {
    try {
      (*m_job)(lane);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_mutex);
      if (!m_error) m_error = std::current_exception();
    }
  }

  int m_lanes;
  std::vector<std::thread> m_threads;
  std::mutex m_mutex;
  std::condition_variable m_wake, m_done;
  const std::function<void(int)>* m_job = nullptr;
  int m_active = 0;
  int m_remaining = 0;
  std::uint64_t m_generation = 0;
  bool m_quit = false;
  std::exception_ptr m_error;
};

class DataParallel final : public Strategy {
 public:
  explicit DataParallel(const SyncContext& ctx) : m_lanes(ctx.profile.strategy.ranks) {
    for (int i = 0; i < m_lanes; ++i) m_devices.push_back(deviceFor(ctx.profile, i));
    setDevice(m_devices.front());
    m_reports.resize(static_cast<std::size_t>(m_lanes));
  }

  // The global batches of a `lanes`-rank DistributedSampler: lane i gets rank i's part.
  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override {
    const int lanes = m_lanes;
    return [p, samples, lanes](std::int64_t epoch) {
      SamplerOptions o(samples, lanes, 0);
      o.seed = p.hyper.seed;
      o.epoch = epoch;
      o.shuffle = p.hyper.shuffle;
      o.dropLast = p.hyper.dropLast;
      return globalBatches(o, p.hyper.batchSize);
    };
  }

  void attach(Model& model) override {
    m_replicas.clear();
    for (int i = 1; i < m_lanes; ++i) m_replicas.push_back(model.replicate(m_devices[static_cast<std::size_t>(i)]));
    m_pool = std::make_unique<LanePool>(m_lanes);
  }

  double backward(Model& model, const torch::Tensor& x, const torch::Tensor& y, double weight,
                  bool classification) override {
    const auto n = x.size(0);
    auto xs = x.chunk(m_lanes), ys = y.chunk(m_lanes);
    const int active = static_cast<int>(xs.size());
    std::vector<double> losses(static_cast<std::size_t>(active), 0.0);
    std::vector<Clock::time_point> ends(static_cast<std::size_t>(active));
    const auto start = Clock::now();
    std::function<void(int)> job = [&](int lane) {
      const auto i = static_cast<std::size_t>(lane);
      Model& replica = lane == 0 ? model : *m_replicas[i - 1];
      const auto& dev = m_devices[i];
      const double share = static_cast<double>(xs[i].size(0)) / static_cast<double>(n);
      torch::Tensor loss;
      {
        compat::CudaAutocastGuard autocast(m_autocast);
        loss = computeLoss(replica.forward(xs[i].to(dev)), ys[i].to(dev), classification);
      }
      (loss * (weight * share)).backward();
      losses[i] = loss.item<double>();
      ends[i] = Clock::now();
    };
    m_pool->run(active, job);
    // Sum the replicas' gradients into the primary's, then clear theirs for the next micro-batch.
    torch::NoGradGuard noGrad;
    auto primary = model.parameters();
    for (int lane = 1; lane < active; ++lane) {
      auto params = m_replicas[static_cast<std::size_t>(lane) - 1]->parameters();
      for (std::size_t k = 0; k < params.size(); ++k) {
        auto& g = params[k].mutable_grad();
        if (!g.defined()) continue;
        if (primary[k].grad().defined()) primary[k].mutable_grad().add_(g.to(primary[k].device()));
        else primary[k].mutable_grad() = g.to(primary[k].device()).clone();
        g.zero_();
      }
    }
    const auto summed = Clock::now();
    double total = 0;
    for (int lane = 0; lane < m_lanes; ++lane) {
      auto& r = m_reports[static_cast<std::size_t>(lane)];
      r.lane = lane;
      if (lane >= active) {
        r = LaneReport{lane, 0, 0, 0, 0};
        continue;
      }
      const auto i = static_cast<std::size_t>(lane);
      r.loss = losses[i];
      r.samples = xs[i].size(0);
      r.computeMs = std::chrono::duration<double, std::milli>(ends[i] - start).count();
      r.waitMs = std::chrono::duration<double, std::milli>(summed - ends[i]).count();
      total += losses[i] * static_cast<double>(r.samples) / static_cast<double>(n);
    }
    return total;
  }

  bool reduce(Model&, StepState&) override { return m_localStop; }

  void afterOptimizerStep(Model& model) override {
    torch::NoGradGuard noGrad;
    auto primary = model.parameters();
    for (auto& replica : m_replicas) {
      auto params = replica->parameters();
      for (std::size_t k = 0; k < params.size(); ++k) params[k].copy_(primary[k]);
    }
  }

  const std::vector<LaneReport>& lanes() const override { return m_reports; }

 private:
  int m_lanes;
  std::vector<torch::Device> m_devices;
  std::vector<std::unique_ptr<Model>> m_replicas;
  std::unique_ptr<LanePool> m_pool;
  std::vector<LaneReport> m_reports;
};

}  // namespace

std::unique_ptr<Strategy> makeDataParallel(const SyncContext& ctx) { return std::make_unique<DataParallel>(ctx); }

}  // namespace ptw::engine
