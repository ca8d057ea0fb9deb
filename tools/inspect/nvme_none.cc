// nvme in a build without the NVMe tier (no liburing or RocksDB).
#include "tools/inspect/inspect.h"

namespace kvtier::inspect {

int RunNvme(const NvmeFlags& flags, const Output& o) {
  return NotAvailable("nvme " + flags.action, o);
}

}  // namespace kvtier::inspect
