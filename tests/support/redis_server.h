// Real redis-server processes for tests: each starts on a free loopback port
// with no persistence (--save '' --appendonly no) in its own temporary
// directory, and is killed when its owner is destroyed (or when the test
// process dies). RedisCluster builds a cluster of masters with
// `redis-cli --cluster create`.
//
// Ports come from outside the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), where the local ends of
// outgoing connections could take them between the check and the server's
// bind. Should another process win the port anyway, the server exits at
// start and Start tries another port; a server counts as ready only once
// the process answering on its port is the one Start launched.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "tests/support/child_process.h"

namespace kvtier::testing {

// Empty when redis-server and redis-cli are on PATH, else why not (for GTEST_SKIP).
std::string RedisUnavailableReason();

// A TLS port beside the plain one (which Start, Command and Io keep using).
struct RedisServerTls {
  std::string cert_file;  // the server's certificate and key (PEM)
  std::string key_file;
  std::string ca_file;               // CAs client certificates must chain to
  bool require_client_cert = false;  // --tls-auth-clients yes
};

struct RedisServerOptions {
  std::string password;                 // requirepass; empty = none
  bool cluster = false;                 // cluster-enabled yes
  std::optional<RedisServerTls> tls;    // also listen for TLS on tls_port()
  std::vector<std::string> extra_args;  // more "--name value" arguments
  // 0: a free port picked by Start. Else the port tried first, without
  // checking it is free, as if another process took it after the check
  // (tests of Start itself); other ports follow if the server cannot have it.
  uint16_t first_port = 0;
};

class RedisServer {
 public:
  // Starts a server and waits (up to 10 s) until it answers PING as the
  // process launched. A server that exits at start (its port taken) is
  // launched again on another port, a few times at most.
  static Result<std::unique_ptr<RedisServer>> Start(const RedisServerOptions& options = {});
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  // With options.tls: the TLS port (port() + 10000, checked free with it,
  // like a cluster's bus port) and its endpoint. A cluster node with TLS
  // runs its bus over TLS too (tls-cluster yes), on port() + 20000, and
  // announces its TLS port to clients that connect over TLS.
  uint16_t tls_port() const { return static_cast<uint16_t>(port_ + 10000); }
  std::string tls_endpoint() const { return "127.0.0.1:" + std::to_string(tls_port()); }

  // SIGKILL and reap; the port closes at once.
  void Kill();
  // Starts the server again on the same port (after Kill), empty.
  Status Restart();
  // SIGSTOP / SIGCONT: the server keeps its sockets but answers nothing.
  void Pause();
  void Resume();

  // Bytes the server process has moved through read and write system calls
  // since it was launched (rchar and wchar of /proc/<pid>/io), its client
  // sockets included: lets a test act while a request or a reply is part
  // way through. Zeros when the server is not running.
  struct IoBytes {
    uint64_t read = 0;
    uint64_t written = 0;
  };
  IoBytes Io() const;

  // Runs one command on a fresh connection (AUTH first when the server has a
  // password). Status replies and bulk strings come back as text, integers
  // in decimal, nil as "(nil)"; an error reply is IOError with its text.
  Result<std::string> Command(const std::vector<std::string>& argv) const;

 private:
  friend class RedisCluster;  // keeps redis-cli's output in a node's directory

  RedisServer(RedisServerOptions options, uint16_t port, std::string dir);
  Status Launch();
  // True when our child answers on port_: alive, and INFO names its pid.
  bool AnswersAsOurChild() const;

  const RedisServerOptions options_;
  const uint16_t port_;
  const std::string dir_;
  pid_t pid_ = -1;
  bool paused_ = false;
};

class RedisCluster {
 public:
  // Starts `masters` cluster-enabled servers, joins them with
  // redis-cli --cluster create (no replicas; killed after 30 s, not scaled:
  // redis-cli is not a sanitized build) and waits for cluster_state:ok.
  // With `tls` every node also listens for TLS and the nodes join over it.
  static Result<std::unique_ptr<RedisCluster>> Start(
      int masters = 3, const std::optional<RedisServerTls>& tls = std::nullopt);

  // Starts one more cluster-enabled server, has the cluster MEET it, and
  // waits until every node knows every other: a master that serves no slot
  // until some are migrated to it. The cluster owns it (node(size() - 1)).
  Result<RedisServer*> AddMaster();

  std::vector<std::string> endpoints() const;
  RedisServer& node(size_t i) { return *nodes_[i]; }
  size_t size() const { return nodes_.size(); }

 private:
  // Waits (up to 20 s) until every node reports cluster_state:ok, knows all
  // size() nodes, has none in handshake and knows the owner of every slot.
  // The last is not implied by the state: these clusters run with
  // cluster-require-full-coverage no, so a node just added reports ok
  // before it has learnt the slot map, and a slot it is then told to import
  // stays without an owner in its view (Redis ignores claims to a slot a
  // node imports), so it answers "CLUSTERDOWN Hash slot not served".
  Status WaitUntilJoined() const;

  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace kvtier::testing
