// NewRemoteTier for builds without Boost.Asio: the remote tier and
// kvtier-memd need it.
#include "tiers/remote/remote_tier.h"

namespace kvtier::internal {

Result<std::unique_ptr<Tier>> NewRemoteTier(const TierOptions& options,
                                            const TierContext& context) {
  return Status::NotSupported("tier '" + options.name +
                              "': type 'remote' is not available in this build (needs Boost.Asio, "
                              "libboost-dev)");
}

Result<std::unique_ptr<Tier>> NewRemoteTierOn(const TierOptions& options,
                                              const TierContext& context,
                                              memd::RdmaDeviceFactory /*open_device*/) {
  // Without Boost there is no remote tier to open a device for.
  return NewRemoteTier(options, context);
}

}  // namespace kvtier::internal
