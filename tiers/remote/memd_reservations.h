// The puts one kvtier-memd connection has begun and not yet committed: the
// pool slots PUT_BEGIN reserved for them, keyed by request id, under one
// limit on reserved items per connection. Both data paths share the table,
// so a connection that puts over TCP (PUT_DATA frames) and over RDMA
// (one-sided WRITEs into granted slots) still holds at most `max_items`
// items, and at most `max_slots` pool slots: an item beyond that is refused
// with ResourceExhausted (the rest of its put goes on), so one connection
// cannot take, or evict the blocks of, the whole pool. A PUT_BEGIN that
// would pass `max_items` is refused whole, every item ResourceExhausted, and
// kept open only as a count (its PUT_DATA is dropped, its PUT_COMMIT
// answers the same codes), so the connection goes on; at most
// kMaxRefusedPuts of those may be open at once.
//
// A TCP item must receive its PUT_DATA before PUT_COMMIT, or its slot is
// freed and the item fails with InvalidArgument. An RDMA item is written by
// the peer without the server seeing it; its commit relies on the pool's
// BlockHeader check (a slot never written fails it and is freed).
//
// Not thread-safe: the server's I/O thread owns it. REQUIRES: the pool
// outlives the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "tiers/remote/memd_pool.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::internal::memd {

// How a put's bytes reach its slots.
enum class PutPath : uint8_t { kTcp, kRdma };

// Puts refused whole for the item limit that one connection may leave open
// (not committed): a client with more is not waiting for its replies.
inline constexpr size_t kMaxRefusedPuts = 1024;

// One item of a begun put.
struct Reservation {
  BlockKey key;
  uint64_t stored_bytes = 0;          // BlockHeader + payload
  int64_t slot = -1;                  // -1: the pool refused it (see code)
  StatusCode code = StatusCode::kOk;  // why it was refused
  bool filled = false;                // TCP: its PUT_DATA arrived; RDMA: always
};

class MemdReservations {
 public:
  // `now_ms` (null: the steady clock) times each put's last progress.
  MemdReservations(MemdPool& pool, size_t max_items,
                   size_t max_slots = std::numeric_limits<size_t>::max(),
                   std::function<uint64_t()> now_ms = nullptr);
  // Cancels every open reservation.
  ~MemdReservations() { Cancel(); }
  MemdReservations(const MemdReservations&) = delete;
  MemdReservations& operator=(const MemdReservations&) = delete;

  // Reserves one slot per item; a slot the pool refuses is an item with its
  // code (ResourceExhausted past `max_slots`). When the connection would
  // hold more than `max_items` reserved items, every item is refused with
  // ResourceExhausted and nothing is reserved. InvalidArgument (the
  // connection is then closed) when `request_id` is already open, on either
  // path, or kMaxRefusedPuts refused puts are open. The span is valid until
  // the next call.
  Result<std::span<const Reservation>> Begin(uint32_t request_id, PutPath path, const PutBegin& m);
  // Accepts the PUT_DATA of one TCP item of `bytes` stored bytes and returns
  // it (slot -1: read the data and drop it). InvalidArgument for an unknown
  // request or item, an RDMA put, a repeated item or a size other than the
  // one PUT_BEGIN announced (a put refused whole keeps neither: any item of
  // it is dropped).
  Result<Reservation> Fill(uint32_t request_id, uint32_t item, uint64_t bytes);
  // Publishes every item of `request_id` and frees its entry; per-item codes.
  // InvalidArgument when the request is not open. The commit may come on
  // either path (a TCP put begun before RDMA_HELLO commits after it): the
  // table is the connection's, and a TCP item whose PUT_DATA never came
  // fails whatever path commits it.
  Result<StatusList> Commit(uint32_t request_id);
  // Returns the slots of every open put, or only of those on `path`.
  // REQUIRES (RDMA): the peer can no longer write into them (its queue pair
  // is gone).
  void Cancel();
  void Cancel(PutPath path);

  // Items of the open puts that were not refused whole.
  size_t reserved_items() const { return reserved_items_; }
  size_t reserved_slots() const { return reserved_slots_; }
  size_t open_puts() const { return puts_.size(); }
  // When the open put that progressed least recently last did (its
  // PUT_BEGIN or, TCP, its latest PUT_DATA, whose bytes count as progress
  // until they are due at kFloorBytesPerSecond, plus the time the server
  // did not read it: a time that may be ahead of now); nullopt when none is
  // open.
  std::optional<uint64_t> OldestProgressMs() const;
  // The server stopped reading the connection (its replies backlogged), so
  // the open puts' data may wait unread: until ResumeProgress the time
  // counts as their progress, up to `max_credit_ms` in all over a put's
  // life (a peer that keeps its replies backlogged, taking them a little at
  // a time, must not hold its reservations for ever).
  void PauseProgress(uint64_t max_credit_ms);
  void ResumeProgress();

 private:
  struct Put {
    NamespaceId ns;
    PutPath path = PutPath::kTcp;
    uint64_t progress_ms = 0;
    std::vector<Reservation> items;  // empty when refused whole
    size_t refused_items = 0;        // refused whole: how many items it had
    // Refused whole: the bytes its items declared that no PUT_DATA has
    // sent yet. Data past them is an error, so a put that holds no slot
    // cannot be kept open by data without end.
    uint64_t refused_bytes_left = 0;
    uint64_t paused_credit_ms = 0;  // added to progress_ms for pauses, in all
  };
  // Opens `request_id` as a put refused whole; its items, for the reply.
  Result<std::span<const Reservation>> RefuseWhole(uint32_t request_id, PutPath path,
                                                   const PutBegin& m);
  void Drop(std::unordered_map<uint32_t, Put>::iterator it);
  // When `bytes` of a PUT_DATA are due at kFloorBytesPerSecond from now.
  uint64_t DueMs(uint64_t bytes) const { return now_ms_() + bytes * 1000 / kFloorBytesPerSecond; }
  // What the pause under way adds to `put`'s progress so far.
  uint64_t PauseCredit(const Put& put, uint64_t now_ms) const;

  MemdPool& pool_;
  const size_t max_items_;
  const size_t max_slots_;
  const std::function<uint64_t()> now_ms_;
  std::unordered_map<uint32_t, Put> puts_;
  size_t reserved_items_ = 0;
  size_t reserved_slots_ = 0;         // items of reserved_items_ that hold a slot
  size_t refused_puts_ = 0;           // open puts refused whole
  std::vector<Reservation> refused_;  // the items RefuseWhole returned last
  std::optional<uint64_t> paused_since_ms_;  // while the server does not read
  uint64_t max_credit_ms_ = 0;
};

}  // namespace kvtier::internal::memd
