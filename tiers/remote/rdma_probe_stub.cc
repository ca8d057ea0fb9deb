// ProbeRdmaTransport for builds without libibverbs (KVTIER_WITH_RDMA off or
// not found).
#include "tiers/remote/memd_server.h"

namespace kvtier::internal::memd {

Status ProbeRdmaTransport() {
  return Status::NotSupported(
      "transport: rdma is not available in this build (built without libibverbs; "
      "KVTIER_WITH_RDMA); use transport: tcp");
}

}  // namespace kvtier::internal::memd

#include "tiers/remote/rdma_transport.h"

namespace kvtier::internal::memd {

Result<std::unique_ptr<RdmaDevice>> OpenRdmaDevice() { return ProbeRdmaTransport(); }

}  // namespace kvtier::internal::memd
