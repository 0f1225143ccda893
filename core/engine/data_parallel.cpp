// SPDX-License-Identifier: GPL-3.0-or-later
// DataParallel: one process, one model replica per device of the device set (CUDA GPUs,
// or CPU lanes), one thread per replica. Each step scatters the batch over the replicas,
// runs forward and backward on all of them at once, sums the gradients into the primary
// replica (lane 0, the model the Trainer owns), lets the Trainer step one optimizer, then
// copies the primary's parameters into the other replicas.
//
// Note [Persistent replicas]
// torch::nn::parallel::replicate copies the module onto every device on every step and
// does not handle TorchScript modules; here replicas are made once (Model::replicate).
// On GPUs they are brought up to date by an in-place copy after each optimizer step, which
// is what replicate would produce; on CPU lanes each replica's parameters are the
// primary's memory (its own tensors, so its own gradients), and the optimizer's in-place
// step updates every replica at once. Each lane's loss is scaled by its share of the
// batch, so the summed gradient is exactly the gradient of the mean loss over the whole
// batch. The sum is taken at the optimizer step, once per step however many micro-batches
// (the lanes' gradients accumulate in place until then).
//
// Note [Lane-split SGD step]
// On CPU lanes with SGD and no clipping, the step after backward is split over the lanes
// like DDP's sharded step (Note [Sharded SGD step]): each lane sums its share of the
// elements over every lane's gradients (in lane order, as the serial sum would), applies
// SGD's update to its share of the parameters and momentum buffers, and zeroes its share
// of the replicas' gradients, in one pass (sumThenSgd). Serially, the sum, the zeroing,
// the optimizer and the copy into the replicas would be about five passes over the
// parameters on one thread while the other lanes wait. A model under kLaneSplitFloats a
// lane is stepped on the calling thread alone (lanesFor): waking the lanes would cost more
// than the step.
#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "common/error.h"
#include "engine/kernels.h"
#include "engine/lane_pool.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/strategy.h"
#include "engine/workload.h"

