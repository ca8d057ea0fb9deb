#include "tiers/remote/rdma_session.h"

#include <string>

namespace kvtier::internal::memd {

RdmaSession::RdmaSession(MemdPool& pool, RdmaDevice& device, MemdReservations& table,
                         const Options& options)
    : pool_(pool), device_(device), table_(table), options_(options) {}

RdmaSession::~RdmaSession() {
  // The queue pair goes first: once it is destroyed no RDMA WRITE of this
  // client can land in a slot that the grants below hand back to the pool.
  qp_.reset();
  grants_.reset();
}

bool RdmaSession::Handles(Opcode op) const {
  switch (op) {
    case Opcode::kRdmaHello:
    case Opcode::kGetLease:
    case Opcode::kLeaseRelease:
      return true;
    case Opcode::kPutBegin:
    case Opcode::kPutCommit:
      return connected();
    default:
      return false;
  }
}

Result<RdmaSession::Reply> RdmaSession::Hello(std::span<const std::byte> body) {
  if (connected()) return Status::InvalidArgument("RDMA_HELLO repeated on a connected session");
  KVTIER_ASSIGN_OR_RETURN(RdmaHello hello, DecodeRdmaHello(body));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RdmaQp> qp, device_.CreateQp());
  KVTIER_RETURN_IF_ERROR(qp->Connect(hello.qp));
  RdmaReady ready;
  ready.qp = qp->local();
  ready.pool = options_.pool_region;
  ready.lease_ms = options_.lease_ms;
  grants_ = std::make_unique<RdmaGrants>(pool_, table_, options_.pool_region, options_.lease_ms);
  qp_ = std::move(qp);
  return Reply{Opcode::kRdmaReady, EncodeBody(ready)};
}

Result<std::optional<RdmaSession::Reply>> RdmaSession::Handle(Opcode op, uint32_t request_id,
                                                              std::span<const std::byte> body,
                                                              uint64_t now_ms) {
  if (op == Opcode::kRdmaHello) {
    KVTIER_ASSIGN_OR_RETURN(Reply r, Hello(body));
    return std::optional<Reply>(std::move(r));
  }
  if (!connected()) {
    return Status::InvalidArgument("RDMA frame before RDMA_HELLO connected the queue pair");
  }
  if (op == Opcode::kPutBegin) {
    KVTIER_ASSIGN_OR_RETURN(PutBegin m, DecodePutBegin(body));
    KVTIER_ASSIGN_OR_RETURN(GrantList g, grants_->Begin(request_id, m));
    return std::optional<Reply>(Reply{Opcode::kPutGrant, EncodeBody(g)});
  }
  if (op == Opcode::kPutCommit) {
    if (!body.empty()) return Status::InvalidArgument("PUT_COMMIT carries no body");
    KVTIER_ASSIGN_OR_RETURN(StatusList list, grants_->Commit(request_id));
    return std::optional<Reply>(Reply{Opcode::kStatusReply, EncodeBody(list)});
  }
  if (op == Opcode::kGetLease) {
    KVTIER_ASSIGN_OR_RETURN(KeyBatch m, DecodeKeyBatch(body));
    KVTIER_ASSIGN_OR_RETURN(LeaseReply l, grants_->Lease(m, now_ms));
    return std::optional<Reply>(Reply{Opcode::kLeaseReply, EncodeBody(l)});
  }
  if (op == Opcode::kLeaseRelease) {
    KVTIER_ASSIGN_OR_RETURN(LeaseRelease m, DecodeLeaseRelease(body));
    // An unknown lease already expired: the client is late, not wrong.
    (void)grants_->Release(m.lease_id);
    return std::optional<Reply>();
  }
  return Status::InvalidArgument("opcode " + std::to_string(static_cast<int>(op)) +
                                 " is not an RDMA request");
}

size_t RdmaSession::Expire(uint64_t now_ms) { return grants_ ? grants_->Expire(now_ms) : 0; }

}  // namespace kvtier::internal::memd
