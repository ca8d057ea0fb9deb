#include "tests/support/nvme_fault_engine.h"

#include <fcntl.h>
#include <unistd.h>

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
    std::vector<IoRequest> forward;
    std::vector<IoRequest> failed;
    for (IoRequest& r : requests) {
      if (r.op != IoOp::kFsync && r.Bytes() < faults_->min_bytes.load()) {
        forward.push_back(std::move(r));
        continue;
      }
      if (ErrnoFor(r.op) != 0) {
        faults_->injected.fetch_add(1);
        failed.push_back(std::move(r));
        continue;
      }
      if (r.op == IoOp::kRead && faults_->stall_reads.load()) Stall(r, read_pipe_[0]);
      if (r.op == IoOp::kWrite && faults_->stall_writes.load()) Stall(r, write_pipe_[1]);
      if (r.op == IoOp::kRead && faults_->torn_reads.load()) Tear(r);
      forward.push_back(std::move(r));
    }
    if (!forward.empty()) KVTIER_RETURN_IF_ERROR(inner().Submit(std::move(forward)));
    for (IoRequest& r : failed) {
      IoCompletion c{
          r.id,
          FromErrno(ErrnoFor(r.op), "fault engine " + std::string(internal::IoOpName(r.op)) +
                                        " at offset " + std::to_string(r.offset)),
          0};
      r.done(c);
    }
    return Status::Ok();
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

  void Stall(IoRequest& r, int fd) {
    faults_->injected.fetch_add(1);
    r.fd = fd;
    r.offset = static_cast<uint64_t>(-1);  // a pipe has no offset: "current position"
  }

  // Reads only the first half of the bytes, then claims all of them: the
  // rest of the caller's buffers keep whatever they held.
  void Tear(IoRequest& r) {
    faults_->injected.fetch_add(1);
    const uint64_t total = r.Bytes();
    uint64_t keep = total / 2;
    std::vector<iovec> half;
    for (const iovec& v : r.iov) {
      if (keep == 0) break;
      const uint64_t n = std::min<uint64_t>(keep, v.iov_len);
      half.push_back({v.iov_base, n});
      keep -= n;
    }
    r.iov = std::move(half);
    auto done = std::move(r.done);
    r.done = [done = std::move(done), total](const IoCompletion& c) {
      IoCompletion lie{c.id, c.status, c.status.ok() ? total : c.bytes};
      done(lie);
    };
  }

  IoFaults* faults_;
  int read_pipe_[2] = {-1, -1};
  int write_pipe_[2] = {-1, -1};
};

}  // namespace

std::unique_ptr<internal::IoEngine> NewFaultIoEngine(std::unique_ptr<internal::IoEngine> inner,
                                                     IoFaults* faults) {
  return std::make_unique<FaultIoEngine>(std::move(inner), faults);
}

}  // namespace kvtier::testing
