// RuntimeImpl: the Runtime behind the public interface. Split over several
// files by flow: runtime_impl.cc (open, lookup, remove, shutdown),
// runtime_save.cc, runtime_load.cc, mover.cc, runtime_adopt.cc,
// runtime_engine_usage.cc and runtime_stats.cc.
//
// Locking: mu_ guards the index, the per-tier statistics and the hub's slot
// ownership. Bytes are never copied under mu_: a block being copied is pinned
// (or still kFilling), which keeps its slot alive without the lock.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/admin_server.h"
#include "core/block_index.h"
#include "core/metrics.h"
#include "core/recent_requests.h"
#include "core/tier_policies.h"
#include "io/worker_pool.h"
#include "kvtier/policy.h"
#include "kvtier/runtime.h"
#include "kvtier/tier.h"
#include "tiers/host/host_arena.h"

namespace kvtier::internal {

class RuntimeImpl;

// Carries lower tiers' notices of lost copies (TierContext::copies_lost) to
// the runtime: the tiers are built before it and stop only in its Shutdown.
struct LostCopiesRelay {
  std::mutex mu;
  RuntimeImpl* runtime = nullptr;  // guarded by mu; null before and after the runtime
};

class RuntimeImpl final : public Runtime {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  RuntimeImpl(RuntimeOptions options, std::shared_ptr<CopyEngine> engine,
              std::unique_ptr<HostArena> arena, std::vector<std::unique_ptr<Tier>> lower,
              std::unique_ptr<TierPolicies> policies,
              std::shared_ptr<LostCopiesRelay> relay = nullptr);
  ~RuntimeImpl() override;

  // Lower tier `tier` lost its copies of `keys` without a Remove (through
  // LostCopiesRelay): the index forgets them there, as a load that misses
  // them would (runtime_load.cc).
  void ForgetLostCopies(size_t tier, NamespaceId ns, std::span<const BlockKey> keys);

  using Runtime::Lookup;
  using Runtime::LookupAndPin;
  using Runtime::Save;
  Completion Save(NamespaceId ns, std::optional<BlockKey> parent, std::span<const BlockKey> keys,
                  std::span<const uint32_t> engine_blocks, const SaveOptions& options) override;
  Result<LookupResult> Lookup(NamespaceId ns, std::span<const BlockKey> keys,
                              const LookupOptions& options) override;
  Result<PinnedPrefix> LookupAndPin(NamespaceId ns, std::span<const BlockKey> keys,
                                    const LookupOptions& options) override;
  void RequestFinished(NamespaceId ns, std::span<const BlockKey> keys,
                       uint32_t output_tokens) override;
  Completion Load(NamespaceId ns, std::span<const BlockKey> keys,
                  std::span<const uint32_t> engine_blocks, std::chrono::nanoseconds timeout,
                  LayerDone on_layer) override;
  // Remove, answering ResourceExhausted when memory runs out (RemoveBlocks
  // then throws, leaving what it did not remove as it was).
  Status Remove(NamespaceId ns, std::span<const BlockKey> keys) override;
  Status RemoveBlocks(NamespaceId ns, std::span<const BlockKey> keys);
  // runtime_state.cc
  Completion SaveState(NamespaceId ns, const BlockKey& boundary,
                       std::span<const uint32_t> engine_blocks,
                       const SaveOptions& options) override;
  Completion LoadState(NamespaceId ns, const BlockKey& boundary,
                       std::span<const uint32_t> engine_blocks,
                       std::chrono::nanoseconds timeout) override;
  // runtime_engine_usage.cc
  Status ReportEngineUsage(uint32_t free_blocks, uint32_t total_blocks) override;
  Status TrackRequest(uint64_t request_id, NamespaceId ns, std::span<const BlockKey> keys,
                      uint32_t engine_blocks) override;
  void UntrackRequest(uint64_t request_id) override;
  bool ShouldAdmitNewRequest(uint32_t blocks_needed) override;
  std::vector<PreemptionVictim> ProposePreemption(uint32_t blocks_to_free) override;
  bool IsSaved(NamespaceId ns, std::span<const BlockKey> keys) override;
  RuntimeStats Stats() const override;
  void Shutdown() override;
  Result<size_t> TEST_RunMoverOnce() override;
  // Tests only: runs in ProposePreemption after each running request's
  // saved prefix is read, with mu_ released and usage_mu_ held. Set before
  // the first ProposePreemption.
  void TEST_SetAfterSavedPrefix(std::function<void()> hook) {
    after_saved_prefix_ = std::move(hook);
  }
  // Tests only: runs in EnsureHubRoom after an eviction freed nothing, with
  // mu_ released. Set before the first load.
  void TEST_SetAfterHubRoomTry(std::function<void()> hook) {
    after_hub_room_try_ = std::move(hook);
  }
  // Tests only: runs in each Save after its admission, with mu_ released.
  // Set while no save is being admitted.
  void TEST_SetAfterSaveAdmission(std::function<void()> hook) {
    after_save_admission_ = std::move(hook);
  }
  // Tests only: runs in each Save once its engine blocks are marked as being
  // saved, before it checks that no load is filling them. Set while no save runs.
  void TEST_SetAfterSaveMarked(std::function<void()> hook) { after_save_marked_ = std::move(hook); }
  // Starts the admin endpoint when options.admin_socket is set (admin_runtime.cc).
  Status StartAdmin();

