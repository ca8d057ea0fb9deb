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
#include <random>
#include <thread>

#include "tests/support/child_process.h"

namespace kvtier::testing {
namespace {

bool OnPath(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

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

// A port whose cluster bus port (+10000) is free too. Never 6379: a system
// redis may hold it.
uint16_t PickPort() {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  std::uniform_int_distribution<int> dist(21000, 54000);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const auto port = static_cast<uint16_t>(dist(rng));
    if (PortFree(port) && PortFree(static_cast<uint16_t>(port + 10000))) return port;
  }
  return 0;
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
  const uint16_t port = PickPort();
  if (port == 0) return Status::Unavailable("no free loopback port for redis-server");
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("kvtier-redis-" + std::to_string(getpid()) + "-" + std::to_string(port)))
                        .string();
  std::filesystem::create_directories(dir);
  std::unique_ptr<RedisServer> server(new RedisServer(options, port, std::move(dir)));
  KVTIER_RETURN_IF_ERROR(server->Launch());
  return server;
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
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  auto child = SpawnChild(std::move(args));
  if (!child.ok()) return child.status();
  pid_ = *child;
  Status st = WaitUntilReady(&pid_, "redis-server on port " + std::to_string(port_),
                             std::chrono::seconds(10), std::chrono::milliseconds(20),
                             [&] { return Command({"PING"}).ok(); });
  if (!st.ok())
    return Status::Unavailable(std::string(st.message()) + "; see " + dir_ + "/redis.log");
  return Status::Ok();
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

Result<std::string> RedisServer::Command(const std::vector<std::string>& argv) const {
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, timeval{2, 0});
  if (c == nullptr || c->err != 0) {
    std::string why = c != nullptr ? c->errstr : "no context";
    redisFree(c);
    return Status::Unavailable("connect to redis-server " + endpoint() + ": " + why);
  }
  redisSetTimeout(c, timeval{5, 0});
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
  Result<std::string> out = Status::Internal("unset");
  if (!options_.password.empty()) {
    auto auth = run({"AUTH", options_.password});
    if (!auth.ok()) {
      redisFree(c);
      return auth.status();
    }
  }
  out = run(argv);
  redisFree(c);
  return out;
}

Result<std::unique_ptr<RedisCluster>> RedisCluster::Start(int masters) {
  std::unique_ptr<RedisCluster> cluster(new RedisCluster());
  std::string cmd = "redis-cli --cluster create";
  for (int i = 0; i < masters; ++i) {
    auto s = RedisServer::Start(RedisServerOptions{.cluster = true});
    if (!s.ok()) return s.status();
    cmd += " " + (*s)->endpoint();
    cluster->nodes_.push_back(std::move(s).value());
  }
  cmd += " --cluster-replicas 0 --cluster-yes >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return Status::Unavailable("failed: " + cmd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (auto& node : cluster->nodes_) {
    for (;;) {
      auto info = node->Command({"CLUSTER", "INFO"});
      if (info.ok() && info->find("cluster_state:ok") != std::string::npos) break;
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::Unavailable("redis cluster did not reach cluster_state:ok in 20 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return cluster;
}

std::vector<std::string> RedisCluster::endpoints() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) out.push_back(n->endpoint());
  return out;
}

}  // namespace kvtier::testing
