#include "tools/bench/remote_bench.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
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
#include "tools/bench/inflight.h"

namespace kvtier::bench {
namespace {

// The shared secret of the in-process kvtier-memd and of the tier that talks to it.
constexpr char kLocalSecret[] = "kvtier-bench remote";

// CPU seconds (user + system) used so far by this process or by its reaped
// children.
double CpuSeconds(int who) {
  rusage u{};
  getrusage(who, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

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

// One iperf3 run: a one-shot server on a free port and one client stream
// sending `total_bytes` in writes of `block_bytes`.
Result<double> RunIperf(uint64_t block_bytes, uint64_t total_bytes, double* cpu_s) {
  const double cpu0 = CpuSeconds(RUSAGE_CHILDREN);
  const uint16_t port = FreePort();
  if (port == 0) return Status::Unavailable("no free loopback port for iperf3");
  const pid_t server = fork();
  if (server < 0) return FromErrno(errno, "fork iperf3");
  if (server == 0) {
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);  // its note on being stopped
    execlp("iperf3", "iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", std::to_string(port).c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string cmd = "iperf3 -J -c 127.0.0.1 -P 1 -p " + std::to_string(port) + " -n " +
                          std::to_string(total_bytes) + " -l " + std::to_string(block_bytes) +
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
  *cpu_s = CpuSeconds(RUSAGE_CHILDREN) - cpu0;
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("end")) {
    return Status::Unavailable("iperf3 gave no result (is iperf3 installed?)");
  }
  return j["end"]["sum_received"]["bits_per_second"].get<double>() / 8 / 1e9;
}

std::vector<Window> MakeWindows(const RemoteBenchOptions& o, std::vector<std::byte>& src,
                                std::vector<std::byte>& dst) {
  std::vector<Window> windows(o.batches_in_flight);
  for (uint32_t b = 0; b < o.batches_in_flight; ++b) {
    for (uint32_t i = 0; i < o.queue_depth; ++i) {
      const uint64_t n = uint64_t{b} * o.queue_depth + i;
      const size_t at = n * o.block_bytes;
      windows[b].writes.push_back({BlockKey{1, n},
                                   std::span<const std::byte>(src).subspan(at, o.block_bytes),
                                   std::nullopt});
      windows[b].reads.push_back({BlockKey{1, n}, std::span(dst).subspan(at, o.block_bytes)});
    }
  }
  return windows;
}

Result<RemoteBenchRound> RunTier(Tier& tier, const RemoteBenchOptions& o,
                                 std::vector<std::byte>& src, std::vector<std::byte>& dst) {
  const uint64_t batch_bytes = o.block_bytes * o.queue_depth;
  const uint64_t batches = std::max<uint64_t>(1, o.total_bytes / batch_bytes);
  const NamespaceId ns{0xBE4C};
  std::vector<Window> windows = MakeWindows(o, src, dst);
  std::fill(dst.begin(), dst.end(), std::byte{0});
  RemoteBenchRound round;
  const double cpu0 = CpuSeconds(RUSAGE_SELF);
  KVTIER_ASSIGN_OR_RETURN(round.write_gb_s,
                          StreamWindows(
                              windows, batches, batch_bytes,
                              [&](Window& w) { return tier.Write(ns, w.writes); }, "remote write"));
  KVTIER_ASSIGN_OR_RETURN(round.read_gb_s,
                          StreamWindows(
                              windows, batches, batch_bytes,
                              [&](Window& w) { return tier.Read(ns, w.reads); }, "remote read"));
  // Both directions moved total_bytes each.
  round.tier_cpu_s_per_gb = (CpuSeconds(RUSAGE_SELF) - cpu0) / (2 * batches * batch_bytes / 1e9);
  if (std::memcmp(src.data(), dst.data(), dst.size()) != 0) {
    return Status::Corruption("remote bench read back different bytes");
  }
  return round;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The in-process kvtier-memd holds every block in flight this many times
// over, so overwriting a key never waits for eviction; the tier's capacity
// says the same (more would be warned about at open: the servers hold less).
constexpr uint64_t kRoomInFlight = 2;

Result<std::unique_ptr<internal::memd::MemdServer>> StartLocalMemd(const RemoteBenchOptions& o) {
  internal::memd::MemdServerOptions m;
  m.listen = "127.0.0.1:0";
  m.secret = kLocalSecret;
  m.pool.slot_bytes = o.block_bytes + kBlockHeaderBytes;
  m.pool.pool_bytes = kRoomInFlight * o.queue_depth * o.batches_in_flight *
                      ((m.pool.slot_bytes + 4095) / 4096 * 4096);
  m.log = StderrLogSink(LogLevel::kWarning);
  return internal::memd::MemdServer::Start(m);
}

}  // namespace

Result<RemoteBenchResult> RunRemoteBench(const RemoteBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.Validate());
  std::unique_ptr<internal::memd::MemdServer> server;
  const uint64_t in_flight_bytes = uint64_t{o.queue_depth} * o.batches_in_flight * o.block_bytes;
  // Declared before the tier: requests it still runs when an error returns
  // early write into these until its destructor has drained them.
  std::vector<std::byte> src(in_flight_bytes), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
  TierOptions t;
  t.name = "remote";
  t.type = "remote";
  t.capacity_bytes = kRoomInFlight * in_flight_bytes;
  t.servers = o.servers;
  t.remote.connections = o.connections;
  t.remote.op_timeout_ms = 10000;
  if (o.servers.empty()) {
    KVTIER_ASSIGN_OR_RETURN(server, StartLocalMemd(o));
    t.servers = {"127.0.0.1:" + std::to_string(server->port())};
    t.remote.secret = kLocalSecret;
  } else {
    t.remote.secret_file = o.secret_file;
  }
  TierContext ctx;
  ctx.block_bytes = o.block_bytes;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, CreateTier(t, ctx));
  RemoteBenchResult res;
  res.options = o;
  std::vector<double> w, r;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    RemoteBenchRound one;
    double iperf_cpu_s = 0;
    KVTIER_ASSIGN_OR_RETURN(one.iperf_gb_s, RunIperf(o.block_bytes, o.total_bytes, &iperf_cpu_s));
    one.iperf_cpu_s_per_gb = iperf_cpu_s / (o.total_bytes / 1e9);
    KVTIER_ASSIGN_OR_RETURN(RemoteBenchRound tier_run, RunTier(*tier, o, src, dst));
    one.write_gb_s = tier_run.write_gb_s;
    one.read_gb_s = tier_run.read_gb_s;
    one.tier_cpu_s_per_gb = tier_run.tier_cpu_s_per_gb;
    res.rounds.push_back(one);
    w.push_back(one.write_gb_s / one.iperf_gb_s);
    r.push_back(one.read_gb_s / one.iperf_gb_s);
  }
  tier->Shutdown();
  res.median_write_ratio = Median(w);
  res.median_read_ratio = Median(r);
  return res;
}

std::string FormatRemoteBench(const RemoteBenchResult& r) {
  const RemoteBenchOptions& o = r.options;
  char buf[512];
  std::ostringstream out;
  std::snprintf(buf, sizeof buf,
                "remote tier over TCP loopback vs iperf3 (one stream, -l %llu -n %llu)\n"
                "block %llu KiB, %u batches x %u blocks in flight, %u connections, "
                "%llu payload bytes each way per round; GB = 10^9 bytes\n",
                static_cast<unsigned long long>(o.block_bytes),
                static_cast<unsigned long long>(o.total_bytes),
                static_cast<unsigned long long>(o.block_bytes >> 10), o.batches_in_flight,
                o.queue_depth, o.connections, static_cast<unsigned long long>(o.total_bytes));
  out << buf;
  std::snprintf(buf, sizeof buf, "%-7s %12s %11s %11s %9s %9s %12s %12s\n", "round", "iperf3 GB/s",
                "write GB/s", "read GB/s", "w/iperf3", "r/iperf3", "iperf3 cpu/GB", "tier cpu/GB");
  out << buf;
  for (size_t i = 0; i < r.rounds.size(); ++i) {
    const RemoteBenchRound& x = r.rounds[i];
    std::snprintf(buf, sizeof buf, "%-7zu %12.2f %11.2f %11.2f %9.2f %9.2f %12.3fs %11.3fs\n",
                  i + 1, x.iperf_gb_s, x.write_gb_s, x.read_gb_s, x.write_gb_s / x.iperf_gb_s,
                  x.read_gb_s / x.iperf_gb_s, x.iperf_cpu_s_per_gb, x.tier_cpu_s_per_gb);
    out << buf;
  }
  std::snprintf(buf, sizeof buf, "%-7s %12s %11s %11s %9.2f %9.2f\n", "median", "", "", "",
                r.median_write_ratio, r.median_read_ratio);
  out << buf;
  return out.str();
}

}  // namespace kvtier::bench
