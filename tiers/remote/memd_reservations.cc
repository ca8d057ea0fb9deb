#include "tiers/remote/memd_reservations.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>

#include "kvtier/block_header.h"

namespace kvtier::internal::memd {
namespace {

uint64_t SteadyNowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

MemdReservations::MemdReservations(MemdPool& pool, size_t max_items, size_t max_slots,
                                   std::function<uint64_t()> now_ms)
    : pool_(pool),
      max_items_(max_items),
      max_slots_(max_slots),
      now_ms_(now_ms ? std::move(now_ms) : SteadyNowMs) {}

Result<std::span<const Reservation>> MemdReservations::Begin(uint32_t request_id, PutPath path,
                                                             const PutBegin& m) {
  if (puts_.count(request_id) != 0) {
    return Status::InvalidArgument("PUT_BEGIN reuses request id " + std::to_string(request_id) +
                                   ", which is still open");
  }
  // The check comes before any slot is reserved: a put refused whole leaves
  // the pool as it was.
  if (reserved_items_ + m.items.size() > max_items_) return RefuseWhole(request_id, path, m);
  Put put{m.ns, path, now_ms_(), {}, 0};
  put.items.reserve(m.items.size());
  for (const PutItem& it : m.items) {
    Reservation r;
    r.key = it.key;
    r.stored_bytes = it.payload_bytes + kBlockHeaderBytes;
    // An RDMA item is written one-sided; only the header check at commit
    // tells whether it arrived.
    r.filled = path == PutPath::kRdma;
    // Past the connection's share no slot is taken, so nothing is evicted
    // for it either.
    auto slot = reserved_slots_ < max_slots_
                    ? pool_.Reserve(r.stored_bytes)
                    : Result<uint32_t>(Status::ResourceExhausted(
                          "this connection holds its share of the pool's slots"));
    if (slot.ok()) {
      r.slot = *slot;
      ++reserved_slots_;
      // A slot that last held this very block would pass the header check
      // at commit even if the client never wrote it: clear the header, so
      // only bytes written for this put can.
      if (r.filled) {
        std::span<std::byte> head = pool_.SlotBytes(r.slot, kBlockHeaderBytes);
        std::fill(head.begin(), head.end(), std::byte{0});
      }
    } else {
      r.code = slot.status().code();
    }
    put.items.push_back(r);
  }
  reserved_items_ += put.items.size();
  auto [it, inserted] = puts_.emplace(request_id, std::move(put));
  return std::span<const Reservation>(it->second.items);
}

// A client that pipelines puts past the limit gets its items refused like
// those past the slot share, instead of losing its connection and every
// request on it. Only the count is kept: the items it may still send data
// for cost nothing to drop.
Result<std::span<const Reservation>> MemdReservations::RefuseWhole(uint32_t request_id,
                                                                   PutPath path,
                                                                   const PutBegin& m) {
  if (refused_puts_ >= kMaxRefusedPuts) {
    return Status::InvalidArgument("PUT_BEGIN past the reservation limit with " +
                                   std::to_string(refused_puts_) +
                                   " puts refused for it still open");
  }
  refused_.clear();
  uint64_t declared = 0;
  for (const PutItem& it : m.items) {
    declared += it.payload_bytes + kBlockHeaderBytes;
    Reservation r;
    r.key = it.key;
    r.stored_bytes = it.payload_bytes + kBlockHeaderBytes;
    r.code = StatusCode::kResourceExhausted;
    r.filled = path == PutPath::kRdma;
    refused_.push_back(r);
  }
  puts_.emplace(request_id, Put{m.ns, path, now_ms_(), {}, m.items.size(), declared});
  ++refused_puts_;
  return std::span<const Reservation>(refused_);
}

Result<Reservation> MemdReservations::Fill(uint32_t request_id, uint32_t item, uint64_t bytes) {
  auto put = puts_.find(request_id);
  if (put != puts_.end() && put->second.path == PutPath::kTcp && item < put->second.refused_items) {
    if (bytes > put->second.refused_bytes_left) {
      return Status::InvalidArgument(
          "PUT_DATA of a refused put sends more than its items declared");
    }
    put->second.refused_bytes_left -= bytes;
    put->second.progress_ms = DueMs(bytes);  // read and dropped
    Reservation dropped;
    dropped.stored_bytes = bytes;
    dropped.code = StatusCode::kResourceExhausted;
    return dropped;
  }
  if (put == puts_.end() || put->second.path != PutPath::kTcp || item >= put->second.items.size()) {
    return Status::InvalidArgument("PUT_DATA names no PUT_BEGIN item");
  }
  Reservation& r = put->second.items[item];
  if (r.filled || bytes != r.stored_bytes) {
    return Status::InvalidArgument("PUT_DATA repeats an item or its size differs from PUT_BEGIN");
  }
  r.filled = true;
  // The item's bytes may take a while on a slow link: they are its put's
  // progress until due at the floor rate (each item is filled once, so a
  // peer cannot hold its reservations longer than its items' bytes take).
  put->second.progress_ms = DueMs(bytes);
  return r;
}

Result<StatusList> MemdReservations::Commit(uint32_t request_id) {
  auto it = puts_.find(request_id);
  if (it == puts_.end()) return Status::InvalidArgument("PUT_COMMIT names no PUT_BEGIN");
  StatusList reply;
  if (it->second.refused_items > 0) {
    reply.codes.assign(it->second.refused_items, StatusCode::kResourceExhausted);
    Drop(it);
    return reply;
  }
  reply.codes.reserve(it->second.items.size());
  for (Reservation& r : it->second.items) {
    StatusCode code = r.code;
    if (r.slot >= 0 && !r.filled) {
      pool_.CancelReservation(static_cast<uint32_t>(r.slot));
      code = StatusCode::kInvalidArgument;
    } else if (r.slot >= 0) {
      code =
          pool_.Commit(it->second.ns, r.key, static_cast<uint32_t>(r.slot), r.stored_bytes).code();
    }
    if (r.slot >= 0) --reserved_slots_;
    r.slot = -1;  // the pool owns it again, stored or free
    reply.codes.push_back(code);
  }
  Drop(it);
  return reply;
}

std::optional<uint64_t> MemdReservations::OldestProgressMs() const {
  const uint64_t now = paused_since_ms_ ? now_ms_() : 0;
  std::optional<uint64_t> oldest;
  for (const auto& [id, put] : puts_) {
    const uint64_t progress = put.progress_ms + PauseCredit(put, now);
    if (!oldest || progress < *oldest) oldest = progress;
  }
  return oldest;
}

uint64_t MemdReservations::PauseCredit(const Put& put, uint64_t now_ms) const {
  if (!paused_since_ms_ || now_ms <= *paused_since_ms_) return 0;
  const uint64_t left = max_credit_ms_ - std::min(max_credit_ms_, put.paused_credit_ms);
  return std::min(now_ms - *paused_since_ms_, left);
}

void MemdReservations::PauseProgress(uint64_t max_credit_ms) {
  if (paused_since_ms_) return;
  paused_since_ms_ = now_ms_();
  max_credit_ms_ = max_credit_ms;
}

void MemdReservations::ResumeProgress() {
  if (!paused_since_ms_) return;
  const uint64_t now = now_ms_();
  for (auto& [id, put] : puts_) {
    const uint64_t credit = PauseCredit(put, now);
    put.progress_ms += credit;
    put.paused_credit_ms += credit;
  }
  paused_since_ms_.reset();
}

void MemdReservations::Cancel() {
  while (!puts_.empty()) Drop(puts_.begin());
}

void MemdReservations::Cancel(PutPath path) {
  for (auto it = puts_.begin(); it != puts_.end();) {
    auto next = std::next(it);
    if (it->second.path == path) Drop(it);
    it = next;
  }
}

void MemdReservations::Drop(std::unordered_map<uint32_t, Put>::iterator it) {
  for (const Reservation& r : it->second.items) {
    if (r.slot < 0) continue;
    pool_.CancelReservation(static_cast<uint32_t>(r.slot));
    --reserved_slots_;
  }
  reserved_items_ -= it->second.items.size();
  if (it->second.refused_items > 0) --refused_puts_;
  puts_.erase(it);
}

}  // namespace kvtier::internal::memd
