#include "tools/bench/redis_bench.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>

#include "kvtier/tier.h"
#include "tools/bench/run_command.h"

namespace kvtier::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

// How long one redis-benchmark run may take before it is killed.
constexpr std::chrono::minutes kPeerTimeout{10};

std::string Printf(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

bool PortFree(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

// True when a server on `port` answers an inline PING with +PONG.
bool Pings(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  char reply[8] = {};
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6 && recv(fd, reply, 5, 0) == 5 &&
                  std::string_view(reply, 5) == "+PONG";
  close(fd);
  return ok;
}

uint16_t FreePort(uint16_t from, uint16_t to) {
  for (uint16_t p = from; p < to; ++p) {
    if (PortFree(p)) return p;
  }
  return 0;
}

// A self-signed certificate for 127.0.0.1 and its key, in `dir`.
Status MakeCertificate(const std::string& dir) {
  const std::vector<std::string> argv = {"openssl",
                                         "req",
                                         "-x509",
                                         "-newkey",
                                         "ec",
                                         "-pkeyopt",
                                         "ec_paramgen_curve:prime256v1",
                                         "-nodes",
                                         "-keyout",
                                         dir + "/key.pem",
                                         "-out",
                                         dir + "/cert.pem",
                                         "-days",
                                         "2",
                                         "-subj",
                                         "/CN=kvtier-bench",
                                         "-addext",
                                         "subjectAltName=IP:127.0.0.1"};
  KVTIER_ASSIGN_OR_RETURN(CommandResult run, RunCommand(argv, std::chrono::seconds(30)));
  if (run.exit_code == 127) {
    return Status::Unavailable(
        "--tls: cannot run openssl to make a certificate; is openssl "
        "installed?");
  }
  if (run.exit_code != 0) {
    return Status::Unavailable("--tls: openssl req failed (exit " + std::to_string(run.exit_code) +
                               ")");
  }
  return Status::Ok();
}

// A redis-server of our own on a free loopback port, without persistence,
// with a TLS port too when asked; killed when this object goes away.
class ServerProcess {
 public:
  static Result<std::unique_ptr<ServerProcess>> Start(bool tls) {
    const uint16_t port = FreePort(26390, 26490);
    if (port == 0) return Status::Unavailable("no free port in 26390..26489 for redis-server");
    std::vector<std::string> args = {
        "redis-server", "--port", std::to_string(port), "--bind",  "127.0.0.1", "--save", "",
        "--appendonly", "no",     "--loglevel",         "warning", "--logfile", ""};
    std::string dir;
    uint16_t tls_port = 0;
    if (tls) {
      tls_port = FreePort(port + 1, 26590);
      if (tls_port == 0) return Status::Unavailable("no free TLS port for redis-server");
      std::string tmpl = "/tmp/kvtier-bench-tls-XXXXXX";
      if (mkdtemp(tmpl.data()) == nullptr) return FromErrno(errno, "mkdtemp " + tmpl);
      dir = tmpl;
      Status made = MakeCertificate(dir);
      if (!made.ok()) {
        std::filesystem::remove_all(dir);
        return made;
      }
      args.insert(args.end(),
                  {"--tls-port", std::to_string(tls_port), "--tls-cert-file", dir + "/cert.pem",
                   "--tls-key-file", dir + "/key.pem", "--tls-ca-cert-file", dir + "/cert.pem",
                   "--tls-auth-clients", "no"});
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return FromErrno(errno, "fork redis-server");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      const int null_fd = open("/dev/null", O_WRONLY);
      if (null_fd >= 0) {
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDERR_FILENO);
      }
      execvp("redis-server", argv.data());
      _exit(127);
    }
    auto server = std::unique_ptr<ServerProcess>(new ServerProcess(pid, port, tls_port, dir));
    for (int i = 0; i < 250; ++i) {
      if (Pings(port)) return server;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        server->pid_ = -1;
        return Status::Unavailable("redis-server exited at start (is it installed?)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::Unavailable("redis-server did not answer PING within 5 s");
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  // The port clients use: the TLS one when there is one.
  uint16_t port() const { return tls_port_ != 0 ? tls_port_ : port_; }
  // The certificate clients must trust; empty without TLS.
  std::string ca_file() const { return dir_.empty() ? "" : dir_ + "/cert.pem"; }

 private:
  ServerProcess(pid_t pid, uint16_t port, uint16_t tls_port, std::string dir)
      : pid_(pid), port_(port), tls_port_(tls_port), dir_(std::move(dir)) {}
  pid_t pid_;
  uint16_t port_;
  uint16_t tls_port_;
  std::string dir_;  // the certificate and its key, with TLS
};

// Client threads of the tier side, each with `pipeline` keys of its own.
struct TierClients {
  TierClients(uint32_t clients, uint32_t pipeline, uint64_t value_bytes) {
    for (uint32_t c = 0; c < clients; ++c) {
      auto& k = keys.emplace_back();
      auto& s = src.emplace_back(pipeline * value_bytes);
      auto& d = dst.emplace_back(pipeline * value_bytes);
      for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<std::byte>(i * 131 + c);
      std::fill(d.begin(), d.end(), std::byte{0});
      for (uint32_t i = 0; i < pipeline; ++i) k.push_back(BlockKey{c + 1, i + 1});
    }
  }
  std::vector<std::vector<BlockKey>> keys;
  std::vector<std::vector<std::byte>> src, dst;
};

constexpr NamespaceId kBenchNs{0xBE7C4};

// Runs `batches` batches per client thread; MB/s of payload, or the first error.
Result<double> RunTier(Tier& tier, TierClients& cl, uint64_t value_bytes, uint64_t batches,
                       bool write) {
  const size_t clients = cl.keys.size();
  std::vector<Status> errors(clients);
  const auto start = SteadyClock::now();
  std::vector<std::thread> threads;
  for (size_t c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::vector<WriteOp> w;
      std::vector<ReadOp> r;
      for (size_t i = 0; i < cl.keys[c].size(); ++i) {
        w.push_back({cl.keys[c][i], std::span(cl.src[c]).subspan(i * value_bytes, value_bytes),
                     std::nullopt});
        r.push_back({cl.keys[c][i], std::span(cl.dst[c]).subspan(i * value_bytes, value_bytes)});
      }
      for (uint64_t b = 0; b < batches && errors[c].ok(); ++b) {
        errors[c] = write ? tier.Write(kBenchNs, w).Wait() : tier.Read(kBenchNs, r).Wait();
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  for (const Status& st : errors) KVTIER_RETURN_IF_ERROR(st);
  if (!write && cl.dst != cl.src) return Status::Internal("tier read back different bytes");
  const uint64_t bytes = clients * batches * cl.keys[0].size() * value_bytes;
  return static_cast<double>(bytes) / 1e6 / secs;
}

Result<std::unique_ptr<Tier>> OpenTier(const std::string& server, const RedisBenchOptions& o,
                                       uint64_t value_bytes) {
  TierOptions t;
  t.name = "redis";
  t.type = "redis";
  t.capacity_bytes = 1ull << 40;
  t.servers = {server};
  t.redis.password = o.password;
  t.redis.connections = o.clients;
  t.redis.key_prefix = "kvtier-bench";
  t.redis.tls = o.tls;
  t.redis.tls_ca_file = o.tls_ca_file;
  TierContext ctx;
  ctx.block_bytes = value_bytes;
  return CreateTier(t, ctx);
}

}  // namespace

Status RedisBenchOptions::Validate() const {
  if (value_sizes.empty()) return Status::InvalidArgument("no value sizes");
  for (uint64_t s : value_sizes) {
    if (s == 0 || s > (256ull << 20)) {
      return Status::InvalidArgument("value size " + std::to_string(s) +
                                     " is out of range; expected 1 byte to 256MiB");
    }
  }
  if (pipeline == 0 || clients == 0 || clients > 64 || rounds == 0) {
    return Status::InvalidArgument("pipeline, clients (at most 64) and rounds must be at least 1");
  }
  if (!tls && !tls_ca_file.empty()) {
    return Status::InvalidArgument("--tls-ca-file is set without --tls");
  }
  if (!server.empty()) {
    std::string host;
    uint16_t port = 0;
    KVTIER_RETURN_IF_ERROR(SplitRedisServer(server, &host, &port));
  }
  return Status::Ok();
}

Status SplitRedisServer(const std::string& server, std::string* host, uint16_t* port) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--server '" + server + "': " + why +
                                   "; expected host:port with a port of 1 to 65535");
  };
  const size_t colon = server.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  if (colon == 0) return bad("no host");
  const std::string_view digits = std::string_view(server).substr(colon + 1);
  uint16_t p = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), p);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || p == 0) {
    return bad("bad port");
  }
  *host = server.substr(0, colon);
  *port = p;
  return Status::Ok();
}

