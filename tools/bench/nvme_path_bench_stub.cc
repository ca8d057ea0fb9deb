// `kvtier-bench nvme-path` in a build without io_uring.
#include "tools/bench/nvme_path_bench.h"

namespace kvtier::bench {

Result<NvmePathReport> RunNvmePathBench(const NvmePathOptions&) {
  return Status::NotSupported("kvtier-bench nvme-path needs io_uring (liburing)");
}
std::string FormatNvmePath(const NvmePathReport&) { return ""; }

}  // namespace kvtier::bench
