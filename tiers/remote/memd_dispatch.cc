// What a memd session does with a frame it has read: the HMAC handshake,
// then PUT, GET, EXISTS, REMOVE and STATS over TCP, and the RDMA frames
// handed to its RdmaSession.
#include "tiers/remote/memd_server_impl.h"

namespace kvtier::internal::memd {

void Session::Dispatch() {
  if (phase_ != Phase::kReady) {
    // Answered once its frame is read: closing with bytes unread would reset
    // the connection under the ERROR.
    if (turned_away()) return ProtocolError(StatusCode::kResourceExhausted, turned_away_);
    return Handshake();
  }
  const Opcode op = frame_.opcode;
  if (WantsRdma(op)) return HandleRdma();
  if (op == Opcode::kPutBegin) {
    auto m = DecodePutBegin(body_);
    if (!m.ok())
      return ProtocolError(StatusCode::kInvalidArgument, std::string(m.status().message()));
    Begin(*m);
  } else if (op == Opcode::kPutCommit || op == Opcode::kStats) {
    if (!body_.empty()) return ProtocolError(StatusCode::kInvalidArgument, "unexpected body");
    if (op == Opcode::kPutCommit) {
      Commit();
    } else {
      Send(Opcode::kStatsReply, EncodeBody(srv_.pool_->GetStats()));
    }
  } else if (op == Opcode::kGet || op == Opcode::kExists || op == Opcode::kRemove) {
    auto m = DecodeKeyBatch(body_);
    if (!m.ok())
      return ProtocolError(StatusCode::kInvalidArgument, std::string(m.status().message()));
    if (op == Opcode::kGet) {
      Get(*m);
    } else {
      StatusList out;
      for (const BlockKey& k : m->keys) {
        const bool hit = op == Opcode::kExists ? srv_.pool_->Contains(m->ns, k)
                                               : (srv_.pool_->Remove(m->ns, k), true);
        out.codes.push_back(hit ? StatusCode::kOk : StatusCode::kNotFound);
      }
      Send(Opcode::kStatusReply, EncodeBody(out));
    }
  } else {
    return ProtocolError(StatusCode::kInvalidArgument,
                         "opcode " + std::to_string(static_cast<int>(op)) + " is not a request");
  }
  ReadNext();
}

bool Session::WantsRdma(Opcode op) const {
  if (rdma_) return rdma_->Handles(op);
  return op == Opcode::kRdmaHello || op == Opcode::kGetLease || op == Opcode::kLeaseRelease;
}

void Session::HandleRdma() {
  if (!srv_.rdma_) {
    return ProtocolError(StatusCode::kNotSupported,
                         "this kvtier-memd serves transport: tcp only; RDMA frames are refused");
  }
  if (!rdma_) {
    RdmaSession::Options o;
    o.pool_region = srv_.pool_mr_->region();
    o.lease_ms = srv_.options_.lease_ms;
    rdma_ = std::make_unique<RdmaSession>(*srv_.pool_, *srv_.rdma_, reservations_, o);
  }
  auto reply = rdma_->Handle(frame_.opcode, frame_.request_id, body_, NowMs());
  if (!reply.ok()) {
    return ProtocolError(reply.status().code(), std::string(reply.status().message()));
  }
  if (*reply) Send((*reply)->op, std::move((*reply)->body));
  ReadNext();
}

void Session::Handshake() {
  if (phase_ == Phase::kHello && frame_.opcode == Opcode::kHello) {
    auto m = DecodeHello(body_);
    if (!m.ok())
      return ProtocolError(StatusCode::kInvalidArgument, std::string(m.status().message()));
    client_nonce_ = m->nonce;
    server_nonce_ = RandomNonce();
    Send(Opcode::kChallenge, EncodeBody(Challenge{server_nonce_, srv_.instance_id_}));
    phase_ = Phase::kAuth;
    return ReadHeader();
  }
  if (phase_ == Phase::kAuth && frame_.opcode == Opcode::kAuth) {
    auto m = DecodeAuth(body_);
    if (!m.ok())
      return ProtocolError(StatusCode::kInvalidArgument, std::string(m.status().message()));
    if (!SameMac(m->mac, ClientProof(srv_.options_.secret, server_nonce_, client_nonce_))) {
      return ProtocolError(StatusCode::kInvalidArgument, "authentication failed");
    }
    Welcome w;
    w.mac = ServerProof(srv_.options_.secret, server_nonce_, client_nonce_);
    w.slot_bytes = srv_.pool_->slot_bytes();
    w.slot_count = srv_.pool_->slot_count();
    Send(Opcode::kWelcome, EncodeBody(w));
    phase_ = Phase::kReady;
    return ReadHeader();
  }
  ProtocolError(StatusCode::kInvalidArgument, "handshake expected (HELLO, then AUTH)");
}

void Session::Begin(const PutBegin& m) {
  auto items = reservations_.Begin(frame_.request_id, PutPath::kTcp, m);
  if (!items.ok()) {
    return ProtocolError(items.status().code(), std::string(items.status().message()));
  }
  StatusList reply;
  for (const Reservation& r : *items) reply.codes.push_back(r.code);
  Send(Opcode::kBeginReply, EncodeBody(reply));
}

void Session::Commit() {
  auto reply = reservations_.Commit(frame_.request_id);
  if (!reply.ok()) {
    return ProtocolError(reply.status().code(), std::string(reply.status().message()));
  }
  Send(Opcode::kStatusReply, EncodeBody(*reply));
}

void Session::Get(const KeyBatch& m) {
  for (size_t i = 0; i < m.keys.size(); ++i) {
    const auto item = static_cast<uint16_t>(i);
    auto found = srv_.pool_->Lookup(m.ns, m.keys[i]);
    if (!found) {
      Send(Opcode::kGetStatus, {static_cast<std::byte>(EncodeCode(StatusCode::kNotFound))}, item);
      continue;
    }
    // The slot stays pinned until its bytes are on the socket, and a
    // connection's replies pin at most its share of the pool's slots: one
    // that takes them slowly cannot keep every block from being evicted.
    auto pinned = pinned_slots_.find(found->slot);
    if (pinned == pinned_slots_.end()) {
      if (pinned_slots_.size() >= MaxReservedSlots(srv_.pool_->slot_count())) {
        Send(Opcode::kGetStatus,
             {static_cast<std::byte>(EncodeCode(StatusCode::kResourceExhausted))}, item);
        continue;
      }
      pinned = pinned_slots_.emplace(found->slot, 0).first;
    }
    Out out;
    out.header = EncodeFrameHeader(
        {Opcode::kGetData, item, frame_.request_id, static_cast<uint32_t>(found->stored_bytes)});
    out.data = srv_.pool_->SlotBytes(found->slot, found->stored_bytes);
    out.pin = found->slot;
    try {
      Enqueue(std::move(out));
    } catch (...) {
      if (pinned->second == 0) pinned_slots_.erase(pinned);
      throw;
    }
    // Pinned once queued: a reply that could not be is not sent, nor unpinned.
    srv_.pool_->Pin(found->slot);
    ++pinned->second;
  }
  Pump();
}

}  // namespace kvtier::internal::memd
