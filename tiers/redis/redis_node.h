// RedisNode: one Redis server seen through a few connections, each owned by
// its own I/O thread. A job (the commands of one batch meant for this server)
// goes to one thread, which pipelines it: writes a chunk of commands in one
// send, reads the replies in order, and hands the results to the job's batch.
// Jobs that move no block (EXISTS, DEL) have a connection of their own: a
// lookup's EXISTS, waited on for 50 ms, must not queue behind megabytes of
// SETs and GETs.
//
// A thread whose connection broke reconnects on its next job; after a failed
// connect it waits (backoff doubling from 20 ms to 1 s) before trying again,
// and jobs that arrive meanwhile fail at once with Unavailable, so a dead
// server costs its keys a fast miss rather than a stall. A server that
// answers nothing within a timeout (stopped or wedged: it keeps its sockets,
// so connects succeed and commands hang) makes the node silent: every job
// fails at once with Unavailable, and the control thread tries a connection
// in the background (same backoff) until the server answers again. A connection the
// server closed while idle is replaced before a job uses it, and a job whose
// reused connection turns out closed before any reply arrived is run once
// more on a new one (its commands are idempotent).
//
// Thread safety: Submit may be called from any thread, including I/O threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/redis_options.h"
#include "tiers/redis/redis_connection.h"
#include "tiers/redis/redis_ops.h"

namespace kvtier::internal {

class RedisNode;

// The receiver of a job's results.
class RedisBatch {
 public:
  virtual ~RedisBatch() = default;
  virtual NamespaceId ns() const = 0;
  // Called once per job on the I/O thread that ran it, results in op order.
  // Must not block on I/O of the same node.
  virtual void Deliver(RedisNode* node, std::vector<RedisOp> ops,
                       std::vector<RedisOpResult> results) = 0;
};

struct RedisJob {
  std::shared_ptr<RedisBatch> batch;
  std::vector<RedisOp> ops;
};

class RedisNode {
 public:
  // Starts options.connections I/O threads. `tls` (with options.tls) makes
  // their connections TLS. `first`, when given, is an open connection to
  // this server that the first thread adopts.
  RedisNode(RedisEndpoint endpoint, const RedisTierOptions& options,
            std::shared_ptr<const TlsClientContext> tls, std::unique_ptr<RedisConnection> first,
            std::shared_ptr<LogSink> log);
  // Stops the threads; jobs still queued are failed with Unavailable.
  ~RedisNode();
  RedisNode(const RedisNode&) = delete;
  RedisNode& operator=(const RedisNode&) = delete;

  const RedisEndpoint& endpoint() const { return endpoint_; }
  // Connections that carry SETs and GETs (options.connections); one more
  // carries the jobs without them.
  size_t connections() const { return workers_.size() - 1; }

  // Bounds the reply bytes one connection asks for before reading them
  // (0: only the fixed chunk bound), so the server's output buffer for it
  // stays below its client-output-buffer-limit. A single reply larger than
  // the bound is still asked for alone.
  void LimitRepliesInFlight(uint64_t bytes) {
    reply_bytes_.store(bytes, std::memory_order_relaxed);
  }

  // Queues a job: one of only EXISTS and DEL ops on the control connection,
  // any other on a data connection chosen round-robin. Busy (delivered as
  // each op's result, on the calling thread) when that queue is full.
  void Submit(RedisJob job);

 private:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<RedisJob> queue;             // guarded by mu
    bool stop = false;                      // guarded by mu
    std::unique_ptr<RedisConnection> conn;  // I/O thread only
    uint64_t backoff_ms = 0;                // I/O thread only
    uint64_t retry_at_ns = 0;               // I/O thread only
    std::thread thread;
  };

  void Loop(Worker* w);
  // Stops every worker and joins those started.
  void StopWorkers() noexcept;
  // The server answered nothing within a timeout: jobs fail at once, and the
  // control worker is woken to probe.
  void MarkSilent(const Status& why);
  // One connection attempt for `w`. On failure the next one waits the
  // backoff, and a timeout makes the node silent; a success ends both (the
  // control worker's attempts are how a silent node finds its server again).
  Status Connect(Worker* w);
  void Run(Worker* w, RedisJob job);
  // *reused: the connection was open before this call.
  Status EnsureConnected(Worker* w, bool* reused);
  // Fills `results`. False when the server closed the connection before
  // any reply byte arrived, so the job may be replayed.
  bool Execute(Worker* w, RedisJob& job, std::vector<RedisOpResult>& results);

  const RedisEndpoint endpoint_;
  const RedisTierOptions options_;
  const std::shared_ptr<const TlsClientContext> tls_;
  const std::shared_ptr<LogSink> log_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint32_t> next_{0};
  std::atomic<uint64_t> reply_bytes_{0};
  std::atomic<bool> silent_{false};
};

// Fails every op of `job` with `st` and delivers the results, marked
// `unreachable` when the server could not be reached.
void FailRedisJob(RedisNode* node, RedisJob job, const Status& st, bool unreachable = false);

}  // namespace kvtier::internal
