#include "tests/support/redis_server.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <utility>

#include "tests/support/child_process.h"

namespace kvtier::testing {
namespace {

bool PortFree(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// A cluster node also listens on its port + 10000 (the cluster bus); a
// server with TLS takes that port for TLS, and a cluster node with TLS
// then has its bus on port + 20000.
constexpr int kBusPortOffset = 10000;
constexpr int kTlsBusPortOffset = 20000;
// Servers that exit at start (their port taken after the check) are
// launched again on another port this many times in all.
constexpr int kLaunchAttempts = 8;

// The ports the kernel hands out as the local ends of outgoing connections;
// Linux's default when the file cannot be read.
std::pair<int, int> EphemeralPorts() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0, hi = 0;
  if (in >> lo >> hi && 0 < lo && lo <= hi) return {lo, hi};
  return {32768, 60999};
}

// Ports a server may take: it and its bus port outside the ephemeral range
// (a connection made by anyone on the host, this test's clients included,
// could take a port there between our check and the server's bind), at
// least 10000 (below, fixed service ports), never 6379 (a system redis).
// Should a host's range leave none, any port: Start's retry copes.
const std::vector<uint16_t>& CandidatePorts() {
  static const std::vector<uint16_t> ports = [] {
    const auto [lo, hi] = EphemeralPorts();
    auto outside = [lo, hi](int p) { return p < lo || p > hi; };
    std::vector<uint16_t> usable, any;
    for (int p = 10000; p + kBusPortOffset <= 65535; ++p) {
      if (p == 6379) continue;
      any.push_back(static_cast<uint16_t>(p));
      if (outside(p) && outside(p + kBusPortOffset)) usable.push_back(static_cast<uint16_t>(p));
    }
    return usable.empty() ? any : usable;
  }();
  return ports;
}

// A candidate port whose bus port is free too, and with `tls_bus` the port
// of a TLS cluster bus; 0 when none was found. (The TLS bus port may fall in
// the ephemeral range: Start's retry copes should it be taken.)
uint16_t PickPort(bool tls_bus) {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  const std::vector<uint16_t>& ports = CandidatePorts();
  std::uniform_int_distribution<size_t> dist(0, ports.size() - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const uint16_t port = ports[dist(rng)];
    if (!PortFree(port) || !PortFree(static_cast<uint16_t>(port + kBusPortOffset))) continue;
    if (!tls_bus) return port;
    if (port + kTlsBusPortOffset <= 65535 &&
        PortFree(static_cast<uint16_t>(port + kTlsBusPortOffset)))
      return port;
  }
  return 0;
}

// The last line of a server's log: why it exited, when it did.
std::string LastLogLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.empty() ? "(empty log)" : last;
}

std::string ReplyText(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      return std::to_string(r->integer);
    case REDIS_REPLY_NIL:
      return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r->elements; ++i) out += (i ? "\n" : "") + ReplyText(r->element[i]);
      return out;
    }
    default:
      return std::string(r->str, r->len);
  }
}

// Runs `argv` on a fresh connection to 127.0.0.1:port, after AUTH when
// `password` is set; `timeout` bounds the connect and each reply.
Result<std::string> RunCommand(uint16_t port, const std::string& password,
                               const std::vector<std::string>& argv, timeval timeout) {
  const std::string where = "127.0.0.1:" + std::to_string(port);
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, timeout);
  if (c == nullptr || c->err != 0) {
    std::string why = c != nullptr ? c->errstr : "no context";
    redisFree(c);
    return Status::Unavailable("connect to redis-server " + where + ": " + why);
  }
  redisSetTimeout(c, timeout);
  auto run = [c](const std::vector<std::string>& args) -> Result<std::string> {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(ptrs.size()), ptrs.data(), lens.data()));
    if (r == nullptr) return Status::Unavailable(std::string("redis command: ") + c->errstr);
    Result<std::string> out =
        r->type == REDIS_REPLY_ERROR
            ? Result<std::string>(Status::IOError(std::string(r->str, r->len)))
            : Result<std::string>(ReplyText(r));
    freeReplyObject(r);
    return out;
  };
  if (!password.empty()) {
    auto auth = run({"AUTH", password});
    if (!auth.ok()) {
      redisFree(c);
      return auth.status();
    }
  }
  Result<std::string> out = run(argv);
  redisFree(c);
  return out;
}

