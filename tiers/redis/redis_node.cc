#include "tiers/redis/redis_node.h"

#include <algorithm>
#include <chrono>
#include <exception>

namespace kvtier::internal {
namespace {

constexpr size_t kMaxQueuedJobs = 1024;
constexpr uint64_t kFirstBackoffMs = 20;
constexpr uint64_t kMaxBackoffMs = 1000;
// One send carries at most this many commands or value bytes; then their
// replies are read. Bounds what the server buffers for one connection.
constexpr size_t kChunkOps = 64;
constexpr uint64_t kChunkBytes = 64ull << 20;

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

void FailRedisJob(RedisNode* node, RedisJob job, const Status& st, bool unreachable) {
  std::vector<RedisOpResult> results(job.ops.size());
  for (RedisOpResult& r : results) {
    r.status = st;
    r.unreachable = unreachable;
  }
  job.batch->Deliver(node, std::move(job.ops), std::move(results));
}

RedisNode::RedisNode(RedisEndpoint endpoint, const RedisTierOptions& options,
                     std::shared_ptr<const TlsClientContext> tls,
                     std::unique_ptr<RedisConnection> first, std::shared_ptr<LogSink> log)
    : endpoint_(std::move(endpoint)),
      options_(options),
      tls_(std::move(tls)),
      log_(std::move(log)) {
  // options.connections data workers, then the control worker (last),
  // which connects on its first job.
  for (uint32_t i = 0; i <= options_.connections; ++i) {
    workers_.push_back(std::make_unique<Worker>());
  }
  workers_[0]->conn = std::move(first);
  try {
    for (auto& w : workers_) w->thread = std::thread([this, p = w.get()] { Loop(p); });
  } catch (...) {  // a thread that cannot start: those started stop first
    StopWorkers();
    throw;
  }
}

RedisNode::~RedisNode() { StopWorkers(); }

void RedisNode::StopWorkers() noexcept {
  for (auto& w : workers_) {
    std::lock_guard lock(w->mu);
    w->stop = true;
    w->cv.notify_one();
  }
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void RedisNode::Submit(RedisJob job) {
  const bool control = std::all_of(job.ops.begin(), job.ops.end(), [](const RedisOp& op) {
    return op.kind == RedisOp::Kind::kExists || op.kind == RedisOp::Kind::kDel;
  });
  Worker* w = control
                  ? workers_.back().get()
                  : workers_[next_.fetch_add(1, std::memory_order_relaxed) % connections()].get();
  {
    std::lock_guard lock(w->mu);
    if (!w->stop && w->queue.size() < kMaxQueuedJobs) {
      w->queue.push_back(std::move(job));
      w->cv.notify_one();
      return;
    }
  }
  FailRedisJob(this, std::move(job),
               Status::Busy("redis " + endpoint_.ToString() + ": too many queued batches"));
}

void RedisNode::Loop(Worker* w) {
  const bool control = w == workers_.back().get();
  std::unique_lock lock(w->mu);
  for (;;) {
    // A silent server: the control worker, between its jobs, tries a
    // connection each time its backoff has passed.
    if (control && silent_.load(std::memory_order_relaxed) && !w->stop && w->queue.empty()) {
      const uint64_t now = NowNs();
      if (now < w->retry_at_ns) {
        w->cv.wait_for(lock, std::chrono::nanoseconds(w->retry_at_ns - now));
      } else {
        lock.unlock();
        w->conn.reset();
        try {
          (void)Connect(w);
        } catch (...) {  // out of memory: tried again after the backoff
        }
        lock.lock();
      }
      continue;
    }
    w->cv.wait(lock, [&] {
      return w->stop || !w->queue.empty() || (control && silent_.load(std::memory_order_relaxed));
    });
    if (w->queue.empty() && !w->stop) continue;  // silent: probed above
    if (w->queue.empty()) break;  // stopping, nothing left
    RedisJob job = std::move(w->queue.front());
    w->queue.pop_front();
    const bool stopping = w->stop;
    lock.unlock();
    try {
      if (stopping) {
        FailRedisJob(this, std::move(job), Status::Unavailable("redis tier is shutting down"));
      } else {
        Run(w, std::move(job));
      }
    } catch (...) {
      // Out of memory: the job is dropped, and its batch answers what it
      // had not settled (Cancelled) once its last job lets go of it. The
      // worker serves on.
    }
    lock.lock();
  }
  lock.unlock();
  w->conn.reset();
}

void RedisNode::MarkSilent(const Status& why) {
  if (silent_.exchange(true)) return;
  if (log_) {
    log_->Log(LogLevel::kWarning, "redis " + endpoint_.ToString() +
                                      " answered nothing in time; its keys miss until it "
                                      "answers again: " +
                                      why.ToString());
  }
  Worker* control = workers_.back().get();
  std::lock_guard lock(control->mu);
  control->cv.notify_one();
}

Status RedisNode::Connect(Worker* w) {
  auto conn = RedisConnection::Open(endpoint_, options_, tls_.get());
  if (!conn.ok()) {
    w->backoff_ms = std::clamp<uint64_t>(w->backoff_ms * 2, kFirstBackoffMs, kMaxBackoffMs);
    w->retry_at_ns = NowNs() + w->backoff_ms * 1000000;
    if (IsRedisTimeout(conn.status())) MarkSilent(conn.status());
    return conn.status();
  }
  const bool was_silent = silent_.exchange(false);
  if (log_ && (was_silent || w->backoff_ms != 0)) {
    log_->Log(LogLevel::kInfo,
              "redis " + endpoint_.ToString() + (was_silent ? ": answers again" : ": reconnected"));
  }
  w->backoff_ms = 0;
  w->retry_at_ns = 0;
  w->conn = std::move(conn).value();
  return Status::Ok();
}

Status RedisNode::EnsureConnected(Worker* w, bool* reused) {
  *reused = w->conn && w->conn->Reusable();
  if (*reused) return Status::Ok();
  w->conn.reset();
  const uint64_t now = NowNs();
  if (now < w->retry_at_ns) {
    return Status::Unavailable("redis " + endpoint_.ToString() +
                               " is unreachable; next connect attempt in " +
                               std::to_string((w->retry_at_ns - now) / 1000000) + " ms");
  }
  return Connect(w);
}

void RedisNode::Run(Worker* w, RedisJob job) {
  if (silent_.load(std::memory_order_relaxed)) {
    FailRedisJob(this, std::move(job),
                 Status::Unavailable("redis " + endpoint_.ToString() +
                                     ": an earlier command timed out; its keys miss until "
                                     "the server answers again"),
                 /*unreachable=*/true);
    return;
  }
  bool reused = false;
  Status st = EnsureConnected(w, &reused);
  // Unavailable: refused, timed out or in backoff (not a refused password).
  if (!st.ok()) {
    FailRedisJob(this, std::move(job), st, st.code() == StatusCode::kUnavailable);
    return;
  }
  std::vector<RedisOpResult> results(job.ops.size());
  // The server may close an idle connection just as the job is sent (the
  // check in EnsureConnected cannot see a close still in flight). Nothing
  // was answered then, and every command is safe to send again: GET, GETEX,
  // EXISTS and DEL are idempotent, a SET writes the same bytes.
  if (!Execute(w, job, results) && reused) {
    st = EnsureConnected(w, &reused);
    if (st.ok()) {
      (void)Execute(w, job, results);
    } else {
      for (RedisOpResult& r : results) {
        r = RedisOpResult{st};
        r.unreachable = st.code() == StatusCode::kUnavailable;
      }
    }
  }
  job.batch->Deliver(this, std::move(job.ops), std::move(results));
}

// Pipelines the job chunk by chunk. Once the connection breaks, the ops not
// yet answered fail with that error; the next job reconnects.
bool RedisNode::Execute(Worker* w, RedisJob& job, std::vector<RedisOpResult>& results) {
  RedisConnection& conn = *w->conn;
  const NamespaceId ns = job.batch->ns();
  const uint64_t received_before = conn.received_bytes();
  size_t answered = 0;
  Status broken;
  bool lost = false;  // broken by the transport, not by what the server said
  // The replies are the server's bytes: should reading them ever throw, the
  // op and the connection fail here rather than the exception ending the
  // process on this thread.
  try {
    while (answered < job.ops.size() && broken.ok()) {
      size_t end = answered;
      uint64_t bytes = 0;
      uint64_t reply_bytes = 0;
      const uint64_t reply_limit = reply_bytes_.load(std::memory_order_relaxed);
      while (end < job.ops.size() && end - answered < kChunkOps && bytes < kChunkBytes) {
        const uint64_t reply = job.ops[end].dst.size();
        if (reply_limit != 0 && end > answered && reply_bytes + reply > reply_limit) break;
        QueueRedisOp(conn, job.ops[end], options_.ttl_s);
        bytes += job.ops[end].payload.size() + reply;
        reply_bytes += reply;
        ++end;
      }
      broken = conn.Flush();
      lost = !broken.ok();
      // One deadline for the chunk's replies (moved on by the values read).
      conn.BeginReply();
      while (answered < end && broken.ok()) {
        results[answered] = ReadRedisOpReply(conn, job.ops[answered], ns, options_.cluster);
        if (conn.broken()) {
          const Status& st = results[answered].status;
          lost = st.code() == StatusCode::kUnavailable;
          results[answered].unreachable = lost;
          broken = lost ? st
                        : Status::Unavailable("redis " + endpoint_.ToString() +
                                              ": connection dropped after a malformed reply");
        }
        ++answered;
      }
      conn.EndReply();
    }
  } catch (const std::exception& e) {
    conn.Abandon();
    lost = false;
    broken =
        Status::Internal("redis " + endpoint_.ToString() + ": reading replies failed: " + e.what());
  }
  for (size_t i = answered; i < results.size(); ++i) {
    results[i] = RedisOpResult{broken};
    results[i].unreachable = lost;
  }
  if (lost && IsRedisTimeout(broken)) MarkSilent(broken);
  const bool closed_unanswered =
      conn.broken() && conn.closed_by_peer() && conn.received_bytes() == received_before;
  // Closed now, not on the next job: a server streaming junk stops being read.
  if (conn.broken()) w->conn.reset();
  return !closed_unanswered;
}

}  // namespace kvtier::internal