 protected:
  void Unpin(NamespaceId ns, std::span<const BlockKey> keys) override;

 private:
  struct SaveJob;
  struct LoadJob;
  // Runtime-side counters per tier, guarded by mu_. corruptions: those the
  // runtime finds itself (byte count or checksum of an OK read); the tier
  // counts the Corruption results it reports (Stats() adds both).
  struct TierCount {
    uint64_t hit_blocks = 0, evicted = 0, demoted = 0, rejected = 0, corruptions = 0, forced = 0;
    uint64_t hub_bytes_in = 0, hub_bytes_out = 0, hub_blocks_in = 0;
    uint64_t hub_bytes_demoted = 0;  // read out of the hub to be written down
  };

  Status CheckBlocks(std::span<const BlockKey> keys, std::span<const uint32_t> blocks) const;
  // InvalidArgument naming the first of `blocks` a load is still writing.
  Status CheckNotLoading(std::span<const uint32_t> blocks) const;
  // Queues `job`, a save or load (`op`) of `items` blocks; refused (shut
  // down, queue full) every item fails and is counted as Refuse counts.
  // The job gets the time it was queued (NowNs), for its latency.
  // `on_done` runs once the request is answered, however it ends: queued,
  // refused or out of memory; Submit never throws.
  Completion Submit(RuntimeMetrics::Op op, size_t items,
                    std::function<void(CompletionSource&, uint64_t start_ns)> job,
                    std::function<void()> on_done = {}) noexcept;
  // A call that fails before it is queued (bad arguments): every item ends
  // `status`, counted in the statistics as the failures the engine is told.
  Completion Refuse(RuntimeMetrics::Op op, size_t items, const Status& status);
  // A call that could not be built for lack of memory: Refuse with
  // ResourceExhausted, or, when even that answer cannot be allocated, a
  // completion of no items that answers every index ResourceExhausted.
  Completion OutOfMemory(RuntimeMetrics::Op op, size_t items) noexcept;
  // Runs `call`, the body of a public save or load: what it throws (memory
  // running out while the request is built) answers every item
  // OutOfMemory instead of reaching the engine.
  template <typename Call>
  Completion Guarded(RuntimeMetrics::Op op, size_t items, const Call& call) noexcept {
    try {
      return call();
    } catch (...) {
      return OutOfMemory(op, items);
    }
  }
  void CountRefusedLocked(RuntimeMetrics::Op op, size_t items, StatusCode code);
  // A queued job threw (a bug): its unanswered items end Internal(why), and
  // the request is recorded and counted as one that ran.
  void FailThrownJob(RuntimeMetrics::Op op, CompletionSource& src, const Status& why,
                     uint64_t start_ns) noexcept;
  // Queues RunSave of `keys` from `blocks` (`checkpoint`: the parts of
  // `parent`'s state checkpoint), timed as a save.
  Completion SubmitSave(NamespaceId ns, std::optional<BlockKey> parent, std::vector<BlockKey> keys,
                        std::vector<uint32_t> blocks, const SaveOptions& options, bool checkpoint);
  uint64_t NowNs() const { return clock_->NowNanos(); }
  size_t tier_count() const { return 1 + lower_.size(); }

