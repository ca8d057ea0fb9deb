// Pending removes: lower-tier copies the index has dropped whose Remove has
// not succeeded yet (see RuntimeImpl::pending_removes_). A failed Remove is
// retried by each mover pass until the tier answers, so a tier that frees
// room only on a successful remove does not lose that room for good.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

std::vector<RuntimeImpl::RemoveBatch> RuntimeImpl::SplitRemoves(size_t tier,
                                                                const std::vector<NsKey>& keys,
                                                                bool listed) const {
  std::map<uint64_t, std::vector<BlockKey>> by_ns;
  for (const NsKey& k : keys) by_ns[k.ns.value].push_back(k.key);
  const size_t limit = BatchLimit(*lower_[tier - 1]);
  std::vector<RemoveBatch> batches;
  for (const auto& [ns, all] : by_ns) {
    for (size_t from = 0; from < all.size(); from += limit) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(from);
      batches.push_back(
          {tier,
           NamespaceId{ns},
           {first, first + static_cast<std::ptrdiff_t>(std::min(limit, all.size() - from))},
           listed});
    }
  }
  return batches;
}

Status RuntimeImpl::RemoveFailure(const RemoveBatch& b, const Completion& c) const {
  for (size_t k = 0; k < b.keys.size(); ++k) {
    const Status st = c.result(k);
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      return st.WithContext("remove of block " + ToHex(b.keys[k]) + " from tier '" +
                            lower_[b.tier - 1]->name() + "' (retried by the mover)");
    }
  }
  return Status::Ok();
}

Status RuntimeImpl::RunRemoves(size_t tier, const std::vector<NsKey>& keys, bool listed) {
  Status first_failure;
  std::vector<RemoveBatch> batches;
  size_t next = 0;  // the first batch not settled
  try {
    batches = SplitRemoves(tier, keys, listed);
    for (; next < batches.size(); ++next) {
      const RemoveBatch& b = batches[next];
      Completion c = lower_[tier - 1]->Remove(b.ns, b.keys);
      (void)c.Wait();
      if (first_failure.ok()) first_failure = RemoveFailure(b, c);
      std::lock_guard lock(mu_);
      SettleRemovesLocked(tier, b.ns, b.keys, c, listed);
    }
  } catch (...) {
    // Out of memory: the keys not settled stay listed, no longer running,
    // and a mover pass retries them.
    std::lock_guard lock(mu_);
    if (listed) AbandonUnsentLocked(tier, keys, batches, next);
    return Status::ResourceExhausted("remove: out of memory; retried by the mover");
  }
  return first_failure;
}

void RuntimeImpl::IssueRemove(const RemoveBatch& b,
                              std::function<void(const Completion&)> settle_locked) {
  // Built before the call goes out: once it has, it must be settled.
  auto issued = std::make_shared<Completion>();
  std::function<void()> settle = [this, issued, settle_locked = std::move(settle_locked)] {
    std::lock_guard lock(mu_);
    try {
      settle_locked(*issued);
    } catch (...) {  // out of memory: what was not settled is retried
    }
    EndLateCallLocked();
  };
  {
    std::lock_guard lock(mu_);
    ++late_calls_;
  }
  try {
    *issued = lower_[b.tier - 1]->Remove(b.ns, b.keys);
  } catch (...) {  // not issued
    std::lock_guard lock(mu_);
    EndLateCallLocked();
    throw;
  }
  issued->OnDone(std::move(settle));  // allocates nothing: room is kept for it
}

void RuntimeImpl::AbandonRemovesLocked(size_t tier, NamespaceId ns,
                                       std::span<const BlockKey> keys) {
  auto& list = pending_removes_[tier];
  for (const BlockKey& k : keys) {
    const auto it = list.find({ns, k});
    if (it != list.end() && it->second.running > 0) --it->second.running;
  }
}

void RuntimeImpl::SendRemoves(size_t tier, const std::vector<NsKey>& listed,
                              const std::vector<NsKey>& unlisted, bool wait) {
  if (wait) {
    if (!listed.empty()) (void)RunRemoves(tier, listed);
    if (!unlisted.empty()) (void)RunRemoves(tier, unlisted, /*listed=*/false);
  } else {
    if (!listed.empty()) StartRemoves(tier, listed);
    if (!unlisted.empty()) StartRemoves(tier, unlisted, /*listed=*/false);
  }
}

void RuntimeImpl::AbandonUnsentLocked(size_t tier, const std::vector<NsKey>& keys,
                                      const std::vector<RemoveBatch>& batches, size_t next) {
  if (batches.empty()) {
    for (const NsKey& k : keys) AbandonRemovesLocked(tier, k.ns, {&k.key, 1});
  }
  for (; next < batches.size(); ++next) {
    AbandonRemovesLocked(tier, batches[next].ns, batches[next].keys);
  }
}

void RuntimeImpl::StartRemoves(size_t tier, const std::vector<NsKey>& keys, bool listed) noexcept {
  std::vector<RemoveBatch> batches;
  size_t next = 0;  // the first batch not issued
  try {
    batches = SplitRemoves(tier, keys, listed);
    for (; next < batches.size(); ++next) {
      const RemoveBatch& b = batches[next];
      IssueRemove(b, [this, b](const Completion& c) {
        SettleRemovesLocked(b.tier, b.ns, b.keys, c, b.listed);
      });
    }
  } catch (...) {
    // Out of memory: the keys not issued stay listed, and a mover pass
    // retries them.
    std::lock_guard lock(mu_);
    if (listed) AbandonUnsentLocked(tier, keys, batches, next);
  }
}

namespace {

// How long Runtime::Remove waits for the lower tiers to drop their copies;
// past it the keys are gone from the index and the copies go when the tier
// answers.
constexpr std::chrono::seconds kRemoveWait(1);

}  // namespace