Result<RedisBenchmarkRps> RunRedisBenchmark(const std::string& host, uint16_t port,
                                            const RedisBenchOptions& o, uint64_t value_bytes,
                                            uint64_t requests) {
  std::vector<std::string> argv = {"redis-benchmark",
                                   "-h",
                                   host,
                                   "-p",
                                   std::to_string(port),
                                   "-t",
                                   "set,get",
                                   "-d",
                                   std::to_string(value_bytes),
                                   "-P",
                                   std::to_string(o.pipeline),
                                   "-c",
                                   std::to_string(o.clients),
                                   "-n",
                                   std::to_string(requests),
                                   "--csv"};
  if (o.tls) {
    argv.push_back("--tls");
    if (!o.tls_ca_file.empty()) argv.insert(argv.end(), {"--cacert", o.tls_ca_file});
  }
  if (!o.password.empty()) {
    // No shell parses this list, so any password travels unchanged.
    argv.insert(argv.end(), {"-a", o.password, "--no-auth-warning"});
  }
  // The message names the server and the sizes but never the arguments: one
  // of them may be the password.
  const std::string what = Printf("redis-benchmark against %s port %u (-d %" PRIu64 ")",
                                  host.c_str(), unsigned{port}, value_bytes);
  KVTIER_ASSIGN_OR_RETURN(CommandResult run, RunCommand(argv, kPeerTimeout));
  RedisBenchmarkRps r;
  std::string_view out = run.output;
  while (!out.empty()) {
    const size_t eol = std::min(out.find('\n'), out.size());
    const std::string line(out.substr(0, eol));
    out.remove_prefix(std::min(eol + 1, out.size()));
    double rps = 0;
    if (std::sscanf(line.c_str(), "\"SET\",\"%lf\"", &rps) == 1) r.set_rps = rps;
    if (std::sscanf(line.c_str(), "\"GET\",\"%lf\"", &rps) == 1) r.get_rps = rps;
  }
  if (run.exit_code == 127) {
    return Status::Unavailable(what + ": cannot run redis-benchmark; is redis-tools installed?");
  }
  if (run.exit_code != 0 || r.set_rps <= 0 || r.get_rps <= 0) {
    return Status::Unavailable(what + " failed (exit " + std::to_string(run.exit_code) +
                               ") or printed no SET and GET rates");
  }
  return r;
}

