#include "kvtier/tier.h"

#include <string>

namespace kvtier {

Tier::Tier(std::string name, std::string type, TierCapabilities caps)
    : name_(std::move(name)), type_(std::move(type)), caps_(caps) {}

namespace {

// A backend that throws has a bug, but its caller still needs an answer:
// the source, dropped by the unwinding, ends every item it had not set as
// Cancelled, which also ends the op's in-flight count.
template <typename DoOp>
void CallBackend(DoOp&& op) {
  try {
    op();
  } catch (...) {
  }
}

}  // namespace

Tier::~Tier() = default;

std::optional<Completion> Tier::Refuse(size_t items, OpKind kind) {
  std::lock_guard lock(mu_);
  if (shutting_down_) {
    return CompletionSource::Done(items, Status::Unavailable("tier '" + name_ + "' is shut down"));
  }
  if (items > caps_.max_batch_blocks) {
    return CompletionSource::Done(
        items, Status::InvalidArgument("tier '" + name_ + "': batch of " + std::to_string(items) +
                                       " blocks exceeds the limit of " +
                                       std::to_string(caps_.max_batch_blocks)));
  }
  if (items == 0) return Completion();
  // Two counts: the batch's, which ends when it finishes (Track), and the
  // call's, which ends when the backend's Do* returns (EndCall). A backend
  // may finish the batch while it still holds its own locks: Shutdown must
  // not return, and the tier be destroyed, before it has let go of them.
  in_flight_ += 2;
  return std::nullopt;
}

void Tier::EndCall() {
  std::lock_guard lock(mu_);
  if (--in_flight_ == 0) drained_.notify_all();
}

CompletionSource Tier::Track(OpKind kind, size_t items, Completion* c) {
  try {
    CompletionSource src(items);
    const Completion done = src.completion();
    done.OnDone([this, kind, done] {
      Count(kind, done);
      std::lock_guard lock(mu_);
      if (--in_flight_ == 0) drained_.notify_all();
    });
    *c = done;
    return src;
  } catch (...) {
    // The source, if made, ended with nothing registered: both counts end here.
    std::lock_guard lock(mu_);
    in_flight_ -= 2;
    if (in_flight_ == 0) drained_.notify_all();
    throw;
  }
}

void Tier::Count(OpKind kind, const Completion& c) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < c.size(); ++i) {
    const Status& s = c.result(i);
    if (!s.ok() && s.code() != StatusCode::kNotFound) ++counters_.errors;
    if (s.code() == StatusCode::kCorruption) ++counters_.corruptions;
    switch (kind) {
      case OpKind::kRead:
        ++counters_.read_blocks;
        if (s.ok()) {
          ++counters_.read_hits;
          counters_.bytes_read += c.bytes(i);
        }
        break;
      case OpKind::kWrite:
        if (s.ok()) {
          ++counters_.write_blocks;
          counters_.bytes_written += c.bytes(i);
        }
        break;
      case OpKind::kRemove:
        if (s.ok()) ++counters_.removed_blocks;
        break;
      case OpKind::kContains:
        break;
    }
  }
}

Completion Tier::Read(NamespaceId ns, std::span<const ReadOp> ops) {
  if (auto refused = Refuse(ops.size(), OpKind::kRead)) return *refused;
  Completion c;
  CompletionSource src = Track(OpKind::kRead, ops.size(), &c);
  CallBackend([&] { DoRead(ns, ops, std::move(src)); });
  EndCall();
  return c;
}

Completion Tier::Write(NamespaceId ns, std::span<const WriteOp> ops) {
  for (const WriteOp& op : ops) {
    if (op.src.empty()) {
      return CompletionSource::Done(
          ops.size(), Status::InvalidArgument("tier '" + name_ + "': empty payload in batch"));
    }
    if (caps_.max_block_bytes != 0 && op.src.size() > caps_.max_block_bytes) {
      return CompletionSource::Done(ops.size(),
                                    Status::InvalidArgument("tier '" + name_ + "': payload of " +
                                                            std::to_string(op.src.size()) +
                                                            " bytes exceeds the block limit of " +
                                                            std::to_string(caps_.max_block_bytes)));
    }
  }
  if (auto refused = Refuse(ops.size(), OpKind::kWrite)) return *refused;
  Completion c;
  CompletionSource src = Track(OpKind::kWrite, ops.size(), &c);
  CallBackend([&] { DoWrite(ns, ops, std::move(src)); });
  EndCall();
  return c;
}

Completion Tier::Remove(NamespaceId ns, std::span<const BlockKey> keys) {
  if (auto refused = Refuse(keys.size(), OpKind::kRemove)) return *refused;
  Completion c;
  CompletionSource src = Track(OpKind::kRemove, keys.size(), &c);
  CallBackend([&] { DoRemove(ns, keys, std::move(src)); });
  EndCall();
  return c;
}

Completion Tier::Contains(NamespaceId ns, std::span<const BlockKey> keys) {
  if (auto refused = Refuse(keys.size(), OpKind::kContains)) return *refused;
  Completion c;
  CompletionSource src = Track(OpKind::kContains, keys.size(), &c);
  CallBackend([&] { DoContains(ns, keys, std::move(src)); });
  EndCall();
  return c;
}

void Tier::Claim(NamespaceId ns, std::span<const BlockKey> keys) {
  {
    std::lock_guard lock(mu_);
    if (shutting_down_ || keys.empty()) return;
    ++in_flight_;  // Shutdown waits for it like for any batch
  }
  CallBackend([&] { DoClaim(ns, keys); });
  std::lock_guard lock(mu_);
  if (--in_flight_ == 0) drained_.notify_all();
}

TierCounters Tier::Counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void Tier::Shutdown() {
  std::unique_lock lock(mu_);
  shutting_down_ = true;
  drained_.wait(lock, [&] { return in_flight_ == 0; });
  if (shut_down_) return;
  shut_down_ = true;
  // DoShutdown counts as a call in flight (new work is refused by now), so
  // a second caller waits above until it has returned, thrown or not.
  ++in_flight_;
  lock.unlock();
  struct EndShutdown {
    Tier* tier;
    ~EndShutdown() { tier->EndCall(); }
  } end{this};
  DoShutdown();
}

}  // namespace kvtier
