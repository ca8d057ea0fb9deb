// How one block's I/O is built and joined, shared by the read path
// (nvme_read.cc) and the write path (nvme_tier.cc). Not for use outside
// tiers/nvme.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "io/io_engine.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// A block's I/O goes out as one or two requests (see BlockRequests).
inline constexpr size_t kMaxBlockRequests = 2;

// Each of a block's requests records its status here and the last one to
// finish completes the block.
struct BlockParts {
  std::atomic<size_t> left{0};
  Status status[kMaxBlockRequests];
  Status First() const { return status[0].ok() ? status[1] : status[0]; }
  // Records part `i`; true for the part that completes the block.
  bool Done(size_t i, const Status& st) {
    status[i] = st;
    return left.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
};

// Requests for one block at `offset`: the header page `head`, then, when
// given, the payload buffer behind it. Fixed-buffer operations take a single
// buffer, so a payload inside registered memory goes as its own request (and
// its bytes skip the per-I/O page pinning); otherwise both go as one
// vectored request.
inline std::vector<IoRequest> BlockRequests(const IoEngine& engine, IoOp op, int fd,
                                            uint64_t offset, iovec head,
                                            std::optional<iovec> payload) {
  std::vector<IoRequest> out(1);
  out[0].op = op;
  out[0].fd = fd;
  out[0].offset = offset;
  out[0].iov.push_back(head);
  if (!payload) return out;
  if (!engine.IsRegistered(payload->iov_base, payload->iov_len)) {
    out[0].iov.push_back(*payload);
    return out;
  }
  IoRequest p;
  p.op = op;
  p.fd = fd;
  p.offset = offset + head.iov_len;
  p.iov.push_back(*payload);
  out.push_back(std::move(p));
  return out;
}

// The status of `io`, the completion of a request of `op` for `expected`
// bytes at `offset`: an IOError when it reports success but fewer bytes. The
// engine contract rules that out, but a device or engine that breaks it must
// not get half a block installed as written, nor a good block dropped as
// corrupt because half of it was read.
inline Status CompletionStatus(IoOp op, uint64_t offset, uint64_t expected,
                               const IoCompletion& io) noexcept {
  if (!io.status.ok() || op == IoOp::kFsync || io.bytes >= expected) return io.status;
  return DescribedStatus(StatusCode::kIOError, "nvme: short transfer", [&] {
    const std::string name(IoOpName(op));
    return Status::IOError("nvme " + name + " at offset " + std::to_string(offset) + ": short " +
                           name + ": " + std::to_string(io.bytes) + " of " +
                           std::to_string(expected) + " bytes");
  });
}

// Wires each request of one block to `parts`; `finish(status)` runs once,
// after the last of them, with the first error (a short transfer is one).
template <typename Finish>
void JoinParts(std::vector<IoRequest>& reqs, BlockParts& parts, Finish finish) {
  parts.left.store(reqs.size(), std::memory_order_relaxed);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].id = i;
    reqs[i].done = [&parts, i, finish, op = reqs[i].op, offset = reqs[i].offset,
                    expected = reqs[i].Bytes()](const IoCompletion& io) {
      if (parts.Done(i, CompletionStatus(op, offset, expected, io))) finish(parts.First());
    };
  }
}

// Submits `reqs` as one batch. While the engine's queue is too full for them
// (Busy: other I/O is queued) it waits and tries again, up to `wait_ms`; after
// that, the Busy. Any other refusal is returned at once. As with Submit, on
// error no `done` has run. Never throws: out of memory is ResourceExhausted.
inline Status SubmitWhenRoom(IoEngine& engine, const std::vector<IoRequest>& reqs,
                             uint32_t wait_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    Status st;
    try {
      // Submit consumes its argument even when it refuses it: keep `reqs`.
      st = engine.Submit(reqs);
    } catch (const std::bad_alloc&) {
      // A fixed message: building one would need the memory that ran out.
      return Status::ResourceExhausted("nvme: out of memory queueing I/O requests");
    }
    if (st.code() != StatusCode::kBusy) return st;
    if (Clock::now() >= deadline) {
      return DescribedStatus(st.code(), st.message(), [&] {
        return st.WithContext("nvme: still full after waiting " + std::to_string(wait_ms) + " ms");
      });
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace kvtier::internal