Result<RedisBenchReport> RunRedisBench(const RedisBenchOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  RedisBenchOptions o = options;
  std::unique_ptr<ServerProcess> own;
  RedisBenchReport report;
  report.server = o.server;
  report.tls = o.tls;
  if (report.server.empty()) {
    auto started = ServerProcess::Start(o.tls);
    if (!started.ok()) return started.status();
    own = std::move(started).value();
    report.server = "127.0.0.1:" + std::to_string(own->port());
    o.tls_ca_file = own->ca_file();
  }
  std::string host;
  uint16_t port = 0;
  KVTIER_RETURN_IF_ERROR(SplitRedisServer(report.server, &host, &port));
  for (uint64_t size : o.value_sizes) {
    const uint64_t per_batch = uint64_t{o.clients} * o.pipeline;
    const uint64_t batches = std::max<uint64_t>(1, o.total_bytes / size / per_batch);
    const uint64_t requests = batches * per_batch;
    auto tier = OpenTier(report.server, o, size);
    if (!tier.ok()) return tier.status();
    TierClients clients(o.clients, o.pipeline, size);
    RedisBenchRow set{size, "SET", o.clients, o.pipeline, requests};
    RedisBenchRow get{size, "GET", o.clients, o.pipeline, requests};
    for (uint32_t round = 0; round < o.rounds; ++round) {
      auto peer = RunRedisBenchmark(host, port, o, size, requests);
      if (!peer.ok()) return peer.status();
      set.redis_benchmark_mb_s = std::max(set.redis_benchmark_mb_s, peer->set_rps * size / 1e6);
      get.redis_benchmark_mb_s = std::max(get.redis_benchmark_mb_s, peer->get_rps * size / 1e6);
      auto w = RunTier(**tier, clients, size, batches, /*write=*/true);
      if (!w.ok()) return w.status();
      auto r = RunTier(**tier, clients, size, batches, /*write=*/false);
      if (!r.ok()) return r.status();
      set.tier_mb_s = std::max(set.tier_mb_s, *w);
      get.tier_mb_s = std::max(get.tier_mb_s, *r);
    }
    for (auto& keys : clients.keys) (void)(*tier)->Remove(kBenchNs, keys).Wait();
    (*tier)->Shutdown();
    set.ratio = set.tier_mb_s / set.redis_benchmark_mb_s;
    get.ratio = get.tier_mb_s / get.redis_benchmark_mb_s;
    report.rows.push_back(set);
    report.rows.push_back(get);
  }
  return report;
}

