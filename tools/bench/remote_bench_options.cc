// RemoteBenchOptions::Validate, apart from the bench itself (which needs the
// remote tier) so that every build and its tests have it.
#include <string>

#include "tools/bench/remote_bench.h"

namespace kvtier::bench {

Status RemoteBenchOptions::Validate() const {
  if (block_bytes == 0 || block_bytes > (64ull << 20)) {
    return Status::InvalidArgument("block size must be 1 byte to 64 MiB");
  }
  if (queue_depth == 0 || queue_depth > 4096) return Status::InvalidArgument("queue depth 1..4096");
  if (batches_in_flight == 0 || batches_in_flight > 16) {
    return Status::InvalidArgument("batches in flight 1..16");
  }
  // Every window must carry at least one batch per round: the read-back
  // check compares all of them, and a total of 0 would make iperf3 time a
  // run instead of counting bytes.
  const uint64_t in_flight_bytes = block_bytes * queue_depth * batches_in_flight;
  if (total_bytes < in_flight_bytes) {
    return Status::InvalidArgument("--total " + std::to_string(total_bytes) +
                                   " is less than one round of the blocks in " +
                                   "flight (block size x queue depth x batches in flight = " +
                                   std::to_string(in_flight_bytes) + " bytes)");
  }
  if (rounds == 0) return Status::InvalidArgument("rounds >= 1");
  if (!servers.empty() && secret_file.empty()) {
    return Status::InvalidArgument("--servers needs --secret-file");
  }
  return Status::Ok();
}

}  // namespace kvtier::bench
