#include "tests/support/nvme_fault_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "tests/support/forwarding_io_engine.h"

namespace kvtier::testing {
namespace {

using internal::IoCompletion;
using internal::IoEngine;
using internal::IoOp;
using internal::IoRequest;

class FaultIoEngine final : public ForwardingIoEngine {
 public:
  FaultIoEngine(std::unique_ptr<IoEngine> inner, IoFaults* faults)
      : ForwardingIoEngine(std::move(inner)), faults_(faults) {
    // An empty pipe blocks its readers; a full one blocks its writers.
    if (pipe2(read_pipe_, O_CLOEXEC) != 0 || pipe2(write_pipe_, O_CLOEXEC) != 0) return;
    const int flags = fcntl(write_pipe_[1], F_GETFL);
    fcntl(write_pipe_[1], F_SETFL, flags | O_NONBLOCK);
    char junk[4096] = {};
    while (write(write_pipe_[1], junk, sizeof(junk)) > 0) {
    }
    fcntl(write_pipe_[1], F_SETFL, flags);
  }
  ~FaultIoEngine() override {
    Shutdown();
    for (int fd : {read_pipe_[0], read_pipe_[1], write_pipe_[0], write_pipe_[1]}) {
      if (fd >= 0) close(fd);
    }
  }

  Status Submit(std::vector<IoRequest> requests) override {
    for (IoRequest& r : requests) {
      if (r.op != IoOp::kFsync && r.Bytes() < faults_->min_bytes.load()) continue;
      if (r.op != IoOp::kFsync &&
          (r.offset < faults_->from_offset.load() || r.offset >= faults_->to_offset.load())) {
        continue;
      }
      if (const int err = ErrnoFor(r.op); err != 0) {
        Fail(r, err);
        continue;
      }
      if (r.op == IoOp::kFsync) {
        if (faults_->stall_fsync.load()) StallFsync(r);
        continue;
      }
      if (r.op == IoOp::kRead && faults_->stall_reads.load()) Stall(r, read_pipe_[0]);
      if (r.op == IoOp::kWrite && faults_->stall_writes.load()) Stall(r, write_pipe_[1]);
      if (r.op == IoOp::kRead && faults_->torn_reads.load()) Tear(r);
      if (r.op == IoOp::kRead && faults_->short_reads.load()) Shorten(r);
      if (auto* around = faults_->around_read_done.load(); around && r.op == IoOp::kRead) {
        r.done = [done = std::move(r.done), around](const IoCompletion& c) {
          around(true);
          done(c);
          around(false);
        };
      }
      if (r.op == IoOp::kWrite && faults_->short_writes.load()) Shorten(r);
    }
    // One batch, so the inner engine still takes all of it or none.
    return inner().Submit(std::move(requests));
  }

 private:
  int ErrnoFor(IoOp op) const {
    switch (op) {
      case IoOp::kRead:
        return faults_->read_errno.load();
      case IoOp::kWrite:
        return faults_->write_errno.load();
      case IoOp::kFsync:
        return faults_->fsync_errno.load();
    }
    return 0;
  }

  // The request becomes an fsync of a pipe, which the inner engine fails at
  // once (EINVAL) without touching the caller's buffers or the file; its
  // completion, on the inner engine's thread like a device's error, carries
  // the injected errno instead.
  void Fail(IoRequest& r, int err) {
    faults_->injected.fetch_add(1);
    Status st = FromErrno(err, "fault engine " + std::string(internal::IoOpName(r.op)) +
                                   " at offset " + std::to_string(r.offset));
    r.op = IoOp::kFsync;
    r.fd = read_pipe_[0];
    r.iov.clear();
    r.done = [done = std::move(r.done), st = std::move(st)](const IoCompletion& c) {
      done(IoCompletion{c.id, st, 0});
    };
  }

  void Stall(IoRequest& r, int fd) {
    faults_->injected.fetch_add(1);
    r.fd = fd;
    r.offset = static_cast<uint64_t>(-1);  // a pipe has no offset: "current position"
  }

  // An fsync cannot wait on a pipe, so the stalled sync is a one-byte read of
  // the empty one; the inner engine's deadline ends it.
  void StallFsync(IoRequest& r) {
    r.op = IoOp::kRead;
    r.iov = {{&stall_byte_, 1}};
    Stall(r, read_pipe_[0]);
    r.done = [done = std::move(r.done)](const IoCompletion& c) {
      done(IoCompletion{c.id, c.status.WithContext("fault engine fsync, stalled as a pipe read"),
                        0});
    };
  }

  // The first `keep` bytes of `iov`.
  static std::vector<iovec> Prefix(const std::vector<iovec>& iov, uint64_t keep) {
    std::vector<iovec> out;
    for (const iovec& v : iov) {
      if (keep == 0) break;
      const uint64_t n = std::min<uint64_t>(keep, v.iov_len);
      out.push_back({v.iov_base, n});
      keep -= n;
    }
    return out;
  }

  // Reads only the first half of the bytes, then claims all of them: the
  // rest of the caller's buffers keep whatever they held.
  void Tear(IoRequest& r) {
    faults_->injected.fetch_add(1);
    const uint64_t total = r.Bytes();
    r.iov = Prefix(r.iov, total / 2);
    auto done = std::move(r.done);
    r.done = [done = std::move(done), total](const IoCompletion& c) {
      IoCompletion lie{c.id, c.status, c.status.ok() ? total : c.bytes};
      done(lie);
    };
  }

  // Moves only the first half of the bytes; the inner engine, handed just
  // those, completes OK with that count: a short read or write reported as
  // such. (Half of a 4 KiB-multiple stays 512-aligned for O_DIRECT.)
  void Shorten(IoRequest& r) {
    faults_->injected.fetch_add(1);
    r.iov = Prefix(r.iov, r.Bytes() / 2);
  }

  IoFaults* faults_;
  int read_pipe_[2] = {-1, -1};
  int write_pipe_[2] = {-1, -1};
  char stall_byte_ = 0;  // the buffer of stalled syncs; nothing ever fills it
};

}  // namespace

std::unique_ptr<internal::IoEngine> NewFaultIoEngine(std::unique_ptr<internal::IoEngine> inner,
                                                     IoFaults* faults) {
  return std::make_unique<FaultIoEngine>(std::move(inner), faults);
}

}  // namespace kvtier::testing
