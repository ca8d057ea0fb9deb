// `kvtier-bench redis`: the Redis tier next to redis-benchmark, against the
// same server in the same run.
//
// For each value size, redis-benchmark runs SET and GET with -d <size>,
// -P <pipeline> and -c <clients>; the tier runs the same operations with the
// same payload size: <clients> threads, each issuing batches of <pipeline>
// blocks (Write for SET, Read for GET) over its own keys and waiting for each
// batch, through a tier with one connection per client. Rounds of the two
// alternate and the best of each is kept. MB/s counts payload bytes (the tier
// also sends its 64-byte block header per value). With `tls`, both sides talk
// TLS (redis-benchmark --tls) to the server's TLS port; a server of our own
// then gets a self-signed certificate made with the openssl command.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct RedisBenchOptions {
  std::string server;    // "host:port" of a running server; empty = start redis-server
  std::string password;  // AUTH for `server`
  bool tls = false;      // both sides over TLS
  std::string tls_ca_file;  // CA of `server`'s certificate; empty = the system's store
  std::vector<uint64_t> value_sizes = {64 << 10, 1 << 20};
  uint32_t pipeline = 16;               // redis-benchmark -P; blocks per tier batch
  uint32_t clients = 4;                 // redis-benchmark -c; tier client threads and connections
  uint64_t total_bytes = 512ull << 20;  // payload bytes per measurement
  uint32_t rounds = 3;
  Status Validate() const;
};

struct RedisBenchRow {
  uint64_t value_bytes = 0;
  std::string op;  // "SET" or "GET"
  uint32_t clients = 0;
  uint32_t pipeline = 0;
  uint64_t requests = 0;            // per measurement
  double redis_benchmark_mb_s = 0;  // MB = 10^6 bytes
  double tier_mb_s = 0;
  double ratio = 0;  // tier / redis-benchmark
};

struct RedisBenchReport {
  std::string server;
  bool tls = false;  // both sides talked TLS
  std::vector<RedisBenchRow> rows;
};

// "host:port" split into its parts: InvalidArgument unless the port is
// 1 to 65535 in plain digits and the host is not empty.
Status SplitRedisServer(const std::string& server, std::string* host, uint16_t* port);

// Requests per second redis-benchmark reported.
struct RedisBenchmarkRps {
  double set_rps = 0;
  double get_rps = 0;
};

// One redis-benchmark run of SET then GET against host:port with
// `options`' pipeline, clients and password, -d value_bytes, -n requests.
// Runs it without a shell; Unavailable when it cannot run, fails or prints
// no rates. No message ever holds the password.
Result<RedisBenchmarkRps> RunRedisBenchmark(const std::string& host, uint16_t port,
                                            const RedisBenchOptions& options, uint64_t value_bytes,
                                            uint64_t requests);

// Errors when no server can be started or reached, redis-benchmark is
// missing or fails, or a tier batch fails.
Result<RedisBenchReport> RunRedisBench(const RedisBenchOptions& options);

std::string FormatRedisBench(const RedisBenchReport& report);
std::string RedisBenchJson(const RedisBenchReport& report);

}  // namespace kvtier::bench
