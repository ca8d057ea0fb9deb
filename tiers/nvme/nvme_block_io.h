// How one block's I/O is built and joined, shared by the read path
// (nvme_read.cc) and the write path (nvme_tier.cc). Not for use outside
// tiers/nvme.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "io/io_engine.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// A block's I/O goes out as one or two requests (see BlockRequests); each
// records its status here and the last one to finish completes the block.
struct BlockParts {
  std::atomic<size_t> left{0};
  Status status[2];
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

// Wires each request of one block to `parts`; `finish(status)` runs once,
// after the last of them, with the first error.
template <typename Finish>
void JoinParts(std::vector<IoRequest>& reqs, BlockParts& parts, Finish finish) {
  parts.left.store(reqs.size(), std::memory_order_relaxed);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].id = i;
    reqs[i].done = [&parts, i, finish](const IoCompletion& io) {
      if (parts.Done(i, io.status)) finish(parts.First());
    };
  }
}

}  // namespace kvtier::internal