// The process_id line of INFO server; -1 when absent.
pid_t InfoPid(const std::string& info) {
  const std::string key = "process_id:";
  const size_t at = info.find(key);
  if (at == std::string::npos) return -1;
  return static_cast<pid_t>(std::strtol(info.c_str() + at + key.size(), nullptr, 10));
}

}  // namespace

std::string RedisUnavailableReason() {
  if (!OnPath("redis-server"))
    return "redis-server is not installed (apt-get install redis-server)";
  if (!OnPath("redis-cli")) return "redis-cli is not installed (apt-get install redis-tools)";
  return "";
}

RedisServer::RedisServer(RedisServerOptions options, uint16_t port, std::string dir)
    : options_(std::move(options)), port_(port), dir_(std::move(dir)) {}

RedisServer::~RedisServer() {
  Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Result<std::unique_ptr<RedisServer>> RedisServer::Start(const RedisServerOptions& options) {
  Status last;
  for (int attempt = 0; attempt < kLaunchAttempts; ++attempt) {
    const uint16_t port = attempt == 0 && options.first_port != 0
                              ? options.first_port
                              : PickPort(options.cluster && options.tls);
    if (port == 0) return Status::Unavailable("no free loopback port for redis-server");
    std::string dir = (std::filesystem::temp_directory_path() /
                       ("kvtier-redis-" + std::to_string(getpid()) + "-" + std::to_string(port)))
                          .string();
    std::filesystem::create_directories(dir);
    std::unique_ptr<RedisServer> server(new RedisServer(options, port, std::move(dir)));
    last = server->Launch();
    if (last.ok()) return server;
    // Alive yet not ready in 10 s: no port clash, so another port would not help.
    if (server->pid_ > 0) return last;
  }
  return Status::Unavailable("redis-server exited at start on " + std::to_string(kLaunchAttempts) +
                             " ports in a row; last: " + std::string(last.message()));
}

Status RedisServer::Launch() {
  std::vector<std::string> args = {"redis-server",
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--daemonize",
                                   "no",
                                   "--dir",
                                   dir_,
                                   "--logfile",
                                   dir_ + "/redis.log"};
  if (!options_.password.empty()) args.insert(args.end(), {"--requirepass", options_.password});
  if (options_.cluster) {
    args.insert(args.end(),
                {"--cluster-enabled", "yes", "--cluster-config-file", dir_ + "/nodes.conf",
                 "--cluster-node-timeout", "60000", "--cluster-require-full-coverage", "no"});
  }
  if (options_.tls) {
    const RedisServerTls& t = *options_.tls;
    args.insert(args.end(),
                {"--tls-port", std::to_string(tls_port()), "--tls-cert-file", t.cert_file,
                 "--tls-key-file", t.key_file, "--tls-ca-cert-file", t.ca_file,
                 "--tls-auth-clients", t.require_client_cert ? "yes" : "no"});
    if (options_.cluster) args.insert(args.end(), {"--tls-cluster", "yes"});
  }
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  auto child = SpawnChild(std::move(args));
  if (!child.ok()) return child.status();
  pid_ = *child;
  // WaitUntilReady sees our child exit (its port taken: bind fails); the
  // probe sees whether the server answering is our child, not another one
  // that holds the port while ours has yet to fail its bind.
  Status st = WaitUntilReady(&pid_, "redis-server on port " + std::to_string(port_),
                             std::chrono::seconds(10), std::chrono::milliseconds(20),
                             [&] { return AnswersAsOurChild(); });
  if (!st.ok()) {
    return Status::Unavailable(std::string(st.message()) +
                               "; its log ends: " + LastLogLine(dir_ + "/redis.log"));
  }
  return Status::Ok();
}

bool RedisServer::AnswersAsOurChild() const {
  // Short waits: a listener that never answers (not a redis) must not hold
  // up the polls that would see our child exit.
  auto info = RunCommand(port_, options_.password, {"INFO", "server"}, timeval{0, 250 * 1000});
  return info.ok() && InfoPid(*info) == pid_;
}

void RedisServer::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  paused_ = false;
}

