// Writing the hub down at Shutdown (MoverOptions::shutdown_writeback_ms):
// a block only the hub holds ends with the process, so a persistent tier
// below it is given those its admission takes before the tiers shut down.
// Root first, and a block only once its parent is held below, so that every
// block written is reachable again after a restart (a lookup adopts the
// leading keys a tier holds) and a deadline cuts off whole suffixes. A
// state checkpoint goes whole or not at all: admitted once, its parts
// written together, the rest of one begun written past the deadline.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "core/runtime_impl.h"

namespace kvtier::internal {

void RuntimeImpl::WriteBackHub() {
  const uint64_t ms = options_.mover.shutdown_writeback_ms;
  if (ms == 0 || tier_count() < 2) return;
  const auto start = std::chrono::steady_clock::now();
  const SteadyTime deadline = start + std::chrono::milliseconds(ms);
  const SteadyTime remove_wait_end = start + std::chrono::milliseconds(ms) / 2;
  std::vector<IndexEntry*> pending;
  {
    std::unique_lock lock(mu_);
    // A demotion a save or load handed over when its time ran out (its
    // victims still moving, so not taken below) lands or fails first: what
    // it writes may be the parent of blocks written here, and a block whose
    // write fails is written here again. Waited for through the first half
    // of the time at most, as a Remove below is.
    moves_done_.wait_until(lock, remove_wait_end, [this] { return moving_blocks_ == 0; });
    hub_ending_ = true;
    pending = index_.OnlyIn(0);
    // Root first; a checkpoint's parts together, right after the blocks of
    // its boundary's depth, so that a deadline splits at most one of them.
    auto order = [](const IndexEntry* e) {
      const IndexEntry* b = TierPolicies::BoundaryOf(*e);
      return std::tuple(b != nullptr ? b->depth : e->depth, b != nullptr,
                        reinterpret_cast<uintptr_t>(b), e->depth);
    };
    std::stable_sort(pending.begin(), pending.end(),
                     [&](const IndexEntry* a, const IndexEntry* b) { return order(a) < order(b); });
    for (IndexEntry* v : pending) {
      v->moving = true;
      ++v->pins;
    }
    moving_blocks_ += pending.size();
  }
  const size_t batch = std::min<size_t>(options_.mover.batch_blocks, BatchLimit(*lower_[0]));
  size_t written_blocks = 0, next = 0;
  std::unordered_set<const IndexEntry*> going;  // written below in this writeback
  // A block below a parent that no tier below holds, nor gets in this
  // writeback, could never be found. REQUIRES: mu_ held.
  auto parent_below = [this, &going](const IndexEntry* v) {
    const IndexEntry* p = v->parent;
    return p == nullptr || OtherCopiesLocked(*p, 0) != 0 || going.count(p) != 0;
  };
  // pending[i] is the next part of the checkpoint pending[i - 1] is part of.
  auto next_part = [&](size_t i) {
    return i > 0 && i < pending.size() && pending[i]->is_checkpoint &&
           pending[i]->parent == pending[i - 1] && pending[i - 1]->is_checkpoint;
  };
  try {
    while (next < pending.size()) {
      size_t end = std::min(pending.size(), next + batch);
      if (std::chrono::steady_clock::now() >= deadline) {
        // Past it, only the rest of a checkpoint begun below is written: its
        // parts are of use to a lookup only all together.
        if (!next_part(next) || going.count(pending[next - 1]) == 0) break;
        end = next + 1;
        while (end - next < batch && next_part(end)) ++end;
      }
      const std::vector<IndexEntry*> victims(pending.begin() + next, pending.begin() + end);
      next = end;
      std::vector<bool> write(victims.size(), false), written(victims.size(), false);
      std::vector<Status> read_status(victims.size());
      const bool admits_all = policies_->admits_all(1);
      TierUsage usage;
      if (!admits_all) usage = lower_[0]->Usage();
      {
        std::unique_lock lock(mu_);
        // A Remove of a victim from the tier that still runs would land after
        // the victim's write and take its new copy: waited for, through the
        // first half of the time at most (a Remove that hangs must not cost
        // every later batch), and a victim whose Remove outlasts that wait is
        // not written.
        auto removing = [this](const IndexEntry* v) {
          const auto it = pending_removes_[1].find(v->id);
          return it != pending_removes_[1].end() && it->second.running != 0;
        };
        removes_done_.wait_until(lock, remove_wait_end, [&] {
          return std::none_of(victims.begin(), victims.end(), removing);
        });
        const TierState state =
            admits_all ? TierState{}
                       : policies_->StateOf(1, usage.capacity_bytes, usage.used_bytes, NowNs());
        uint64_t admitted = 0, refused = 0;
        for (size_t i = 0; i < victims.size(); ++i) {
          if (!parent_below(victims[i]) || removing(victims[i])) continue;
          const IndexEntry* p = victims[i]->parent;
          // A checkpoint is admitted once, at its first part: the rest follow.
          const bool later_part = victims[i]->is_checkpoint && p->is_checkpoint;
          write[i] = admits_all || later_part ||
                     policies_->Admit(1, policies_->AdmissionMetaOf(*victims[i], 1), state);
          ++(write[i] ? admitted : refused);
          if (write[i]) going.insert(victims[i]);
        }
        if (admitted != 0) metrics_.AddAdmission(1, true, admitted);
        if (refused != 0) metrics_.AddAdmission(1, false, refused);
      }
      WriteToNext(0, victims, write, written, read_status);
      // Listed as running removes, and not (out of memory listing them).
      std::vector<NsKey> unreachable, unlisted;
      unreachable.reserve(victims.size());  // adding one below allocates nothing
      unlisted.reserve(victims.size());
      // Issued however the block below ends (with mu_ released): a key
      // listed as running has its Remove.
      struct IssueRemoves {
        RuntimeImpl* rt;
        std::vector<NsKey>& listed;
        std::vector<NsKey>& unlisted;
        ~IssueRemoves() { rt->SendRemoves(1, listed, unlisted, /*wait=*/false); }
      } issue{this, unreachable, unlisted};
      {
        std::lock_guard lock(mu_);
        const uint64_t now = NowNs();
        uint64_t bytes = 0;
        for (size_t i = 0; i < victims.size(); ++i) {
          if (!written[i]) {
            going.erase(victims[i]);
            continue;
          }
          if (!parent_below(victims[i])) {
            // Written in the batch whose write of its parent (earlier in
            // it) failed: no lookup reaches it, so its copy goes again.
            going.erase(victims[i]);
            bytes += victims[i]->bytes;
            try {
              (void)QueueRemoveLocked(1, victims[i]->id, /*running=*/true);
              unreachable.push_back(victims[i]->id);
            } catch (...) {  // out of memory: removed unlisted
              unlisted.push_back(victims[i]->id);
            }
            continue;
          }
          bytes += IndexDemotedLocked(victims[i], 0, now);
          ++written_blocks;
        }
        policies_->OnWritten(1, bytes, now);
      }
    }
  } catch (const std::exception& e) {
    if (log_) log_->Log(LogLevel::kError, std::string("shutdown writeback failed: ") + e.what());
  } catch (...) {
    if (log_) log_->Log(LogLevel::kError, "shutdown writeback failed with an exception");
  }
  {
    std::lock_guard lock(mu_);
    for (IndexEntry* v : pending) EndMoveLocked(v);
    NotifyMovesSettledLocked();
  }
  if (log_ && !pending.empty()) {
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    log_->Log(LogLevel::kInfo, "shutdown: wrote " + std::to_string(written_blocks) + " of " +
                                   std::to_string(pending.size()) +
                                   " blocks only the hub held to tier '" + lower_[0]->name() +
                                   "' in " + std::to_string(took.count()) + " ms" +
                                   (next < pending.size() ? " (stopped at the deadline)" : ""));
  }
}

}  // namespace kvtier::internal