  // runtime_save.cc / runtime_load.cc: the jobs, on worker threads.
  // `checkpoint`: the keys are the parts of the state checkpoint of
  // `parent` (SaveState), not KV blocks.
  void RunSave(NamespaceId ns, std::optional<BlockKey> parent, const std::vector<BlockKey>& keys,
               const std::vector<uint32_t>& blocks, const SaveOptions& hints, bool checkpoint,
               CompletionSource& done);
  // Inside a catch handler: the exception being handled as a Status,
  // prefixed by `what` (ResourceExhausted for bad_alloc, else Internal).
  static Status LookupFailure(std::string_view what);
  // The hub's answer about one key of a save (AdmittedPrefixLocked).
  enum class Decision : uint8_t { kUndecided, kAdmitted, kRefused };
  // How many leading keys the hub admits: asks the hub's admission about each
  // key not yet stored, in order, up to the first refusal. Sets *missing to
  // the number of admitted keys not stored yet, from the same lookups, and
  // holds the parent and every key with a copy (a pin and a save hold, see
  // IndexEntry::save_holds), appending them to *held (the caller releases
  // both). `decided` (one per key, kUndecided at first) keeps each answer:
  // a save that asks again after waiting for another's fill reuses it, so
  // that the policies and the admission counts see each key once. Sets
  // *parent_blocked when `parent` has no copy or is unsettled: nothing is
  // admitted or asked about then.
  // REQUIRES: mu_ held.
  size_t AdmittedPrefixLocked(NamespaceId ns, std::optional<BlockKey> parent,
                              const std::vector<BlockKey>& keys, const SaveOptions& hints,
                              bool checkpoint, size_t* missing, std::vector<IndexEntry*>* held,
                              std::vector<Decision>* decided, bool* parent_blocked);
  // Indexes keys[0, admitted) that are new as kFilling entries with hub slots
  // (fresh / fresh_item), lists the later items repeating one of them
  // (repeats: item, index in fresh), and settles every other item.
  // `parent_blocked`: admission stopped at the parent (AdmittedPrefixLocked).
  // REQUIRES: mu_ held.
  void ReserveSaveLocked(NamespaceId ns, std::optional<BlockKey> parent, bool parent_blocked,
                         const std::vector<BlockKey>& keys, size_t admitted,
                         const SaveOptions& hints, bool checkpoint, CompletionSource& done,
                         std::vector<IndexEntry*>& fresh, std::vector<size_t>& fresh_item,
                         std::vector<std::pair<size_t, size_t>>& repeats);
  // Publishes the reserved entries whose bytes were copied (copied[j] for
  // fresh[j], rewritten with what each ends as) and undoes the others; a
  // repeat ends as its first occurrence. Never throws: memory running out
  // fails a block rather than leave it reserved. REQUIRES: mu_ held.
  void FinishSaveLocked(const std::vector<IndexEntry*>& fresh,
                        const std::vector<size_t>& fresh_item,
                        const std::vector<std::pair<size_t, size_t>>& repeats,
                        std::span<Status> copied, CompletionSource& done) noexcept;
  // Answers a lookup into `r` (empty on entry), appending the hit entries to
  // *found when given, and counts it; unless it repeats a request id seen
  // before, also the sightings of its keys and the policies' view of the
  // request with its hints. Takes no pin. Returns true when an α tuning has
  // become due (the caller wakes the mover once it has dropped mu_).
  // REQUIRES: mu_ held.
  bool LookupLocked(NamespaceId ns, std::span<const BlockKey> keys, const LookupOptions& hints,
                    LookupResult& r, std::vector<IndexEntry*>* found);
  void RunLoad(NamespaceId ns, const std::vector<BlockKey>& keys,
               const std::vector<uint32_t>& blocks, std::chrono::steady_clock::time_point deadline,
               const LayerDone& on_layer, CompletionSource& done);
  // Reads blocks held only below the hub into fresh hub slots. A slot left
  // in staged_slot[i] is never one a read may still land in: a late read is
  // handed its slots, which are cleared here (HandOverLateRead).
  void StageFromLowerTiers(NamespaceId ns, std::vector<IndexEntry*>& entries,
                           std::vector<uint32_t>& staged_slot,
                           std::chrono::steady_clock::time_point deadline,
                           std::vector<Status>& results);
  // One tier read of `items` (at most the tier's batch limit) into their
  // staged slots; installs what arrives in time.
  void ReadBatch(NamespaceId ns, uint32_t tier, std::vector<IndexEntry*>& entries,
                 const std::vector<size_t>& items, std::vector<uint32_t>& staged,
                 std::chrono::steady_clock::time_point deadline, std::vector<Status>& results);
  // Hands a read that missed the load's deadline its staged slots, freed
  // when it ends, and fails its items DeadlineExceeded; false, with nothing
  // handed over, when memory runs out first.
  bool HandOverLateRead(const Tier& t, const Completion& c, const std::vector<size_t>& items,
                        std::vector<uint32_t>& staged, std::vector<Status>& results) noexcept;
  // Checks what one tier's read returned and moves good blocks into the hub;
  // corrupt keys are appended to `corrupt`. REQUIRES: mu_ held.
  void InstallStagedLocked(uint32_t tier, std::vector<IndexEntry*>& entries,
                           const std::vector<size_t>& items, const Completion& c,
                           std::vector<uint32_t>& staged, std::vector<Status>& results,
                           std::vector<BlockKey>& corrupt);
  // Runs one Gather (save) or Scatter (load) and waits for it: the result
  // of copies[i] lands in results[i] (results.size() == copies.size()).
  // Never throws: an engine that throws, or memory running out before the
  // copy is issued, fails every copy Internal.
  void RunCopy(bool gather, std::span<const BlockCopy> copies, const LayerDone& on_layer,
               std::span<Status> results) noexcept;

  // runtime_adopt.cc: indexes the leading keys that persistent tiers hold;
  // keys[parts_from..] are the parts of a state checkpoint. A tier is
  // waited for until kAdoptWait from its first question.
  void AdoptStoredBlocks(NamespaceId ns, std::span<const BlockKey> keys,
                         size_t parts_from = SIZE_MAX);
  // How long one adoption waits for a tier's Contains answers (a local index
  // answers from memory, a shared tier after a round trip): a tier that
  // misbehaves, or a server slow or down, never holds a lookup long.
  static constexpr std::chrono::milliseconds kAdoptWait{50};

