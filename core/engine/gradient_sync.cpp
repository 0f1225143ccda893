#include "engine/gradient_sync.h"

#include "common/error.h"

namespace ptw::engine {

std::unique_ptr<GradientSync> makeSingleSync(const SyncContext&);
std::unique_ptr<GradientSync> makeDdpSync(const SyncContext&);

const std::map<std::string, GradientSyncFactory>& gradientSyncRegistry() {
  static const std::map<std::string, GradientSyncFactory> registry = {
      {"single", makeSingleSync},
      {"ddp", makeDdpSync},
  };
  return registry;
}

std::unique_ptr<GradientSync> makeGradientSync(const SyncContext& ctx) {
  const auto& reg = gradientSyncRegistry();
  auto it = reg.find(ctx.profile.strategy.kind);
  PTW_CHECK(it != reg.end(), "strategy.kind: no engine for \"", ctx.profile.strategy.kind, "\"");
  return it->second(ctx);
}

}  // namespace ptw::engine
