// The one place that knows which tier backends this build contains.
#include <string>

#include "kvtier/build_config.h"
#include "kvtier/tier.h"
#include "tiers/host/host_tier.h"

namespace kvtier {
namespace {

Status NotBuilt(const TierOptions& o, const char* what) {
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
    return NotBuilt(options, KVTIER_HAVE_URING && KVTIER_HAVE_ROCKSDB
                                 ? "the NVMe backend is not implemented yet"
                                 : "needs KVTIER_WITH_URING and KVTIER_WITH_ROCKSDB");
  }
  if (options.type == "redis") {
    return NotBuilt(options, KVTIER_HAVE_REDIS ? "the Redis backend is not implemented yet"
                                               : "needs KVTIER_WITH_REDIS");
  }
  if (options.type == "remote") return NotBuilt(options, "the remote backend is not implemented yet");
  return Status::InvalidArgument("tier '" + options.name + "': unknown type '" + options.type +
                                 "' (known: host, nvme, redis, remote)");
}

}  // namespace kvtier
