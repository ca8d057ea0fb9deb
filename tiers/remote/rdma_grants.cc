#include "tiers/remote/rdma_grants.h"

#include <string>

#include "kvtier/block_header.h"

namespace kvtier::internal::memd {

RdmaGrants::RdmaGrants(MemdPool& pool, RdmaRegion region, uint32_t lease_ms)
    : pool_(pool), region_(region), lease_ms_(lease_ms) {}

RdmaGrants::~RdmaGrants() {
  for (auto& [id, put] : puts_) {
    for (const Granted& g : put.items) {
      if (g.slot >= 0) pool_.CancelReservation(static_cast<uint32_t>(g.slot));
    }
  }
  while (!leases_.empty()) EndLease(leases_.begin());
}

Result<GrantList> RdmaGrants::Begin(uint32_t request_id, const PutBegin& m, size_t max_reserved) {
  if (puts_.count(request_id) != 0 || reserved_items_ + m.items.size() > max_reserved) {
    return Status::InvalidArgument(
        "PUT_BEGIN reuses a request id or exceeds the reservation limit");
  }
  Put put{m.ns, {}};
  GrantList reply;
  for (const PutItem& it : m.items) {
    Granted g{it.key, -1, it.payload_bytes + kBlockHeaderBytes};
    RemoteSlot out;
    auto slot = pool_.Reserve(g.stored_bytes);
    if (slot.ok()) {
      g.slot = *slot;
      // Grants are computed from the pool's own slot numbers: nothing the
      // client sent becomes an address.
      out = {StatusCode::kOk, region_.addr + pool_.SlotOffset(*slot), region_.rkey, g.stored_bytes};
    } else {
      g.code = slot.status().code();
      out.code = g.code;
    }
    put.items.push_back(g);
    reply.items.push_back(out);
  }
  reserved_items_ += put.items.size();
  puts_.emplace(request_id, std::move(put));
  return reply;
}

Result<StatusList> RdmaGrants::Commit(uint32_t request_id) {
  auto it = puts_.find(request_id);
  if (it == puts_.end()) return Status::InvalidArgument("PUT_COMMIT names no PUT_BEGIN");
  StatusList reply;
  for (const Granted& g : it->second.items) {
    StatusCode code = g.code;
    if (g.slot >= 0) {
      code =
          pool_.Commit(it->second.ns, g.key, static_cast<uint32_t>(g.slot), g.stored_bytes).code();
    }
    reply.codes.push_back(code);
  }
  reserved_items_ -= it->second.items.size();
  puts_.erase(it);
  return reply;
}

LeaseReply RdmaGrants::Lease(const KeyBatch& m, uint64_t now_ms) {
  LeaseReply reply;
  LeaseEntry lease;
  lease.ends_ms = now_ms + lease_ms_;
  for (const BlockKey& key : m.keys) {
    auto found = pool_.Lookup(m.ns, key);
    if (!found) {
      reply.items.push_back({StatusCode::kNotFound, 0, 0, 0});
      continue;
    }
    pool_.Pin(found->slot);
    lease.slots.push_back(found->slot);
    reply.items.push_back({StatusCode::kOk, region_.addr + pool_.SlotOffset(found->slot),
                           region_.rkey, found->stored_bytes});
  }
  if (lease.slots.empty()) return reply;
  reply.lease_id = next_lease_++;
  by_end_.emplace(lease.ends_ms, reply.lease_id);
  leases_.emplace(reply.lease_id, std::move(lease));
  return reply;
}

void RdmaGrants::EndLease(std::unordered_map<uint64_t, LeaseEntry>::iterator it) {
  auto [lo, hi] = by_end_.equal_range(it->second.ends_ms);
  for (auto e = lo; e != hi; ++e) {
    if (e->second == it->first) {
      by_end_.erase(e);
      break;
    }
  }
  for (uint32_t slot : it->second.slots) pool_.Unpin(slot);
  leases_.erase(it);
}

bool RdmaGrants::Release(uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  EndLease(it);
  return true;
}

size_t RdmaGrants::Expire(uint64_t now_ms) {
  size_t n = 0;
  while (!by_end_.empty() && by_end_.begin()->first <= now_ms) {
    EndLease(leases_.find(by_end_.begin()->second));
    ++n;
  }
  return n;
}

}  // namespace kvtier::internal::memd
