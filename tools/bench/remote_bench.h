// `kvtier-bench remote`: the remote tier over TCP next to iperf3 on the same
// loopback, in the same run.
//
// The peer is one iperf3 stream (`iperf3 -c 127.0.0.1 -P 1 -l <block>`)
// against an `iperf3 -s -1` this command starts on a free port. The tier
// side writes, then reads back, batches of `queue_depth` blocks through a
// remote tier whose kvtier-memd server runs in this process (its own I/O
// thread, real TCP) unless --servers names running ones. Rounds alternate and
// the best of each is kept; the ratio is tier GB/s over iperf3 GB/s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct RemoteBenchOptions {
  uint64_t block_bytes = 1ull << 20;
  uint64_t total_bytes = 1ull << 30;  // moved per tier measurement, each direction
  uint32_t queue_depth = 16;          // blocks per batch
  uint32_t connections = 2;           // per server
  uint32_t rounds = 2;
  uint32_t iperf_seconds = 2;
  std::vector<std::string> servers;  // empty: one in-process kvtier-memd
  std::string secret_file;           // with servers
  Status Validate() const;
};

struct RemoteBenchResult {
  uint64_t block_bytes = 0;
  uint32_t queue_depth = 0;
  uint32_t connections = 0;
  double iperf_gb_s = 0;  // GB = 10^9 bytes
  double write_gb_s = 0;
  double read_gb_s = 0;
};

Result<RemoteBenchResult> RunRemoteBench(const RemoteBenchOptions& options);
std::string FormatRemoteBench(const RemoteBenchResult& r);

}  // namespace kvtier::bench