namespace ptw::engine {
namespace {

using Clock = std::chrono::steady_clock;

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
      return globalBatches(samplerOptions(p, samples, lanes, 0, epoch), p.hyper.batchSize);
    };
  }

  void attach(Model& model) override {
    m_primary = model.parameters();
    m_index.clear();
    for (std::size_t k = 0; k < m_primary.size(); ++k) m_index.emplace(m_primary[k].unsafeGetTensorImpl(), k);
    m_replicas.clear();
    m_replicaParams.clear();
    m_cpuLanes = std::all_of(m_devices.begin(), m_devices.end(), [](const torch::Device& d) { return d.is_cpu(); });
    torch::NoGradGuard noGrad;
    for (int i = 1; i < m_lanes; ++i) {
      m_replicas.push_back(model.replicate(m_devices[static_cast<std::size_t>(i)]));
      m_replicaParams.push_back(m_replicas.back()->parameters());
      const auto& mine = m_replicaParams.back();
      PTW_CHECK(mine.size() == m_primary.size(), "dataparallel: a replica of this model has ", mine.size(),
                " parameters where the model has ", m_primary.size());
      for (std::size_t k = 0; k < m_primary.size(); ++k)
        PTW_CHECK(mine[k].sizes() == m_primary[k].sizes(), "dataparallel: a replica's parameter ", k, " has shape ",
                  mine[k].sizes(), " where the model's has ", m_primary[k].sizes());
      if (m_cpuLanes)  // Note [Persistent replicas]: the primary's memory, the replica's own gradients
        for (std::size_t k = 0; k < m_primary.size(); ++k) m_replicaParams.back()[k].set_data(m_primary[k].detach());
    }
    m_buffers = model.buffers();
    m_replicaBuffers.clear();
    for (auto& replica : m_replicas) {
      m_replicaBuffers.push_back(replica->buffers());
      PTW_CHECK(m_replicaBuffers.back().size() == m_buffers.size(), "dataparallel: a replica of this model has ",
                m_replicaBuffers.back().size(), " buffers where the model has ", m_buffers.size());
    }
    m_pool = std::make_unique<LanePool>(m_lanes);
  }

  double backward(Model& model, const torch::Tensor& x, const torch::Tensor& y, double weight,
                  bool classification) override {
    if (!m_buffers.empty()) {  // Note [Buffers]: each forward starts from the model's buffers
      torch::NoGradGuard noGrad;
      for (auto& buffers : m_replicaBuffers)
        for (std::size_t k = 0; k < buffers.size(); ++k) buffers[k].copy_(m_buffers[k]);
    }
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
      losses[i] = lossAndGradients(replica, xs[i].to(dev), ys[i].to(dev), weight * share, classification);
      ends[i] = Clock::now();
    };
    m_pool->run(active, job);
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

  void optimizerStep(torch::optim::Optimizer& optimizer, double clipNorm) override {
    if (laneSplitStep(optimizer, clipNorm)) return;
    sumGradients();
    Strategy::optimizerStep(optimizer, clipNorm);
    if (m_cpuLanes) return;  // the replicas' parameters are the primary's
    torch::NoGradGuard noGrad;
    for (auto& params : m_replicaParams)
      for (std::size_t k = 0; k < params.size(); ++k) params[k].copy_(m_primary[k]);
  }

  const std::vector<LaneReport>& lanes() const override { return m_reports; }

 private:
  /// The replicas' gradients summed into the primary's, and cleared for the next step.
  void sumGradients() {
    torch::NoGradGuard noGrad;
    for (auto& params : m_replicaParams) {
      for (std::size_t k = 0; k < params.size(); ++k) {
        auto& g = params[k].mutable_grad();
        if (!g.defined()) continue;
        auto& primary = m_primary[k];
        if (primary.grad().defined())
          primary.mutable_grad().add_(g.to(primary.device()));
        else
          primary.mutable_grad() = g.to(primary.device()).clone();
        g.zero_();
      }
    }
  }

  static bool denseCpuFloat(const torch::Tensor& t, const torch::Tensor& like) {
    return t.device().is_cpu() && !t.is_sparse() && t.scalar_type() == torch::kFloat && t.is_contiguous() &&
           t.numel() == like.numel();
  }

  /// Note [Lane-split SGD step]. False, having changed nothing, when it does not apply.
  bool laneSplitStep(torch::optim::Optimizer& optimizer, double clipNorm) {
    auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
    if (!m_cpuLanes || !sgd || clipNorm > 0 || m_replicas.empty()) return false;
    for (const auto& group : sgd->param_groups())
      for (const auto& p : group.params()) {
        auto k = m_index.find(p.unsafeGetTensorImpl());
        if (k == m_index.end() || !denseCpuFloat(p, p)) return false;
        if (p.grad().defined() && !denseCpuFloat(p.grad(), p)) return false;
        for (const auto& params : m_replicaParams) {
          const auto& g = params[k->second].grad();
          if (g.defined() && !denseCpuFloat(g, p)) return false;
        }
      }
    // It applies: one piece a parameter with a gradient somewhere; its parts, the primary's
    // gradient, then the replicas' that are defined.
    std::vector<std::vector<float*>> parts;
    const auto pieces = sgdPieces(*sgd, [&](torch::Tensor& p) {
      const std::size_t k = m_index.at(p.unsafeGetTensorImpl());
      std::vector<float*> replicas;
      for (auto& params : m_replicaParams)
        if (params[k].grad().defined()) replicas.push_back(params[k].mutable_grad().data_ptr<float>());
      if (!p.grad().defined()) {
        if (replicas.empty()) return false;       // SGD skips a parameter without a gradient
        p.mutable_grad() = torch::zeros_like(p);  // zeroed by the Trainer from now on
      }
      parts.push_back({p.mutable_grad().data_ptr<float>()});
      parts.back().insert(parts.back().end(), replicas.begin(), replicas.end());
      return true;
    });
    const std::size_t total = pieces.empty() ? 0 : pieces.back().at + pieces.back().n;
    const int used = lanesFor(total, m_lanes);
    std::function<void(int)> job = [&](int lane) {
      const auto [lo, hi] = shareOf(total, used, lane);
      forEachInShare(pieces, lo, hi, [&](std::size_t i, std::size_t a, std::size_t b) {
        const auto& piece = pieces[i];
        sumThenSgd(piece.w + a, piece.buf ? piece.buf + a : nullptr, parts[i].data(), static_cast<int>(parts[i].size()),
                   a, b, piece.scalars, piece.first);
      });
    };
    if (used == 1)
      job(0);
    else
      m_pool->run(used, job);
    return true;
  }

  int m_lanes;
  bool m_cpuLanes = false;
  std::vector<torch::Tensor> m_primary;                      ///< lane 0's parameters: the model the Trainer owns
  std::vector<std::vector<torch::Tensor>> m_replicaParams;   ///< lanes 1.. in the primary's order
  std::vector<torch::Tensor> m_buffers;                      ///< lane 0's (Note [Buffers])
  std::vector<std::vector<torch::Tensor>> m_replicaBuffers;  ///< lanes 1.., overwritten each forward
  std::unordered_map<const void*, std::size_t> m_index;      ///< a primary parameter -> its position
  std::vector<torch::Device> m_devices;
  std::vector<std::unique_ptr<Model>> m_replicas;
  std::unique_ptr<LanePool> m_pool;
  std::vector<LaneReport> m_reports;
};

}  // namespace

std::unique_ptr<Strategy> makeDataParallel(const SyncContext& ctx) { return std::make_unique<DataParallel>(ctx); }

PTW_REGISTER_STRATEGY("dataparallel", makeDataParallel);

}  // namespace ptw::engine
