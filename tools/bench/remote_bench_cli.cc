#include "tools/bench/remote_bench_cli.h"

#include <iostream>

#include "kvtier/config.h"
#include "tools/bench/remote_bench.h"

namespace kvtier::bench {

void AddRemoteBenchCommand(CLI::App& app, RemoteBenchFlags& f) {
  CLI::App* cmd =
      app.add_subcommand("remote", "remote tier over TCP vs iperf3 (one stream) on loopback");
  cmd->add_option("--block-size", f.block_size, "block size")->capture_default_str();
  cmd->add_option("--total", f.total, "bytes per direction per round")->capture_default_str();
  cmd->add_option("--queue-depth", f.queue_depth, "blocks per batch")->capture_default_str();
  cmd->add_option("--batches-in-flight", f.batches_in_flight, "batches outstanding at once")
      ->capture_default_str();
  cmd->add_option("--connections", f.connections, "connections per server")->capture_default_str();
  cmd->add_option("--rounds", f.rounds, "rounds of iperf3 then the tier; all printed")
      ->capture_default_str();
  cmd->add_option("--servers", f.servers, "running kvtier-memd host:port (default: in-process)")
      ->delimiter(',');
  cmd->add_option("--secret-file", f.secret_file, "shared secret of --servers");
}

int RunRemoteBenchCommand(const RemoteBenchFlags& f) {
  RemoteBenchOptions o;
  for (auto [text, out] :
       {std::pair{&f.block_size, &o.block_bytes}, std::pair{&f.total, &o.total_bytes}}) {
    Result<uint64_t> v = ParseByteSize(*text);
    if (!v.ok()) {
      std::cerr << "kvtier-bench remote: " << v.status().message() << "\n";
      return 2;
    }
    *out = *v;
  }
  o.queue_depth = f.queue_depth;
  o.connections = f.connections;
  o.batches_in_flight = f.batches_in_flight;
  o.rounds = f.rounds;
  o.servers = f.servers;
  o.secret_file = f.secret_file;
  auto r = RunRemoteBench(o);
  if (!r.ok()) {
    std::cerr << "kvtier-bench remote: " << r.status().ToString() << "\n";
    return 2;
  }
  std::cout << FormatRemoteBench(*r);
  return 0;
}

}  // namespace kvtier::bench