std::string FormatRedisBench(const RedisBenchReport& report) {
  std::string out = "redis tier vs redis-benchmark, same server " + report.server +
                    (report.tls ? " over TLS (both sides)" : "") +
                    ", same run (best of rounds)\n"
                    "MB = 10^6 payload bytes; clients = redis-benchmark -c = tier client threads "
                    "and connections;\npipeline = redis-benchmark -P = blocks per tier batch; "
                    "ratio = tier / redis-benchmark\n";
  out += Printf("%8s %4s %7s %8s %8s %16s %10s %6s\n", "value", "op", "clients", "pipeline",
                "requests", "redis-bench MB/s", "tier MB/s", "ratio");
  for (const RedisBenchRow& r : report.rows) {
    const std::string size =
        r.value_bytes % (1 << 20) == 0 ? std::to_string(r.value_bytes >> 20) + "MiB"
        : r.value_bytes % 1024 == 0    ? std::to_string(r.value_bytes >> 10) + "KiB"
                                       : std::to_string(r.value_bytes) + "B";
    out += Printf("%8s %4s %7u %8u %8" PRIu64 " %16.0f %10.0f %6.2f\n", size.c_str(), r.op.c_str(),
                  r.clients, r.pipeline, r.requests, r.redis_benchmark_mb_s, r.tier_mb_s, r.ratio);
  }
  return out;
}

std::string RedisBenchJson(const RedisBenchReport& report) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const RedisBenchRow& r : report.rows) {
    rows.push_back({{"value_bytes", r.value_bytes},
                    {"op", r.op},
                    {"clients", r.clients},
                    {"pipeline", r.pipeline},
                    {"requests", r.requests},
                    {"redis_benchmark_mb_s", r.redis_benchmark_mb_s},
                    {"tier_mb_s", r.tier_mb_s},
                    {"ratio", r.ratio}});
  }
  nlohmann::ordered_json j = {
      {"server", report.server}, {"tls", report.tls}, {"rows", std::move(rows)}};
  return j.dump();
}

}  // namespace kvtier::bench