Status RedisServer::Restart() {
  Kill();
  return Launch();
}

void RedisServer::Pause() {
  if (pid_ > 0 && kill(pid_, SIGSTOP) == 0) paused_ = true;
}

void RedisServer::Resume() {
  if (pid_ > 0 && kill(pid_, SIGCONT) == 0) paused_ = false;
}

RedisServer::IoBytes RedisServer::Io() const {
  IoBytes io;
  if (pid_ <= 0) return io;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/io");
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == "rchar:") io.read = value;
    if (name == "wchar:") io.written = value;
  }
  return io;
}

Result<std::string> RedisServer::Command(const std::vector<std::string>& argv) const {
  return RunCommand(port_, options_.password, argv, timeval{5, 0});
}

Result<std::unique_ptr<RedisCluster>> RedisCluster::Start(
    int masters, const std::optional<RedisServerTls>& tls) {
  std::unique_ptr<RedisCluster> cluster(new RedisCluster());
  std::string cmd = "exec redis-cli";
  if (tls) cmd += " --tls --cacert '" + tls->ca_file + "'";
  cmd += " --cluster create";
  for (int i = 0; i < masters; ++i) {
    auto s = RedisServer::Start(RedisServerOptions{.cluster = true, .tls = tls});
    if (!s.ok()) return s.status();
    cmd += " " + (tls ? (*s)->tls_endpoint() : (*s)->endpoint());
    cluster->nodes_.push_back(std::move(s).value());
  }
  // Joining takes a second or two. redis-cli waits without a bound (a node
  // that never answers, a join that never completes): it is killed at the
  // deadline so a stuck setup fails the test instead of hanging CI. The
  // deadline is not scaled: redis-cli and redis-server are not our builds.
  const std::string log =
      cluster->nodes_.empty() ? "/dev/null" : cluster->nodes_[0]->dir_ + "/cluster-create.log";
  cmd += " --cluster-replicas 0 --cluster-yes >'" + log + "' 2>&1";
  Status created = RunWithDeadline({"/bin/sh", "-c", cmd}, std::chrono::seconds(30));
  if (!created.ok()) {
    return Status::Unavailable("redis-cli --cluster create: " + std::string(created.message()) +
                               "; its output ends: " + LastLogLine(log));
  }
  KVTIER_RETURN_IF_ERROR(cluster->WaitUntilJoined());
  return cluster;
}

Result<RedisServer*> RedisCluster::AddMaster() {
  if (nodes_.empty()) return Status::InvalidArgument("AddMaster: the cluster has no node");
  auto s = RedisServer::Start(RedisServerOptions{.cluster = true});
  if (!s.ok()) return s.status();
  RedisServer* added = s->get();
  auto met = nodes_[0]->Command({"CLUSTER", "MEET", "127.0.0.1", std::to_string(added->port())});
  if (!met.ok()) return met.status();
  nodes_.push_back(std::move(s).value());
  KVTIER_RETURN_IF_ERROR(WaitUntilJoined());
  return added;
}

Status RedisCluster::WaitUntilJoined() const {
  const std::string known = "cluster_known_nodes:" + std::to_string(nodes_.size()) + "\r";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (const auto& node : nodes_) {
    for (;;) {
      auto info = node->Command({"CLUSTER", "INFO"});
      auto nodes = node->Command({"CLUSTER", "NODES"});
      if (info.ok() && nodes.ok() && info->find("cluster_state:ok") != std::string::npos &&
          info->find(known) != std::string::npos &&
          info->find("cluster_slots_assigned:16384\r") != std::string::npos &&
          nodes->find("handshake") == std::string::npos)
        break;
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::Unavailable(
            "redis cluster: " + node->endpoint() + " did not reach cluster_state:ok knowing all " +
            std::to_string(nodes_.size()) + " nodes and every slot's owner in 20 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return Status::Ok();
}

std::vector<std::string> RedisCluster::endpoints() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) out.push_back(n->endpoint());
  return out;
}

}  // namespace kvtier::testing
