// The libibverbs RdmaDevice (rdma_transport.h) and the conversions between
// the wire's QpEndpoint and the verbs owners' QueuePairInfo. Included only
// by RDMA builds (KVTIER_HAVE_RDMA).
#pragma once

#include "io/rdma_verbs.h"
#include "tiers/remote/rdma_protocol.h"

namespace kvtier::internal::memd {

// Queue pair numbers and PSNs are 24-bit on the wire and in the verbs
// attributes; higher bits are dropped here, once.
rdma::QueuePairInfo ToQueuePairInfo(const QpEndpoint& e);
QpEndpoint ToQpEndpoint(const rdma::QueuePairInfo& info);

}  // namespace kvtier::internal::memd
