// ProbeRdmaTransport for builds with libibverbs: opens the first device and
// its protection domain, and reports why not when that fails.
#include "io/rdma_verbs.h"
#include "tiers/remote/memd_server.h"

namespace kvtier::internal::memd {

Status ProbeRdmaTransport() {
  auto ctx = rdma::Context::OpenFirst();
  if (!ctx.ok()) return ctx.status();
  auto pd = rdma::ProtectionDomain::Create(*ctx);
  if (!pd.ok()) return pd.status().WithContext("transport: rdma (use transport: tcp instead)");
  return Status::Ok();
}

}  // namespace kvtier::internal::memd