  // runtime_state.cc: hybrid state checkpoints (options_.state_blocks > 0).
  // The keys of the parts of the checkpoint of `boundary`, in order.
  std::vector<BlockKey> StateParts(NamespaceId ns, const BlockKey& boundary) const;
  // Whether every part of the checkpoint of `boundary` is stored; if so,
  // appends their entries to *parts when given. REQUIRES: mu_ held.
  bool StateStoredLocked(const IndexEntry& boundary, std::vector<IndexEntry*>* parts);
  // Appends to `hit` the entries of the leading keys stored, cut (with
  // state_blocks > 0) to the deepest whose checkpoint is stored: where a
  // request would resume. Appends that checkpoint's parts to *parts when
  // given. Returns how many leading keys were stored before the cut.
  // REQUIRES: mu_ held; `hit` empty.
  size_t ResumablePrefixLocked(NamespaceId ns, std::span<const BlockKey> keys,
                               std::vector<IndexEntry*>& hit, std::vector<IndexEntry*>* parts);
  // The size of ResumablePrefixLocked's `hit`. REQUIRES: mu_ held.
  uint32_t SavedPrefixLocked(NamespaceId ns, std::span<const BlockKey> keys);
  // Before a lookup: asks the lower tiers for the checkpoints of the leading
  // keys that were adopted from them (IndexEntry::state_unasked), deepest
  // first, each once, and adopts the first found. No I/O for keys this
  // process stored or asked about before.
  void AdoptState(NamespaceId ns, std::span<const BlockKey> keys);
  // Whether `e`, a part of a state checkpoint, is its last part.
  bool LastPart(const IndexEntry& e) const;
  // The state-checkpoint check of Submit's callers: InvalidArgument unless
  // checkpoints are on and `blocks` has one engine block per part.
  Status CheckStateBlocks(std::span<const uint32_t> blocks, const char* op) const;

