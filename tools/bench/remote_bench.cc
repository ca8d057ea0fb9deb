#include "tools/bench/remote_bench.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "kvtier/tier.h"
#include "tiers/remote/memd_server.h"

namespace kvtier::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

uint16_t FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// One iperf3 run: a one-shot server on a free port and one client stream.
Result<double> RunIperf(uint64_t block_bytes, uint32_t seconds) {
  const uint16_t port = FreePort();
  if (port == 0) return Status::Unavailable("no free loopback port for iperf3");
  const pid_t server = fork();
  if (server < 0) return FromErrno(errno, "fork iperf3");
  if (server == 0) {
    freopen("/dev/null", "w", stdout);
    execlp("iperf3", "iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", std::to_string(port).c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string cmd = "iperf3 -J -c 127.0.0.1 -P 1 -p " + std::to_string(port) + " -t " +
                          std::to_string(seconds) + " -l " + std::to_string(block_bytes) +
                          " 2>/dev/null";
  std::string out;
  for (int attempt = 0; attempt < 50 && out.find("\"end\"") == std::string::npos; ++attempt) {
    // The server needs a moment to listen; a refused client prints an error.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    out.clear();
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) break;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
    if (out.find("\"error\"") != std::string::npos) out.clear();
  }
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("end")) {
    return Status::Unavailable("iperf3 gave no result (is iperf3 installed?)");
  }
  return j["end"]["sum_received"]["bits_per_second"].get<double>() / 8 / 1e9;
}

struct TierRun {
  double write_gb_s = 0;
  double read_gb_s = 0;
};

Result<TierRun> RunTier(Tier& tier, const RemoteBenchOptions& o, std::vector<std::byte>& src,
                        std::vector<std::byte>& dst) {
  const uint64_t batches = std::max<uint64_t>(1, o.total_bytes / (o.block_bytes * o.queue_depth));
  const NamespaceId ns{0xBE4C};
  std::vector<WriteOp> w(o.queue_depth);
  std::vector<ReadOp> r(o.queue_depth);
  for (uint32_t i = 0; i < o.queue_depth; ++i) {
    w[i] = {BlockKey{1, i}, std::span(src).subspan(i * o.block_bytes, o.block_bytes)};
    r[i] = {BlockKey{1, i}, std::span(dst).subspan(i * o.block_bytes, o.block_bytes)};
  }
  TierRun run;
  auto t0 = SteadyClock::now();
  for (uint64_t b = 0; b < batches; ++b) {
    KVTIER_RETURN_IF_ERROR(tier.Write(ns, w).Wait().WithContext("remote write"));
  }
  auto t1 = SteadyClock::now();
  for (uint64_t b = 0; b < batches; ++b) {
    KVTIER_RETURN_IF_ERROR(tier.Read(ns, r).Wait().WithContext("remote read"));
  }
  auto t2 = SteadyClock::now();
  const double bytes = static_cast<double>(batches * o.queue_depth * o.block_bytes);
  run.write_gb_s = bytes / 1e9 / std::chrono::duration<double>(t1 - t0).count();
  run.read_gb_s = bytes / 1e9 / std::chrono::duration<double>(t2 - t1).count();
  if (std::memcmp(src.data(), dst.data(), dst.size()) != 0) {
    return Status::Corruption("remote bench read back different bytes");
  }
  return run;
}

}  // namespace

Status RemoteBenchOptions::Validate() const {
  if (block_bytes == 0 || block_bytes > (64ull << 20)) {
    return Status::InvalidArgument("block size must be 1 byte to 64 MiB");
  }
  if (queue_depth == 0 || queue_depth > 256) return Status::InvalidArgument("queue depth 1..256");
  if (rounds == 0 || iperf_seconds == 0) return Status::InvalidArgument("rounds and seconds >= 1");
  if (!servers.empty() && secret_file.empty()) {
    return Status::InvalidArgument("--servers needs --secret-file");
  }
  return Status::Ok();
}

Result<RemoteBenchResult> RunRemoteBench(const RemoteBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.Validate());
  std::unique_ptr<internal::memd::MemdServer> server;
  TierOptions t;
  t.name = "remote";
  t.type = "remote";
  t.capacity_bytes = 4ull * o.queue_depth * o.block_bytes;
  t.servers = o.servers;
  t.remote.connections = o.connections;
  t.remote.op_timeout_ms = 10000;
  if (o.servers.empty()) {
    internal::memd::MemdServerOptions m;
    m.listen = "127.0.0.1:0";
    m.secret = "kvtier-bench remote";
    m.pool.slot_bytes = o.block_bytes + kBlockHeaderBytes;
    m.pool.pool_bytes = 2ull * o.queue_depth * ((m.pool.slot_bytes + 4095) / 4096 * 4096);
    m.log = StderrLogSink(LogLevel::kWarning);
    KVTIER_ASSIGN_OR_RETURN(server, internal::memd::MemdServer::Start(m));
    t.servers = {"127.0.0.1:" + std::to_string(server->port())};
    t.remote.secret = m.secret;
  } else {
    t.remote.secret_file = o.secret_file;
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, CreateTier(t, TierContext{o.block_bytes}));
  std::vector<std::byte> src(o.queue_depth * o.block_bytes), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
  RemoteBenchResult res{o.block_bytes, o.queue_depth, o.connections, 0, 0, 0};
  for (uint32_t round = 0; round < o.rounds; ++round) {
    KVTIER_ASSIGN_OR_RETURN(double iperf, RunIperf(o.block_bytes, o.iperf_seconds));
    res.iperf_gb_s = std::max(res.iperf_gb_s, iperf);
    KVTIER_ASSIGN_OR_RETURN(TierRun run, RunTier(*tier, o, src, dst));
    res.write_gb_s = std::max(res.write_gb_s, run.write_gb_s);
    res.read_gb_s = std::max(res.read_gb_s, run.read_gb_s);
  }
  tier->Shutdown();
  return res;
}

std::string FormatRemoteBench(const RemoteBenchResult& r) {
  char buf[512];
  std::ostringstream out;
  out << "remote tier over TCP loopback vs iperf3 (one stream, -l block), best of rounds\n";
  std::snprintf(buf, sizeof buf, "%-10s %-6s %-6s %-12s %-12s %-12s %-8s %-8s\n", "block", "qd",
                "conns", "iperf3 GB/s", "write GB/s", "read GB/s", "w/iperf", "r/iperf");
  out << buf;
  std::snprintf(buf, sizeof buf, "%-10s %-6u %-6u %-12.2f %-12.2f %-12.2f %-8.2f %-8.2f\n",
                (std::to_string(r.block_bytes >> 10) + "KiB").c_str(), r.queue_depth, r.connections,
                r.iperf_gb_s, r.write_gb_s, r.read_gb_s, r.write_gb_s / r.iperf_gb_s,
                r.read_gb_s / r.iperf_gb_s);
  out << buf;
  return out.str();
}

}  // namespace kvtier::bench
