// Pending removes: lower-tier copies the index has dropped whose Remove has
// not succeeded yet (see RuntimeImpl::pending_removes_). A failed Remove is
// retried by each mover pass until the tier answers, so a tier that frees
// room only on a successful remove does not lose that room for good.
#include <algorithm>
#include <cstddef>
#include <map>
#include <string>

#include "core/runtime_impl.h"

namespace kvtier::internal {

bool RuntimeImpl::QueueRemoveLocked(size_t tier, const NsKey& k, bool running) {
  auto& list = pending_removes_[tier];
  auto it = list.find(k);
  if (it == list.end()) {
    if (list.size() >= kMaxPendingRemoves) return false;
    it = list.emplace(k, PendingRemove{}).first;
  }
  if (running) ++it->second.running;
  return true;
}

Status RuntimeImpl::RunRemoves(size_t tier, const std::vector<NsKey>& keys) {
  Tier& t = *lower_[tier - 1];
  Status first_failure;
  std::map<uint64_t, std::vector<BlockKey>> by_ns;
  for (const NsKey& k : keys) by_ns[k.ns.value].push_back(k.key);
  const size_t batch = BatchLimit(t);
  for (const auto& [ns, all] : by_ns) {
    for (size_t from = 0; from < all.size(); from += batch) {
      const std::span<const BlockKey> part =
          std::span(all).subspan(from, std::min(batch, all.size() - from));
      Completion c = t.Remove(NamespaceId{ns}, part);
      (void)c.Wait();
      for (size_t k = 0; k < part.size() && first_failure.ok(); ++k) {
        const Status st = c.result(k);
        if (!st.ok() && st.code() != StatusCode::kNotFound) {
          first_failure = st.WithContext("remove of block " + ToHex(part[k]) + " from tier '" +
                                         t.name() + "' (retried by the mover)");
        }
      }
      std::lock_guard lock(mu_);
      SettleRemovesLocked(tier, NamespaceId{ns}, part, c);
    }
  }
  return first_failure;
}

void RuntimeImpl::StartRemoves(size_t tier, const std::vector<NsKey>& keys) {
  Tier& t = *lower_[tier - 1];
  std::map<uint64_t, std::vector<BlockKey>> by_ns;
  for (const NsKey& k : keys) by_ns[k.ns.value].push_back(k.key);
  const size_t batch = BatchLimit(t);
  for (const auto& [ns, all] : by_ns) {
    for (size_t from = 0; from < all.size(); from += batch) {
      std::vector<BlockKey> part(
          all.begin() + static_cast<std::ptrdiff_t>(from),
          all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), from + batch)));
      {
        std::lock_guard lock(mu_);
        ++late_calls_;
      }
      Completion c = t.Remove(NamespaceId{ns}, part);
      c.OnDone([this, tier, id = NamespaceId{ns}, part = std::move(part), c] {
        std::lock_guard lock(mu_);
        SettleRemovesLocked(tier, id, part, c);
        // Under the lock: Shutdown() cannot return before this lets go of mu_.
        if (--late_calls_ == 0) late_calls_done_.notify_all();
      });
    }
  }
}

void RuntimeImpl::SettleRemovesLocked(size_t tier, NamespaceId ns, std::span<const BlockKey> keys,
                                      const Completion& c) {
  auto& list = pending_removes_[tier];
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto it = list.find({ns, keys[k]});
    if (it == list.end()) continue;
    PendingRemove& p = it->second;
    const StatusCode code = c.result(k).code();
    if (code == StatusCode::kOk || code == StatusCode::kNotFound) p.gone = true;
    if (p.running > 0) --p.running;
    // Another Remove still running could land after a new write: stay listed.
    if (p.running == 0 && p.gone) list.erase(it);  // else retried by the next pass
  }
}

void RuntimeImpl::RetryPendingRemoves() {
  std::vector<std::vector<NsKey>> retry(tier_count());
  {
    std::lock_guard lock(mu_);
    for (size_t t = 1; t < tier_count(); ++t) {
      for (auto& [k, p] : pending_removes_[t]) {
        if (p.running != 0) continue;
        ++p.running;
        retry[t].push_back(k);
      }
    }
  }
  for (size_t t = 1; t < tier_count(); ++t) {
    if (!retry[t].empty()) (void)RunRemoves(t, retry[t]);
  }
}

}  // namespace kvtier::internal
