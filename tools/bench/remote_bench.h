// `kvtier-bench remote`: the remote tier over TCP next to iperf3 on the same
// loopback, in the same run.
//
// The peer is one iperf3 stream (`iperf3 -c 127.0.0.1 -P 1 -l <block> -n
// <total>`) against an `iperf3 -s -1` this command starts on a free port: the
// same payload bytes in the same write size as the tier moves. The tier side
// writes, then reads back, `total_bytes` of blocks through a remote tier whose
// kvtier-memd server runs in this process (its own I/O thread, real TCP)
// unless --servers names running ones, keeping `batches_in_flight` batches of
// `queue_depth` blocks outstanding so the connection never drains between
// batches. Each round runs iperf3 and then the tier back to back, so a
// round's ratio compares the two under the same machine load; every round is
// reported, and the median of the per-round ratios summarises them. CPU
// seconds per GB of both sides are printed beside them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct RemoteBenchOptions {
  uint64_t block_bytes = 1ull << 20;
  uint64_t total_bytes = 1ull << 30;  // per direction per round, tier and iperf3 alike
  uint32_t queue_depth = 4;           // blocks per batch
  uint32_t batches_in_flight = 2;     // batches outstanding at once
  uint32_t connections = 2;           // per server
  uint32_t rounds = 5;
  std::vector<std::string> servers;  // empty: one in-process kvtier-memd
  std::string secret_file;           // with servers
  Status Validate() const;
};

// GB = 10^9 payload bytes. CPU figures are user + system seconds per GB
// moved, both ends together (iperf3: client and server processes; tier: this
// process, the in-process kvtier-memd included): unlike GB/s they hardly move
// with the load other processes put on the machine.
struct RemoteBenchRound {
  double iperf_gb_s = 0;
  double write_gb_s = 0;
  double read_gb_s = 0;
  double iperf_cpu_s_per_gb = 0;
  double tier_cpu_s_per_gb = 0;  // over the write and the read phase
};

struct RemoteBenchResult {
  RemoteBenchOptions options;
  std::vector<RemoteBenchRound> rounds;
  double median_write_ratio = 0;  // median over rounds of write / iperf3
  double median_read_ratio = 0;   // median over rounds of read / iperf3
};

Result<RemoteBenchResult> RunRemoteBench(const RemoteBenchOptions& options);
std::string FormatRemoteBench(const RemoteBenchResult& r);

}  // namespace kvtier::bench
