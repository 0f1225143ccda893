// Single: one process, nothing to synchronise. The baseline every comparison uses.
#include "engine/gradient_sync.h"

namespace ptw::engine {
namespace {

class SingleSync final : public GradientSync {
 public:
  void attach(const std::vector<torch::Tensor>&) override {}
  bool reduce(const std::vector<torch::Tensor>&, bool localStop) override { return localStop; }
};

}  // namespace

std::unique_ptr<GradientSync> makeSingleSync(const SyncContext&) { return std::make_unique<SingleSync>(); }

}  // namespace ptw::engine