  // mover.cc
  void MoverLoop();
  // At Shutdown, once no request or mover pass runs: writes the blocks only
  // the hub holds to tier 1, as MoverOptions::shutdown_writeback_ms says
  // (shutdown_writeback.cc). Catches what the tier or a policy throws.
  void WriteBackHub();
  size_t MoverPass();
  // MoverPass, with what it throws (a lower tier's Usage() or a policy with
  // a bug, or memory running out) as Internal.
  Result<size_t> TryMoverPass();
  // Runs the α tunings that are due (TierPolicies::TakeDueTunings): the
  // window is copied under mu_, replayed without it, and the chosen α set
  // under it again. Mover thread (or TEST_RunMoverOnce) only.
  void TuneAlphas();
  // Tier `tier`'s capacity in blocks, for α tuning.
  uint64_t CapacityBlocks(size_t tier) const;
  // Frees up to `blocks` blocks of `tier` by demoting or dropping its leaves,
  // one batch at a time; starts no batch once `deadline` has passed, and
  // waits for no tier call past it: a write still running then goes on
  // without the caller (its victims stay where they are, pinned, until it
  // ends: SettleLateWriteLocked), so a load or save is never held past its
  // deadline by a slow or hung tier. The mover passes no deadline.
  size_t EvictFromTier(size_t tier, size_t blocks, SteadyTime deadline = SteadyTime::max());
  // Picks up to `batch` victims of `tier` (policy order, leaves first) and
  // marks them moving. REQUIRES: mu_ held.
  std::vector<IndexEntry*> SelectVictimsLocked(size_t tier, size_t batch);
  size_t WritebackAndDrop(size_t tier, std::vector<IndexEntry*>& victims,
                          SteadyTime deadline = SteadyTime::max());
  // Buffers that lower-tier payloads are read into on their way down; shared
  // with a read or write that outlives its caller's deadline.
  using Staging = std::shared_ptr<std::vector<std::vector<std::byte>>>;
  // The write ops of victims[items] leaving `tier`, all of one namespace:
  // hub payloads in place, lower-tier payloads read into `staging` in one
  // batch. A block whose read fails, returns the wrong byte count, fails
  // its checksum or is not read by `deadline` is left out, with its Status
  // in read_status[victim]; op_item[k] is the victim index of ops[k].
  std::vector<WriteOp> StageWrites(size_t tier, const std::vector<IndexEntry*>& victims,
                                   const std::vector<size_t>& items, const Staging& staging,
                                   std::vector<size_t>& op_item, std::vector<Status>& read_status,
                                   SteadyTime deadline);
  // Writes the victims `write` selects into tier + 1; sets `written`, and
  // read_status for those whose copy in `tier` could not be read. With a
  // deadline (then `late` and `reclaimed` are given): nothing is written
  // once it has passed (read_status DeadlineExceeded: the copies stay), and
  // a write not done by then is left running, its victims marked `late`.
  void WriteToNext(size_t tier, const std::vector<IndexEntry*>& victims,
                   const std::vector<bool>& write, std::vector<bool>& written,
                   std::vector<Status>& read_status, SteadyTime deadline = SteadyTime::max(),
                   std::vector<bool>* late = nullptr, const std::vector<bool>* reclaimed = nullptr);
  // Hands a write into tier + 1 that missed its caller's deadline its
  // victims (those of op_item), settled when it ends (SettleLateWriteLocked),
  // and marks them late; false, with nothing handed over, when memory runs
  // out first.
  bool HandOverLateWrite(size_t tier, const Completion& w, const std::vector<WriteOp>& ops,
                         const std::vector<IndexEntry*>& victims,
                         const std::vector<size_t>& op_item, const std::vector<bool>& reclaimed,
                         const Staging& staging, uint64_t sent_ns,
                         std::vector<bool>& late) noexcept;
  // Settles the victims `moved` of a write into tier + 1 that ended after
  // its caller's deadline (completion `w`, op k for moved[k]): each stops
  // moving and, when written, is indexed below; its hub copy stays (backed,
  // so it is the next to leave). REQUIRES: mu_ held.
  void SettleLateWriteLocked(size_t tier, const std::vector<IndexEntry*>& moved,
                             const std::vector<std::optional<uint64_t>>& sent,
                             const std::vector<bool>& reclaimed, const Completion& w);
  // Whether the copy of `v` written to `tier` with checksum `sent` is still
  // the block's: a load may have taken another writer's bytes (and their
  // checksum) for it from a shared tier while it was written. One that is
  // not is listed for a Remove there (the mover retries it). REQUIRES: mu_.
  bool WrittenCopyIsCurrentLocked(const IndexEntry& v, size_t tier,
                                  const std::optional<uint64_t>& sent);
  // True when `c` has finished by `deadline` (waits at most until then).
  static bool FinishedBy(const Completion& c, SteadyTime deadline);
  // Which victims go to tier + 1: asks its admission about each one no deeper
  // tier holds; a refused one is written anyway (forced) when a child of it
  // stays stored and no other tier holds it. A victim whose key tier + 1 is
  // removing now is not written (and stays above when no other tier holds
  // it: keep[i]); one whose failed Remove there awaits a retry is, and the
  // retry is cancelled (reclaimed[i], restored if the write fails).
  // keep[i] also when victim i's expiring copies below are written again
  // (ExpiringCopiesLocked): it stays above unless that write succeeds.
  std::vector<bool> DecideAdmission(size_t tier, const std::vector<IndexEntry*>& victims,
                                    std::vector<bool>& reclaimed, std::vector<bool>& keep);
  // The tiers other than `tier` whose copy of `v` outlives the process's
  // end: at the shutdown writeback the hub's copy is none. REQUIRES: mu_.
  uint32_t OtherCopiesLocked(const IndexEntry& v, size_t tier) const {
    return v.locations & ~(1U << tier) & (hub_ending_ ? ~1U : ~0U);
  }
  // Pending removes (see pending_removes_). Lists `k` for lower tier `tier`,
  // counting one more running Remove of it when `running` (else it awaits a
  // retry); false when the tier's list is full (the key is then not
  // tracked). REQUIRES: mu_ held.
  bool QueueRemoveLocked(size_t tier, const NsKey& k, bool running);
  // Removes `keys` from lower tier `tier` and waits; keys whose Remove failed
  // stay queued for a retry, the others leave the list. Returns the first
  // failure (NotFound is none: the copy is gone). REQUIRES: each key was
  // queued as running, or the list was full.
  // `listed` false: keys this caller could not list (out of memory); their
  // Remove leaves the list as it is (a mark there is another Remove's).
  Status RunRemoves(size_t tier, const std::vector<NsKey>& keys, bool listed = true);
  // One Remove call to lower tier `tier`: keys of one namespace, at most the
  // tier's batch limit.
  struct RemoveBatch {
    size_t tier;
    NamespaceId ns;
    std::vector<BlockKey> keys;
    bool listed = true;  // see RunRemoves
  };
  std::vector<RemoveBatch> SplitRemoves(size_t tier, const std::vector<NsKey>& keys,
                                        bool listed = true) const;
  // The first failure of a finished Remove of `b` (NotFound is none: the
  // copy is gone), naming the block and the tier; OK when there is none.
  Status RemoveFailure(const RemoveBatch& b, const Completion& c) const;
  // RunRemoves without the wait: the removes settle when they end (counted
  // in late_calls_ until then), for a caller with a deadline. Those memory
  // runs out for stay listed, for a mover pass to retry.
  void StartRemoves(size_t tier, const std::vector<NsKey>& keys, bool listed = true) noexcept;
  // Removes from `tier` the keys `listed` as running removes and those a
  // caller could not list (`unlisted`): waited for with `wait` (RunRemoves,
  // failures left to the mover), else started (StartRemoves).
  void SendRemoves(size_t tier, const std::vector<NsKey>& listed,
                   const std::vector<NsKey>& unlisted, bool wait);
  // Sends one Remove batch and has `settle_locked` (run with mu_ held) see
  // its completion when it ends, counted in late_calls_ until then. Throws
  // (out of memory) only when the batch was not sent.
  void IssueRemove(const RemoveBatch& b, std::function<void(const Completion&)> settle_locked);
  // A batch of keys listed as running removes from `tier` that was never
  // sent: listed again as awaiting a retry. REQUIRES: mu_ held.
  void AbandonRemovesLocked(size_t tier, NamespaceId ns, std::span<const BlockKey> keys);
  // Abandons the keys of `batches` from `next` on (all of `keys` when the
  // split into batches itself failed). REQUIRES: mu_ held.
  void AbandonUnsentLocked(size_t tier, const std::vector<NsKey>& keys,
                           const std::vector<RemoveBatch>& batches, size_t next);
  // Runtime::Remove's part below the hub: removes `keys` from every lower
  // tier at once and waits for them at most kRemoveWait; ends this remove
  // (removes_running_) when the last of them has settled, however late.
  // REQUIRES: removes_running_ counts this call; each key queued as running
  // in every lower tier.
  Status RemoveFromLowerTiers(const std::vector<NsKey>& keys);
  // Settles a finished Remove of `keys` from `tier`; `listed` false leaves
  // the list as it is (see RunRemoves). REQUIRES: mu_ held.
  void SettleRemovesLocked(size_t tier, NamespaceId ns, std::span<const BlockKey> keys,
                           const Completion& c, bool listed = true);
  // Retries every failed Remove (start of each mover pass).
  void RetryPendingRemoves();
  // Frees `blocks` blocks of room in lower tier `tier` (>= 1), if it lacks it.
  void MakeRoomBelow(size_t tier, size_t blocks, SteadyTime deadline);
  // Drops tier `tier`'s copy, erasing the entry when no copy is left.
  // REQUIRES: mu_ held; returns the lower-tier key to remove, if any.
  void DropCopyLocked(IndexEntry* e, size_t tier, std::vector<NsKey>* lower_removals);
  // Erases `e` once nothing holds it any more: no copy, pin, child or fill
  // (a load that found its last copy lost kept it for its pin's sake).
  // REQUIRES: mu_ held.
  void EraseIfUnheldLocked(IndexEntry* e);
  // Lets go of one pin on `e` (a load's, a lookup's), erasing it if that
  // was its last hold. REQUIRES: mu_ held.
  void DropPinLocked(IndexEntry* e) {
    --e->pins;
    if (e->pins == 0 && e->In(0)) NoteHubRoomLocked();
    EraseIfUnheldLocked(e);
  }
  // A hub block may have become one an eviction can take (its last pin
  // ended): wakes the loads waiting for hub room. REQUIRES: mu_ held.
  void NoteHubRoomLocked() {
    ++hub_pins_ended_;
    if (hub_room_waiters_ != 0) moves_done_.notify_all();
  }
  // Counts a failed move of `v` below (its write, or its read with an I/O
  // error); true once kMoveFailuresToGiveUp have failed in a row
  // (WritebackAndDrop then lets it go).
  static bool MoveFailedTooOften(IndexEntry* v) {
    if (v->failed_moves < kMoveFailuresToGiveUp) ++v->failed_moves;
    return v->failed_moves >= kMoveFailuresToGiveUp;
  }
  static constexpr uint8_t kMoveFailuresToGiveUp = 3;
  // How long demotions skip a tier whose last write timed out.
  static constexpr uint64_t kWriteStallNs = 1'000'000'000;
  // Indexes the copy of `v` just written from `tier` into tier + 1 and
  // counts the move; returns its bytes. REQUIRES: mu_ held.
  uint64_t IndexDemotedLocked(IndexEntry* v, size_t tier, uint64_t now_ns) {
    v->failed_moves = 0;
    index_.AddLocation(v, tier + 1, now_ns);
    TouchExpiringLocked(v, tier + 1, now_ns);
    ++tier_counts_[tier].demoted;
    if (tier == 0) tier_counts_[0].hub_bytes_demoted += v->bytes;
    metrics_.AddMove(tier, tier + 1, 1, v->bytes);
    return v->bytes;
  }
  // Lower tier `tier` is shared with other processes, which may save a key
  // again with other bytes, and checks each block against its own header.
  bool SharedTier(size_t tier) const { return (shared_tiers_ >> tier) & 1U; }
  // Notes that `e`'s copy in `tier` was just written or read, which restarts
  // its expiry there. REQUIRES: mu_ held.
  void TouchExpiringLocked(IndexEntry* e, size_t tier, uint64_t now_ns) {
    if ((expiring_tiers_ >> tier) & 1U) e->expiring_touch_ns = now_ns;
  }
  // True when only tiers with an expiry hold `v` in tiers `from` and below,
  // and half that expiry has passed since its copy there was last written or
  // read: it may be gone already (hits from the hub never touch it), so the
  // block is written again before it leaves the tier above.
  // REQUIRES: mu_ held.
  bool ExpiringCopiesLocked(const IndexEntry& v, size_t from, uint64_t now_ns) const;
  // A victim an eviction pass is done with: unpinned, no longer moving.
  // REQUIRES: mu_ held.
  void EndMoveLocked(IndexEntry* v) {
    --v->pins;
    v->moving = false;
    --moving_blocks_;
  }
  // Notes how a demotion write `c` to `tier`, sent at `sent_ns`, ended: one
  // that timed out (DeadlineExceeded, or any failure after kWriteStallNs)
  // stalls writes to the tier for kWriteStallNs, an answer ends the stall.
  // Returns a warning to log (outside mu_) when items failed: the first
  // failure at once, then at most one a minute per tier, counting the
  // blocks that failed in between. REQUIRES: mu_ held.
  std::optional<std::string> NoteWriteEndedLocked(size_t tier, const Completion& c,
                                                  uint64_t sent_ns);
  void LogWarning(const std::optional<std::string>& line) const {
    if (line && log_) log_->Log(LogLevel::kWarning, *line);
  }
  bool WritesStalledLocked(size_t tier) const { return NowNs() < writes_stalled_until_ns_[tier]; }
  // Ends one tier call counted in late_calls_: its callback's last use of
  // this runtime. Under mu_, so Shutdown() cannot return before the callback
  // has let go of it. REQUIRES: mu_ held.
  void EndLateCallLocked() {
    if (--late_calls_ == 0) late_calls_done_.notify_all();
  }
  // Counts the tier call `c` in late_calls_ and has `fn`, which must end
  // with EndLateCallLocked, run when it ends. A completion keeps room for
  // the runtime's callback, even while it runs its own; should registering
  // still throw, `fn` never runs and the count is undone here.
  void AddLateCallback(const Completion& c, std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      ++late_calls_;
    }
    try {
      c.OnDone(std::move(fn));
    } catch (...) {
      std::lock_guard lock(mu_);
      EndLateCallLocked();
      throw;
    }
  }
  // Wakes what waits for a pass's victims to settle: evictions waiting for
  // slots (moves_done_) and saves of a victim whose copy was found lost
  // (fills_done_). Under mu_, so a waiter cannot miss it between its check
  // and its wait.
  void NotifyMovesSettledLocked() {
    moves_done_.notify_all();
    fills_done_.notify_all();
  }
  // The most blocks one call to lower tier `t` may carry; calls are split to it.
  static size_t BatchLimit(const Tier& t) {
    return std::max<size_t>(1, t.capabilities().max_batch_blocks);
  }
  bool HubAboveHigh() const;
  size_t HubFreeSlots() const { return arena_->slot_count() - arena_->used_slots(); }
  // Frees hub slots until `slots` are free, waiting (until `deadline`) for
  // blocks another thread is already moving out when nothing else can go.
  // With `own` (a load's entries), also waits, for at most kHubRoomWait,
  // while blocks not in `own` are pinned by others (OthersPinHubLocked).
  void EnsureHubRoom(size_t slots, SteadyTime deadline,
                     const std::vector<IndexEntry*>* own = nullptr);
  // True when a hub block outside `own`'s family (its keys, the chain above
  // them, what hangs below them) is pinned by a lookup's handle or another
  // call (not a save's hold, not an eviction's). REQUIRES: mu_ held.
  bool OthersPinHubLocked(const std::vector<IndexEntry*>& own) const;
  static constexpr std::chrono::seconds kHubRoomWait{1};
  static constexpr std::chrono::milliseconds kHubRoomRecheck{20};
  void WakeMover();

