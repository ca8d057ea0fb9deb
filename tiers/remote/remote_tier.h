// The remote tier: blocks kept in the memory of kvtier-memd servers. Keys go
// to servers by rendezvous hashing (remote_routing.h); each block travels
// with its BlockHeader and is verified on read. A dead server makes only its
// own keys fail (Unavailable, or DeadlineExceeded within op_timeout_ms) while
// the others keep serving; it rejoins on its own once it answers again.
//
// Capacity: the tier counts the payload bytes it has stored and not removed
// against capacity_bytes and answers ResourceExhausted when a new block would
// not fit. Blocks a server evicts or loses in a restart leave the count when
// a read misses them or the restart is seen.
#pragma once

#include <memory>

#include "kvtier/tier.h"
#include "tiers/remote/rdma_transport.h"

namespace kvtier::internal {

// InvalidArgument for bad options, an unreadable secret file, a refused
// secret or a block larger than a server's slots; NotSupported for
// `transport: rdma` without an RDMA device (naming `transport: tcp`);
// Unavailable when no server answers at open.
Result<std::unique_ptr<Tier>> NewRemoteTier(const TierOptions& options, const TierContext& context);

// NewRemoteTier with the device taken from `open_device` instead of
// memd::OpenRdmaDevice; the tests run the tier on a stand-in device this
// way. For `transport: rdma` the tier asks it exactly once, before it reads
// the secret or reaches a server, and fails with its error under the tier's
// name; other transports never ask. REQUIRES: `open_device` is set, and
// `context` is as CreateTier passes it (options validated, block size set,
// log and clock not null).
Result<std::unique_ptr<Tier>> NewRemoteTierOn(const TierOptions& options,
                                              const TierContext& context,
                                              memd::RdmaDeviceFactory open_device);

}  // namespace kvtier::internal