Status RuntimeImpl::RemoveFromLowerTiers(const std::vector<NsKey>& keys) {
  struct Call {                      // guarded by mu_
    std::vector<size_t> unanswered;  // per tier: batches not settled yet
    size_t pending = 0;
    Status first_failure;
  };
  std::vector<RemoveBatch> batches;
  std::shared_ptr<Call> call;
  try {
    for (size_t t = 1; t < tier_count(); ++t) {
      std::vector<RemoveBatch> part = SplitRemoves(t, keys);
      std::move(part.begin(), part.end(), std::back_inserter(batches));
    }
    call = std::make_shared<Call>();
    call->unanswered.assign(tier_count(), 0);
  } catch (...) {  // out of memory: the keys stay listed, and mover passes retry them
    std::lock_guard lock(mu_);
    for (size_t t = 1; t < tier_count(); ++t) {
      for (const NsKey& k : keys) AbandonRemovesLocked(t, k.ns, {&k.key, 1});
    }
    --removes_running_;
    ++removes_ended_;
    throw;
  }
  {
    std::lock_guard lock(mu_);
    call->pending = batches.size();
    for (const RemoveBatch& b : batches) ++call->unanswered[b.tier];
    if (batches.empty()) {
      --removes_running_;
      ++removes_ended_;
      return Status::Ok();
    }
  }
  // REQUIRES: mu_ held.
  auto answered = [this, call](const RemoveBatch& b) {
    --call->unanswered[b.tier];
    if (--call->pending == 0) {
      --removes_running_;
      ++removes_ended_;
    }
    removes_done_.notify_all();
  };
  std::exception_ptr failed;
  for (const RemoveBatch& b : batches) {
    if (failed) {  // memory ran out for an earlier batch: these are not issued
      std::lock_guard lock(mu_);
      AbandonRemovesLocked(b.tier, b.ns, b.keys);
      answered(b);
      continue;
    }
    try {
      IssueRemove(b, [this, call, b, answered](const Completion& c) {
        try {
          SettleRemovesLocked(b.tier, b.ns, b.keys, c);
          if (call->first_failure.ok()) call->first_failure = RemoveFailure(b, c);
        } catch (...) {  // out of memory: what was not settled is retried
          if (call->first_failure.ok()) {
            call->first_failure = Status::ResourceExhausted("remove: out of memory settling it");
          }
        }
        answered(b);
      });
    } catch (...) {
      failed = std::current_exception();
      std::lock_guard lock(mu_);
      AbandonRemovesLocked(b.tier, b.ns, b.keys);
      answered(b);
    }
  }
  if (failed) std::rethrow_exception(failed);
  std::unique_lock lock(mu_);
  if (removes_done_.wait_for(lock, kRemoveWait, [&] { return call->pending == 0; })) {
    return call->first_failure;
  }
  std::string tiers;
  for (size_t t = 1; t < tier_count(); ++t) {
    if (call->unanswered[t] == 0) continue;
    tiers += (tiers.empty() ? "'" : ", '") + lower_[t - 1]->name() + "'";
  }
  return Status::DeadlineExceeded(
      "remove: tier " + tiers + " has not answered within " + std::to_string(kRemoveWait.count()) +
      " s; the keys are gone from the index, and their copies there go when it answers "
      "(the mover retries a failure)");
}

void RuntimeImpl::SettleRemovesLocked(size_t tier, NamespaceId ns, std::span<const BlockKey> keys,
                                      const Completion& c, bool listed) {
  auto& list = pending_removes_[tier];
  for (size_t k = 0; k < keys.size(); ++k) {
    const StatusCode result = c.result(k).code();
    if (adoptions_running_ != 0 && (result == StatusCode::kOk || result == StatusCode::kNotFound)) {
      if (removed_during_adoption_.size() >= kMaxRemovedDuringAdoption) {
        removed_during_adoption_.clear();
        ++adopt_epoch_;
      }
      try {
        removed_during_adoption_[{ns, keys[k]}] |= 1U << tier;
      } catch (...) {  // out of memory: the adoptions running now adopt nothing
        removed_during_adoption_.clear();
        ++adopt_epoch_;
      }
    }
    if (!listed) continue;
    const auto it = list.find({ns, keys[k]});
    if (it == list.end()) continue;
    PendingRemove& p = it->second;
    const StatusCode code = c.result(k).code();
    if (code == StatusCode::kOk || code == StatusCode::kNotFound) p.gone = true;
    if (p.running > 0) --p.running;
    // Another Remove still running could land after a new write: stay listed.
    if (p.running == 0 && p.gone) list.erase(it);  // else retried by the next pass
  }
  removes_done_.notify_all();  // a shutdown writeback may wait for these keys
}

void RuntimeImpl::ForgetLostCopies(size_t tier, NamespaceId ns, std::span<const BlockKey> keys) {
  std::lock_guard lock(mu_);
  for (const BlockKey& key : keys) {
    if (IndexEntry* e = index_.Find({ns, key}); e != nullptr) index_.DropLocation(e, tier);
  }
  // Then those left with no copy go, unless held (a pin, a child, a fill);
  // found again each time, as erasing one may take its ancestors along.
  for (const BlockKey& key : keys) {
    if (IndexEntry* e = index_.Find({ns, key}); e != nullptr) EraseIfUnheldLocked(e);
  }
}

void RuntimeImpl::RetryPendingRemoves() {
  std::vector<std::vector<NsKey>> retry(tier_count());
  {
    std::lock_guard lock(mu_);
    // Every list reserved first: marking below allocates nothing, so no key
    // is marked running without its Remove.
    for (size_t t = 1; t < tier_count(); ++t) retry[t].reserve(pending_removes_[t].size());
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