  const RuntimeOptions options_;
  const std::shared_ptr<CopyEngine> engine_;
  const std::shared_ptr<Clock> clock_;
  const std::shared_ptr<LogSink> log_;
  // Declared in teardown order's reverse: threads stop first, then the tiers
  // drain, then the arena is unmapped.
  std::unique_ptr<HostArena> arena_;
  std::vector<std::unique_ptr<Tier>> lower_;  // tiers 1..n

  mutable std::mutex mu_;
  BlockIndex index_;                        // guarded by mu_
  std::unique_ptr<TierPolicies> policies_;  // guarded by mu_; observes index_
  RecentRequests looked_up_{65536};         // guarded by mu_: LookupOptions::request_id
  std::vector<TierCount> tier_counts_;      // guarded by mu_
  RuntimeStats stats_;                      // guarded by mu_ (tiers left empty)
  // Guarded by mu_: tier calls whose completion callback still uses this
  // runtime (reads and demotion writes past their deadline, removes started
  // by a load or an eviction that does not wait for them).
  uint64_t late_calls_ = 0;
  uint64_t moving_blocks_ = 0;               // guarded by mu_: selected by an eviction pass
  // Guarded by mu_: per tier, until when demotions do not write to it
  // (NowNs; UINT64_MAX while a write to it runs past its caller's deadline;
  // NoteWriteEndedLocked sets it when one ends).
  // A tier that stopped answering would otherwise hold every victim written
  // to it, and so the room every save needs, for its whole time out.
  std::array<uint64_t, kMaxTiers> writes_stalled_until_ns_{};
  // Guarded by mu_: per tier, when a failed demotion write was last logged
  // (0: never) and the blocks that failed since (NoteWriteEndedLocked).
  std::array<uint64_t, kMaxTiers> write_failure_logged_ns_{};
  std::array<uint64_t, kMaxTiers> write_failures_unlogged_{};
  uint32_t expiring_tiers_ = 0;              // bit t: tier t's copies expire (set at construction)
  uint32_t shared_tiers_ = 0;                // bit t: SharedTier(t) (set at construction)
  uint64_t refresh_after_ns_ = 0;            // half the shortest of those expiries
  // Guarded by mu_: set by the shutdown writeback, from when the hub's copies
  // are about to end with the process, so that none counts as a copy.
  bool hub_ending_ = false;
  std::condition_variable moves_done_;       // signalled when moving blocks are settled
  uint32_t hub_room_waiters_ = 0;            // guarded by mu_: calls in EnsureHubRoom's wait
  uint64_t hub_pins_ended_ = 0;              // guarded by mu_: hub blocks whose last pin ended
  // Guarded by mu_: hub slots that saves are filling (reserved by
  // ReserveSaveLocked, settled by FinishSaveLocked). A load waits for them
  // as for pins: each becomes a block it may take, or a free slot, within
  // one engine copy.
  uint64_t filling_slots_ = 0;
  bool pin_waiter_taken_ = false;            // guarded by mu_: a load waits for pins (one only)
  std::condition_variable late_calls_done_;  // signalled when late_calls_ drops to 0
  // Signalled (with mu_) when a save's reserved entries are settled, and
  // when the mover settles its victims, for saves waiting on another's fill
  // of their keys or on a move of a key that lost its copy (RunSave).
  std::condition_variable fills_done_;

