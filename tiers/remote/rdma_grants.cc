#include "tiers/remote/rdma_grants.h"

#include <string>

namespace kvtier::internal::memd {

RdmaGrants::RdmaGrants(MemdPool& pool, MemdReservations& table, RdmaRegion region,
                       uint32_t lease_ms, size_t max_leases)
    : pool_(pool),
      table_(table),
      region_(region),
      lease_ms_(lease_ms),
      max_leases_(max_leases),
      max_pinned_(MaxLeasedSlots(pool.slot_count())) {}

RdmaGrants::~RdmaGrants() {
  table_.Cancel(PutPath::kRdma);
  while (!leases_.empty()) EndLease(leases_.begin());
}

Result<GrantList> RdmaGrants::Begin(uint32_t request_id, const PutBegin& m) {
  KVTIER_ASSIGN_OR_RETURN(std::span<const Reservation> items,
                          table_.Begin(request_id, PutPath::kRdma, m));
  GrantList reply;
  reply.items.reserve(items.size());
  for (const Reservation& r : items) {
    RemoteSlot out;
    out.code = r.code;
    if (r.slot >= 0) {
      // Grants are computed from the pool's own slot numbers: nothing the
      // client sent becomes an address.
      const auto slot = static_cast<uint32_t>(r.slot);
      out = {StatusCode::kOk, region_.addr + pool_.SlotOffset(slot), region_.rkey, r.stored_bytes};
    }
    reply.items.push_back(out);
  }
  return reply;
}

Result<LeaseReply> RdmaGrants::Lease(const KeyBatch& m, uint64_t now_ms) {
  if (leases_.size() >= max_leases_) {
    return Status::InvalidArgument("GET_LEASE past the limit of " + std::to_string(max_leases_) +
                                   " open leases on one connection");
  }
  LeaseReply reply;
  LeaseEntry lease;
  lease.ends_ms = now_ms + lease_ms_;
  for (const BlockKey& key : m.keys) {
    auto found = pool_.Lookup(m.ns, key);
    if (!found) {
      reply.items.push_back({StatusCode::kNotFound, 0, 0, 0});
      continue;
    }
    // Refused, not queued: the caller reads the block some other way, or
    // misses it, while this connection's leases hold their share.
    if (pinned_ + lease.slots.size() >= max_pinned_) {
      reply.items.push_back({StatusCode::kResourceExhausted, 0, 0, 0});
      continue;
    }
    pool_.Pin(found->slot);
    lease.slots.push_back(found->slot);
    reply.items.push_back({StatusCode::kOk, region_.addr + pool_.SlotOffset(found->slot),
                           region_.rkey, found->stored_bytes});
  }
  if (lease.slots.empty()) return reply;
  pinned_ += lease.slots.size();
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
  pinned_ -= it->second.slots.size();
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
