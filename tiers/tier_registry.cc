// The one place that knows which tier backends this build contains.
#include <string>

#include "kvtier/build_config.h"
#include "kvtier/tier.h"
#include "tiers/host/host_tier.h"
#include "tiers/remote/remote_tier.h"
#if KVTIER_HAVE_REDIS
#include "tiers/redis/redis_tier.h"
#endif
#if KVTIER_HAVE_URING && KVTIER_HAVE_ROCKSDB
#include "tiers/nvme/nvme_tier.h"
#endif

namespace kvtier {
namespace {

[[maybe_unused]] Status NotBuilt(const TierOptions& o, const char* what) {
  return Status::NotSupported("tier '" + o.name + "': type '" + o.type + "' is not available in " +
                              "this build (" + what + ")");
}

}  // namespace

Result<std::unique_ptr<Tier>> CreateTier(const TierOptions& options, const TierContext& context) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  if (context.block_bytes == 0) {
    return Status::InvalidArgument("tier '" + options.name + "': block size is 0");
  }
  TierContext ctx = context;
  if (!ctx.clock) ctx.clock = SystemClock();
  if (!ctx.log) ctx.log = StderrLogSink();
  if (options.type == "host") return internal::NewHostTier(options, ctx);
  if (options.type == "nvme") {
#if KVTIER_HAVE_URING && KVTIER_HAVE_ROCKSDB
    return internal::NewNvmeTier(options, ctx);
#else
    return NotBuilt(options, "needs KVTIER_WITH_URING and KVTIER_WITH_ROCKSDB");
#endif
  }
  if (options.type == "redis") {
#if KVTIER_HAVE_REDIS
    return internal::NewRedisTier(options, ctx);
#else
    return NotBuilt(options, "needs KVTIER_WITH_REDIS");
#endif
  }
  if (options.type == "remote") return internal::NewRemoteTier(options, ctx);
  return Status::InvalidArgument("tier '" + options.name + "': unknown type '" + options.type +
                                 "' (known: host, nvme, redis, remote)");
}

}  // namespace kvtier