  // Per lower tier (index 0 unused), keys the index no longer names there
  // whose Remove has not succeeded yet. A failed Remove stays listed and is
  // retried at the start of each mover pass; a listed key leaves once no
  // Remove of it runs and one has succeeded (or found it gone), or when it
  // is written to that tier again (which replaces the copy). A key is never
  // written to a tier while a Remove of it runs there: that Remove, landing
  // late, would delete the new copy; so two Removes of one key at once keep
  // it listed until both have landed. Bounded by kMaxPendingRemoves per tier
  // (past that a failed Remove leaks its copy's room). Guarded by mu_.
  struct PendingRemove {
    uint32_t running = 0;  // Removes of the key in flight now
    bool gone = false;     // one of them succeeded or found it gone
  };
  static constexpr size_t kMaxPendingRemoves = 1 << 16;
  std::vector<std::unordered_map<NsKey, PendingRemove, NsKeyHash>> pending_removes_;

  // Removes that reach the lower tiers: running now, and ended so far. An
  // adoption that overlapped one is dropped (runtime_adopt.cc). Guarded by mu_.
  uint32_t removes_running_ = 0;
  uint64_t removes_ended_ = 0;
  std::shared_ptr<LostCopiesRelay> relay_;  // pointed at this runtime until Shutdown
  // Per engine block: saves from it not yet completed. A load into such a
  // block is refused: it would overtake the save (loads are served ahead of
  // queued saves) and store the loaded bytes under the saved key. Shared
  // with the saves' done callbacks, which may outlive the runtime.
  std::shared_ptr<std::atomic<uint32_t>[]> blocks_saving_;
  // Per engine block: loads into it not yet completed. Another load into
  // it, or a save from it, is refused: the copies would interleave.
  std::shared_ptr<std::atomic<uint32_t>[]> blocks_loading_;
  // Built at Open: the answer to a call when memory is too short to build
  // even its refusal (OutOfMemory).
  Completion out_of_memory_;
  // Removes from lower tiers that landed while an adoption was asking them
  // (the mover's evictions, whose keys left the index first): key -> tiers.
  // A tier may have reported such a key as held just before it went, so an
  // adoption leaves it out of that tier. Cleared once no adoption runs; past
  // kMaxRemovedDuringAdoption it is cleared and adopt_epoch_ moves on, which
  // drops the adoptions running then. Guarded by mu_.
  static constexpr size_t kMaxRemovedDuringAdoption = 1 << 16;
  uint32_t adoptions_running_ = 0;
  uint64_t adopt_epoch_ = 0;
  std::unordered_map<NsKey, uint32_t, NsKeyHash> removed_during_adoption_;
  std::condition_variable removes_done_;  // signalled as a Remove's tier calls settle

