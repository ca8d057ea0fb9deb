// The kvtier-memd server as a library: a MemdPool served over the memd
// protocol (remote_protocol.h) on one TCP listener, by one I/O thread.
// tools/memd wraps it in a process; tests may also run it in-process.
//
// Every connection must complete the HMAC handshake before anything else,
// within handshake_timeout_ms; a malformed frame gets an ERROR frame and the
// connection is closed, while every other connection keeps being served.
// One connection holds at most three quarters of the pool's slots reserved
// (PUT_BEGIN items beyond get ResourceExhausted), and a put that makes no progress for
// put_timeout_ms is cancelled and its connection closed. Over RDMA, one
// connection's leases pin at most three quarters of the slots too (GET_LEASE
// items beyond get ResourceExhausted), and a GET_LEASE with kMaxOpenLeases
// leases open closes the connection. A connection whose replies pile up
// unread is not read from until they drain, and is closed (dropping the pins
// its replies hold) when they make no write progress for reply_timeout_ms;
// its GET replies pin at most three quarters of the slots (an item past
// that is ResourceExhausted).
// Accepted sockets use TCP keepalive and a TCP user timeout, so a peer that
// vanished does not hold its connection for good.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/env.h"
#include "kvtier/status.h"
#include "tiers/remote/memd_pool.h"
#include "tiers/remote/rdma_transport.h"

namespace kvtier::internal::memd {

// The most connections max_connections may allow: each is a descriptor.
constexpr uint32_t kMaxConnectionsLimit = 65536;
// Descriptors the server needs besides its connections (listener, pool,
// event loop, log, RDMA device). Start warns when the open-file limit is
// below max_connections plus these.
constexpr uint64_t kSpareDescriptors = 64;

struct MemdServerOptions {
  std::string listen = "127.0.0.1:7400";  // "host:port"; port 0 picks a free one
  std::string secret;                     // shared secret; required
  std::string transport = "tcp";          // tcp | rdma
  MemdPoolOptions pool;
  // 1..kMaxConnectionsLimit. At the limit a new connection displaces the
  // oldest one still in its handshake, or, with none, is refused; either is
  // answered ERROR (ResourceExhausted) at its next handshake frame.
  uint32_t max_connections = 256;
  uint32_t lease_ms = 2000;        // rdma: how long a GET_LEASE pins blocks, 1..kMaxLeaseMs
  // A connection that has not completed the handshake this long after it was
  // accepted is closed, so idle sockets cannot hold every connection.
  uint32_t handshake_timeout_ms = 5000;
  // A begun put (PUT_BEGIN not yet committed) that sees none of its PUT_DATA
  // and no PUT_COMMIT this long is cancelled and its connection closed; the
  // bytes of a PUT_DATA have this long more, and a second per 4 MiB. Time
  // the server spends not reading the connection (its replies backlogged)
  // does not count, up to reply_timeout_ms over a put's life.
  uint32_t put_timeout_ms = 10000;
  // Replies queued or being written that see no byte taken by the peer this
  // long close the connection: a client that stops reading cannot keep the
  // slots its GET replies pin.
  uint32_t reply_timeout_ms = 10000;
  // rdma: the device, asked for once by Start; null opens the first one.
  RdmaDeviceFactory rdma_device;
  std::shared_ptr<LogSink> log;  // null: stderr
  Status Validate() const;
};

class MemdServer {
 public:
  // Maps the pool, binds and starts serving. InvalidArgument for bad
  // options; NotSupported for `transport: rdma` without a device (the message
  // names the fallback `transport: tcp`); IOError naming the address when
  // the bind fails (in use, not permitted).
  // With `transport: rdma` the device is opened once (rdma_device, or the
  // first one), before the pool is mapped; the pool is registered with it
  // and each connection may switch to the RDMA data path (rdma_session.h);
  // TCP requests keep working on every connection.
  static Result<std::unique_ptr<MemdServer>> Start(const MemdServerOptions& options);
  // Stops (see Stop()).
  ~MemdServer();
  MemdServer(const MemdServer&) = delete;
  MemdServer& operator=(const MemdServer&) = delete;

  // The bound port (the chosen one when listening on port 0).
  uint16_t port() const;
  // Closes the listener and every connection, and joins the I/O thread.
  // Idempotent; thread-safe.
  void Stop();
  // A snapshot of the pool's counters, taken on the I/O thread (after Stop,
  // once it has joined that thread).
  Stats GetStats();

  // Frames queued or being written to clients, over every connection; 0
  // once stopped.
  size_t TEST_QueuedReplies();
  // Tests only: bytes of reply headers and bodies queued on every connection.
  uint64_t TEST_QueuedReplyHeapBytes();
  // Open connections; 0 once stopped.
  size_t TEST_Connections();

  class Impl;

 private:
  explicit MemdServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::internal::memd
