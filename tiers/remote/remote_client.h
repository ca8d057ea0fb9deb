// RemoteClient: the remote tier's connections to its kvtier-memd servers.
// One AsioLoop thread drives every connection. Per server it keeps
// `connections` TCP connections, each authenticated by the HMAC handshake and
// carrying many requests in flight; a lost connection is re-opened on a
// later request once its backoff has passed (doubling from
// reconnect_backoff_ms up to reconnect_backoff_max_ms). Requests go to the
// server's ready connections first, so they fail at once with Unavailable
// only while none of its connections can be used. Every request has a
// deadline (op_timeout_ms, counted from when its connection is ready: one
// still connecting has connect_timeout_ms for that). Past it, once the
// connection has also moved no
// byte for op_timeout_ms (a server that stopped), the connection is closed
// and everything on it fails, the late requests with DeadlineExceeded: a
// server that stops fails its requests op_timeout_ms after its last byte
// (plus one timer tick), not before their deadlines. A connection still
// moving bytes (large blocks, many queued ahead) keeps a late request until
// its cap: the deadline plus its bytes and those queued ahead of it at 4 MiB/s.
//
// Buffers: a request's source and destination memory is touched only until
// its callback has run for every item (the socket is closed before a failing
// callback runs).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"
#include "tiers/remote/rdma_transport.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::internal::memd {

struct RemoteClientOptions {
  std::vector<std::string> servers;  // "host:port"
  std::string secret;
  uint32_t connections = 2;            // per server
  uint32_t connect_timeout_ms = 1000;  // TCP connect plus handshake
  uint32_t op_timeout_ms = 2000;       // deadline of every request (see above)
  uint32_t reconnect_backoff_ms = 50;
  uint32_t reconnect_backoff_max_ms = 2000;
  // tcp, or rdma: each connection also connects a queue pair (RDMA_HELLO)
  // and moves block bytes with one-sided WRITE/READ (rdma_link.h).
  std::string transport = "tcp";
  // rdma: the device, asked for once by Create and shared by every
  // connection and reconnect; null opens the first one.
  RdmaDeviceFactory rdma_device;
  // rdma: times how long a LEASE_REPLY lets a connection read its blocks
  // (rdma_link.h); null: SystemClock(). Deadlines and backoff keep to the
  // steady clock.
  std::shared_ptr<Clock> clock;
  // A server entry whose host is a name (not an IP literal) is looked up
  // again on every connect, so a server that comes back at a new address (a
  // rescheduled pod) is found. The connect itself goes to the last address
  // known and the answer serves the next one: a slow or failing lookup holds
  // up neither connects nor shutdown, and a failed one keeps the address.
  // Create looks each name up once, on the caller's thread, and fails on one
  // that does not resolve. Null: the system resolver (IPv4). Tests set it to
  // map an entry to the "ip:port" to connect to; it may run on any thread,
  // also after the client is gone, so it must own what it uses.
  using Resolve = std::function<Result<std::string>(const std::string& entry)>;
  Resolve resolve;
};

// Called once per item, on the loop thread, with the item's index in the call.
using ItemDone = std::function<void(size_t item, const Status& status, uint64_t bytes)>;
// Called on the loop thread when a server is reached whose instance id
// differs from the one seen before (it restarted empty).
using RestartHook = std::function<void(size_t server)>;

struct PutOp {
  BlockKey key;
  std::span<const std::byte> payload;
  std::optional<uint64_t> checksum;  // PayloadChecksum of payload if known
};

class RemoteClient {
 public:
  // Parses the endpoints and starts the loop; connects lazily.
  static Result<std::unique_ptr<RemoteClient>> Create(const RemoteClientOptions& options,
                                                      std::shared_ptr<LogSink> log,
                                                      RestartHook on_restart);
  virtual ~RemoteClient() = default;

  virtual size_t server_count() const = 0;
  virtual const std::string& endpoint(size_t server) const = 0;

  // REQUIRES: 1..kMaxBatchItems items. Results per item: OK with the payload
  // size, or the server's refusal (ResourceExhausted, InvalidArgument, ...).
  virtual void Put(size_t server, NamespaceId ns, std::vector<PutOp> ops, ItemDone done) = 0;
  // OK with the payload size (header and checksum verified), NotFound,
  // Corruption, InvalidArgument (dst too small); transport rdma also
  // Unavailable for a block whose lease ended before its READ did.
  virtual void Get(size_t server, NamespaceId ns, std::vector<std::span<std::byte>> dsts,
                   std::vector<BlockKey> keys, ItemDone done) = 0;
  virtual void Exists(size_t server, NamespaceId ns, std::vector<BlockKey> keys, ItemDone done) = 0;
  virtual void Remove(size_t server, NamespaceId ns, std::vector<BlockKey> keys, ItemDone done) = 0;
  // Blocks until the server answers STATS or fails (within the deadline).
  virtual Result<Stats> GetStats(size_t server) = 0;
  // transport: rdma: registers `memory` so that blocks inside it move
  // without staging copies; every connection, open already or opened later,
  // uses it from its next batch on. Returns the bytes registered (0 over
  // TCP, after Shutdown(), or when registration fails).
  // REQUIRES: `memory` stays mapped until Shutdown().
  virtual uint64_t RegisterHostMemory(std::span<std::byte> memory) = 0;

  // Fails everything in flight with Unavailable, closes the connections and
  // joins the loop thread. Calls after it answer at once: every item fails
  // with Unavailable, GetStats too, RegisterHostMemory returns 0. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace kvtier::internal::memd
