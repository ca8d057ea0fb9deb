// Server-side bookkeeping of one RDMA client connection: the slots granted
// for one-sided writes (PUT_BEGIN -> PUT_GRANT ... PUT_COMMIT) and the leases
// that keep stored blocks in place while the client reads them (GET_LEASE ->
// LEASE_REPLY ... LEASE_RELEASE or expiry). Pure logic over a MemdPool: no
// verbs and no clock of its own (times are passed in), so every transition
// is unit-tested without a device.
//
// Grants are RDMA puts in the connection's reservation table
// (memd_reservations.h), which its TCP puts share, so both paths draw on one
// per-connection limit. A granted slot stays reserved until its PUT_COMMIT,
// which checks the BlockHeader the client wrote into it (a slot the client
// never wrote fails that check and is freed). A leased slot is pinned:
// eviction, removal or an overwrite drops it from the index at once but
// never reuses it before the lease ends. Not thread-safe: the server's I/O
// thread owns it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "tiers/remote/memd_pool.h"
#include "tiers/remote/memd_reservations.h"
#include "tiers/remote/rdma_protocol.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::internal::memd {

// Leases one connection may hold open at once: one with more is not
// releasing them. GET_LEASE past it is a protocol error.
inline constexpr size_t kMaxOpenLeases = 16384;

// Slot pins one connection's leases may hold at once (a slot leased twice
// counts twice): three quarters of the pool, at least one, as for
// reservations. A GET_LEASE item past it is refused with ResourceExhausted,
// so one connection cannot keep the whole pool from being reused.
inline size_t MaxLeasedSlots(uint64_t slot_count) {
  return std::max<size_t>(1, static_cast<size_t>(slot_count * 3 / 4));
}

class RdmaGrants {
 public:
  // `pool` is addressed by the peer through `region` (the pool's mapping as
  // registered); grants are kept in `table`; leases last `lease_ms`, and at
  // most `max_leases` are open at once (pins: MaxLeasedSlots of the pool).
  // REQUIRES: `pool` and `table` outlive this.
  RdmaGrants(MemdPool& pool, MemdReservations& table, RdmaRegion region, uint32_t lease_ms,
             size_t max_leases = kMaxOpenLeases);
  // Cancels every grant (the RDMA puts of the table) and ends every lease.
  // REQUIRES: the peer can no longer write into the pool.
  ~RdmaGrants();
  RdmaGrants(const RdmaGrants&) = delete;
  RdmaGrants& operator=(const RdmaGrants&) = delete;

  // Reserves one slot per item in the table and grants it at its address
  // in the region. InvalidArgument (the connection is then closed) as
  // MemdReservations::Begin.
  Result<GrantList> Begin(uint32_t request_id, const PutBegin& m);
  // Publishes every granted item of `request_id`; per-item codes.
  // InvalidArgument when the request is not open.
  Result<StatusList> Commit(uint32_t request_id) { return table_.Commit(request_id); }

  // Pins each stored key under one new lease ending at now_ms + lease_ms.
  // Misses are NotFound items, and items past the connection's pin limit
  // ResourceExhausted; lease_id is 0 when nothing was pinned.
  // InvalidArgument (the connection is then closed) when `max_leases` are
  // open already.
  Result<LeaseReply> Lease(const KeyBatch& m, uint64_t now_ms);
  // Ends a lease early; false when it is unknown (already expired or
  // released), which is not an error: the client may be late.
  bool Release(uint64_t lease_id);
  // Ends every lease whose end is at or before now_ms; returns how many.
  size_t Expire(uint64_t now_ms);

  // Reserved items of the connection, on either path.
  size_t reserved_items() const { return table_.reserved_items(); }
  size_t open_leases() const { return leases_.size(); }
  // Slot pins held by the open leases.
  size_t leased_slots() const { return pinned_; }

 private:
  struct LeaseEntry {
    uint64_t ends_ms = 0;
    std::vector<uint32_t> slots;
  };
  void EndLease(std::unordered_map<uint64_t, LeaseEntry>::iterator it);

  MemdPool& pool_;
  MemdReservations& table_;
  const RdmaRegion region_;
  const uint32_t lease_ms_;
  const size_t max_leases_;
  const size_t max_pinned_;
  size_t pinned_ = 0;  // slot pins of leases_
  uint64_t next_lease_ = 1;
  std::unordered_map<uint64_t, LeaseEntry> leases_;
  std::multimap<uint64_t, uint64_t> by_end_;  // ends_ms -> lease id
};

}  // namespace kvtier::internal::memd
