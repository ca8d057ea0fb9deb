#include "tools/bench/redis_bench_cli.h"

#include <iostream>

#include "kvtier/config.h"
#include "tools/bench/redis_bench.h"

namespace kvtier::bench {

void AddRedisBenchCommand(CLI::App& app, RedisBenchFlags& f) {
  CLI::App* cmd = app.add_subcommand("redis", "redis tier SET/GET throughput vs redis-benchmark");
  cmd->add_option("--server", f.server,
                  "host:port of a running server (default: start redis-server on a free port)");
  cmd->add_option("--password", f.password, "AUTH password for --server");
  cmd->add_flag("--tls", f.tls,
                "both sides over TLS (own server: a self-signed certificate made with openssl)");
  cmd->add_option("--tls-ca-file", f.tls_ca_file, "CA of --server's certificate (with --tls)");
  cmd->add_option("--value-sizes", f.value_sizes, "comma-separated value sizes")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--pipeline", f.pipeline, "redis-benchmark -P = blocks per tier batch")
      ->capture_default_str();
  cmd->add_option("--clients", f.clients, "redis-benchmark -c = tier client threads")
      ->capture_default_str();
  cmd->add_option("--total", f.total, "payload bytes per measurement")->capture_default_str();
  cmd->add_option("--rounds", f.rounds, "alternating measurements; best kept")
      ->capture_default_str();
  cmd->add_flag("--json", f.json, "print one JSON object");
}

int RunRedisBenchCommand(const RedisBenchFlags& f) {
  constexpr int kExitUsage = 2;
  RedisBenchOptions o;
  o.server = f.server;
  o.password = f.password;
  o.tls = f.tls;
  o.tls_ca_file = f.tls_ca_file;
  o.value_sizes.clear();
  for (const std::string& text : f.value_sizes) {
    Result<uint64_t> size = ParseByteSize(text);
    if (!size.ok()) {
      std::cerr << "kvtier-bench redis: --value-sizes: " << size.status().message() << "\n";
      return kExitUsage;
    }
    o.value_sizes.push_back(*size);
  }
  Result<uint64_t> total = ParseByteSize(f.total);
  if (!total.ok()) {
    std::cerr << "kvtier-bench redis: --total: " << total.status().message() << "\n";
    return kExitUsage;
  }
  o.total_bytes = *total;
  o.pipeline = f.pipeline;
  o.clients = f.clients;
  o.rounds = f.rounds;
  auto report = RunRedisBench(o);
  if (!report.ok()) {
    std::cerr << "kvtier-bench redis: " << report.status().ToString() << "\n";
    return kExitUsage;
  }
  std::cout << (f.json ? RedisBenchJson(*report) + "\n" : FormatRedisBench(*report));
  return 0;
}

}  // namespace kvtier::bench
