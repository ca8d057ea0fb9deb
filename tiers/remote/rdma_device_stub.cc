// OpenRdmaDevice for builds without libibverbs (KVTIER_WITH_RDMA off or not
// found): `transport: rdma` fails at start with the reason and the fallback.
#include "tiers/remote/rdma_transport.h"

namespace kvtier::internal::memd {

Result<std::unique_ptr<RdmaDevice>> OpenRdmaDevice() {
  return Status::NotSupported(
      "transport: rdma is not available in this build (built without libibverbs; "
      "KVTIER_WITH_RDMA); use transport: tcp");
}

}  // namespace kvtier::internal::memd
