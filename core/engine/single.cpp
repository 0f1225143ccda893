// SPDX-License-Identifier: GPL-3.0-or-later
// Single: one process, one device, nothing to synchronise. The baseline every comparison uses.
#include "engine/strategy.h"

namespace ptw::engine {
namespace {

class Single final : public Strategy {
 public:
  explicit Single(const SyncContext& ctx) { setDevice(deviceFor(ctx.profile, 0)); }
  BatchPlan plan(const core::Profile& p, std::int64_t samples) const override { return shardPlan(p, samples, 0, 1); }
  void attach(Model&) override {}
  bool reduce(Model&, StepState&) override { return m_localStop; }
};

}  // namespace

std::unique_ptr<Strategy> makeSingle(const SyncContext& ctx) { return std::make_unique<Single>(ctx); }

PTW_REGISTER_STRATEGY("single", makeSingle);

}  // namespace ptw::engine