  std::mutex mover_mu_;
  std::condition_variable mover_cv_;
  bool mover_stop_ = false;  // guarded by mover_mu_
  bool mover_kick_ = false;  // guarded by mover_mu_
  std::thread mover_thread_;

  // The engine's GPU pool and running requests (runtime_engine_usage.cc).
  // usage_mu_ is taken before mu_, never while holding it.
  struct TrackedRequest {
    NamespaceId ns;
    std::vector<BlockKey> keys;
    uint32_t engine_blocks = 0;
  };
  std::mutex usage_mu_;
  GpuWatermark gpu_{options_.gpu_watermark, 1.0};         // guarded by usage_mu_
  std::unordered_map<uint64_t, TrackedRequest> tracked_;  // guarded by usage_mu_
  uint32_t engine_free_ = 0, engine_total_ = 0;           // guarded by usage_mu_
  std::function<void()> after_saved_prefix_;              // tests only
  std::function<void()> after_hub_room_try_;              // tests only
  std::function<void()> after_save_admission_;            // tests only
  std::function<void()> after_save_marked_;               // tests only

  // Some lower tier is asked on a lookup miss (AdoptStoredBlocks): it
  // answers Contains from memory, or other processes write to it.
  bool has_adoptable_tier_ = false;
  // Per tier: a shared tier without a local index whose reads check each
  // block, and which its options do not mark private (TierOptions::shared):
  // a lookup miss asks it, backs off from it, and claims in it.
  std::vector<bool> adopt_shared_;
  // Per tier: the NowNs() before which a shared tier whose last Contains
  // failed or was late is not asked again (a lookup must not wait on a
  // server that is down at every miss); 0 while it answers. Read and set
  // without mu_.
  std::unique_ptr<std::atomic<uint64_t>[]> adopt_skip_until_;
  std::atomic<bool> shut_down_{false};
  std::once_flag shutdown_once_;
  std::unique_ptr<WorkerPool> workers_;
  RuntimeMetrics metrics_;              // atomics: recorded without mu_
  std::unique_ptr<AdminServer> admin_;  // stopped first by Shutdown()
};

}  // namespace kvtier::internal
