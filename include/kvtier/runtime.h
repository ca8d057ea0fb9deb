// Runtime: the object a serving engine owns. It indexes saved blocks, stages
// them in the host hub, demotes them to lower tiers, and loads them back into
// the engine's KV cache through a CopyEngine.
//
// Every engine-facing call returns at once: Save and Load hand back a
// Completion; Lookup reads the index, and on a miss asks the lower tiers
// that answer from memory or are shared with other engines (a Redis or
// kvtier-memd round trip) for blocks it does not know, waiting at most
// 50 ms on each. Keys passed to one call form a
// prefix chain: keys[i] extends keys[i-1] (and keys[0] extends `parent`).
// Thread-safe: any thread may call any method.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/completion.h"
#include "kvtier/copy_engine.h"
#include "kvtier/export.h"
#include "kvtier/metrics.h"
#include "kvtier/options.h"
#include "kvtier/status.h"

namespace kvtier {

struct TierStats {
  std::string name;
  std::string type;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t blocks = 0;
  // Blocks a restart found stored that no lookup has adopted yet (NVMe):
  // not in used_bytes or blocks until then (TierUsage).
  uint64_t unclaimed_blocks = 0;
  uint64_t unclaimed_bytes = 0;
  uint64_t hit_blocks = 0;     // blocks a Load served from this tier
  uint64_t bytes_read = 0;     // bytes read out of this tier
  uint64_t bytes_written = 0;  // bytes written into this tier
  uint64_t blocks_written = 0;
  uint64_t evicted_blocks = 0;   // dropped from this tier by the mover
  uint64_t demoted_blocks = 0;   // copied from this tier to the next one
  // Blocks the mover chose to take out of this tier but had to keep: in use,
  // or with no copy in another tier while a child hangs off them (or a save
  // is about to hang one). Admission refusals are admission_rejected_blocks.
  // A parent whose write to the next tier failed three times in a row is
  // not kept for its children: it is evicted, its children below waiting
  // for the engine's next save of it.
  uint64_t rejected_blocks = 0;
  uint64_t errors = 0;           // failed reads or writes (not misses)
  uint64_t corruptions = 0;      // header or checksum mismatches
  // Blocks this tier's admission policies accepted / refused. For the hub,
  // saves are counted only when its admission is more than `always` alone.
  uint64_t admitted_blocks = 0;
  uint64_t admission_rejected_blocks = 0;
  // Of the refused blocks, those written all the same: a child of theirs is
  // stored at or below this tier, and dropping them would cut its chain.
  uint64_t forced_blocks = 0;
  // flop_aware eviction only: the α in use (the configured flop_alpha until
  // the mover's first tuning), and how many tunings ran. -1 and 0 for a tier
  // with another eviction policy.
  double flop_alpha = -1;
  uint64_t alpha_tunings = 0;
};

// Blocks and bytes copied along one path. Endpoints are tier names, or "gpu"
// for the engine's KV cache.
struct MoveStats {
  std::string from;
  std::string to;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
};

// Per-block failures of one operation ("save" or "load") with one code.
struct ErrorStats {
  std::string op;
  StatusCode code = StatusCode::kInternal;
  uint64_t blocks = 0;
};

// A latency distribution over fixed buckets: bucket_counts[i] counts the
// requests that took at most upper_bounds_s[i] and more than the bound before
// it; the last element (bucket_counts has one more) counts the slower rest.
struct LatencyStats {
  std::vector<double> upper_bounds_s;
  std::vector<uint64_t> bucket_counts;
  uint64_t count = 0;
  double sum_s = 0;
};

struct RuntimeStats {
  uint64_t lookups = 0;
  uint64_t lookup_blocks = 0;      // keys asked for
  uint64_t lookup_hit_blocks = 0;  // leading keys found
  // Hybrid models: leading keys stored but not answered, because no deeper
  // one than the answer has its state checkpoint (Runtime::SaveState).
  uint64_t lookup_state_cut_blocks = 0;
  uint64_t save_blocks = 0;        // keys asked to save
  uint64_t saved_blocks = 0;       // newly stored
  uint64_t save_duplicates = 0;    // already stored (or earlier in the same call): skipped
  uint64_t save_failures = 0;
  uint64_t save_not_admitted = 0;  // not stored: the hub's admission refused them or a parent
  uint64_t load_blocks = 0;
  uint64_t loaded_blocks = 0;
  uint64_t load_failures = 0;         // per-block failures reported to the engine
  uint64_t busy_rejections = 0;       // requests refused because the queue was full
  uint64_t adopted_blocks = 0;        // found in a lower tier the index did not know: a
                                      // persistent tier's after a restart, or a shared
                                      // tier's saved by another process
  std::vector<TierStats> tiers;       // in tier order; tiers[0] is the host hub
  uint32_t block_tokens = 0;          // RuntimeOptions::block_tokens (0: token counts unknown)
  uint64_t preemption_proposals = 0;  // requests proposed to the engine for preemption
  // gpu->host, host->gpu, then per lower tier: from the tier above, to host.
  std::vector<MoveStats> moves;
  std::vector<ErrorStats> errors;  // non-zero counts only, save before load, by code
  LatencyStats save_latency;       // Save call to completion
  LatencyStats load_latency;       // Load call to completion
};

struct LookupResult {
  size_t hit_blocks = 0;      // leading keys available
  std::vector<uint8_t> tier;  // for each hit, the fastest tier holding it
};

// A running request ProposePreemption suggests preempting. Before freeing
// its engine blocks the engine must save it and wait for that Save to
// complete OK; then the request resumes by Load instead of recomputing:
//
//   Save(v.ns, std::nullopt, v.keys, <engine blocks of v.keys>,
//        {.bypass_admission = true});
//
// (A hybrid model needs its state at the end of v.keys.back() saved too:
// Runtime::SaveState.)
//
// The whole chain, not only unsaved_keys: nothing keeps the saved prefix
// stored after the proposal (the mover or another save's room may drop its
// blocks, or a Remove), and the keys still stored are skipped without a
// copy, so this costs only lookups for them. The shorter
// Save(v.ns, v.parent, v.unsaved_keys, ...) copies the same blocks while
// `parent` is stored, but fails every key (InvalidArgument) once it is not.
// (The proposal holds nothing: a hold on the prefix would keep hub room for
// as long as the engine takes to act, or for good for a victim never saved.)
struct PreemptionVictim {
  uint64_t request_id = 0;
  NamespaceId ns;
  uint32_t blocks_freed = 0;           // engine blocks it frees (its engine_blocks)
  uint32_t saved_blocks = 0;           // leading keys stored in kvtier when proposed
  std::vector<BlockKey> keys;          // the whole chain, as last tracked: what to save
  std::optional<BlockKey> parent;      // keys[saved_blocks - 1], if saved_blocks > 0
  std::vector<BlockKey> unsaved_keys;  // keys[saved_blocks..]: not stored when proposed
};

// Optional hints with a Save, passed on to the admission policies (BlockMeta
// session_id and expected_reuse). marconi admission admits a saved block
// whose expected_reuse reaches marconi_continue_threshold, or whose
// session_id names a session that lookups (LookupOptions::session_id) have
// shown coming back: two of its requests seen.
struct SaveOptions {
  uint64_t session_id = 0;       // conversation or agent session; 0 = none
  float expected_reuse = -1.0f;  // chance the saved tail is used again, in [0, 1]; < 0 = none
  // Store the blocks whatever the hub's admission says: saves the engine
  // relies on, such as a preemption victim's (ProposePreemption).
  bool bypass_admission = false;
};

// Optional hints with a lookup, passed to every tier's admission policies
// with the request's chain (RequestHints; marconi admission keeps the new
// path of a request hinted to continue).
struct LookupOptions {
  uint64_t session_id = 0;       // conversation or agent session; 0 = none
  float expected_reuse = -1.0f;  // chance the request's tail is used again, in [0, 1]; < 0 = none
  // The engine's id of the request; 0 = none. A lookup of an id looked up
  // before (the last 65,536 ids are remembered) is answered as usual but is
  // not another sighting for the policies: a scheduler that asks about a
  // waiting request every step would otherwise make each of its blocks look
  // used again and again. Without an id every lookup is a sighting.
  uint64_t request_id = 0;
};

class Runtime;
namespace internal {
class RuntimeImpl;
}

// Keeps the leading blocks found by LookupAndPin from being evicted until it
// is destroyed. Move-only. Destroy it (or move from it) before the Runtime
// that made it: it unpins through that runtime.
class KVTIER_EXPORT PinnedPrefix {
 public:
  PinnedPrefix() = default;
  PinnedPrefix(PinnedPrefix&& other) noexcept;
  PinnedPrefix& operator=(PinnedPrefix&& other) noexcept;
  PinnedPrefix(const PinnedPrefix&) = delete;
  PinnedPrefix& operator=(const PinnedPrefix&) = delete;
  ~PinnedPrefix();

  size_t hit_blocks() const { return result_.hit_blocks; }
  const LookupResult& result() const { return result_; }

 private:
  friend class Runtime;
  friend class internal::RuntimeImpl;
  void Release();
  Runtime* runtime_ = nullptr;
  NamespaceId ns_;
  std::vector<BlockKey> keys_;
  LookupResult result_;
};

class KVTIER_EXPORT Runtime {
 public:
  // Validates options, builds the tiers and starts the worker and mover
  // threads. `engine` moves bytes to and from the engine's KV cache; its
  // layout's BlockBytes() must equal options.block_bytes.
  static Result<std::unique_ptr<Runtime>> Open(RuntimeOptions options,
                                               std::shared_ptr<CopyEngine> engine);
  virtual ~Runtime() = default;

  // Copies engine_blocks[i] into the hub as keys[i]. Keys already stored are
  // skipped (OK). A key (or `parent`) another Save is still copying, or one
  // whose last copy was found lost while the mover is moving it, is waited
  // for, for up to a second: a key that did not end up stored is copied
  // from engine_blocks[i]; one still unsettled after the wait fails
  // DeadlineExceeded, with the rest of the chain. A `parent` that is not
  // stored (never saved, removed, or its copy lost) fails every key
  // InvalidArgument. Per-block results;
  // ResourceExhausted when the hub has no room even after eviction; Busy
  // when the request queue is full.
  //
  // The copy happens on a worker after Save returns, and takes the blocks'
  // contents at that moment (with a GPU engine, after every kernel queued
  // on the compute stream until then). Keep engine_blocks allocated and
  // unwritten until the Completion has ended: a block freed and reused by
  // another request before that is stored, checksum and all, under keys[i].
  // A Load into such a block is refused meanwhile (InvalidArgument), since
  // loads are served ahead of queued saves.
  //
  // The hub's admission policies are asked about each new key in chain
  // order. A refused key is not stored, and neither is any key after it (its
  // parent would be absent): those end OK with 0 bytes, are counted in
  // RuntimeStats::save_not_admitted, and Lookup / IsSaved do not find them.
  // With the default `always` admission every key is admitted.
  virtual Completion Save(NamespaceId ns, std::optional<BlockKey> parent,
                          std::span<const BlockKey> keys, std::span<const uint32_t> engine_blocks,
                          const SaveOptions& options) = 0;
  // Save without hints.
  Completion Save(NamespaceId ns, std::optional<BlockKey> parent, std::span<const BlockKey> keys,
                  std::span<const uint32_t> engine_blocks) {
    return Save(ns, parent, keys, engine_blocks, SaveOptions{});
  }

  // How many leading keys are stored, and where. Stops at the first miss.
  // Every tier's admission policies see the chain (a request's sighting),
  // with the hints of `options`. Pass the request's chain from its first
  // block: the policies take a key's depth from its position (a suffix is
  // answered all the same, but its blocks' recompute cost is misjudged).
  // Running out of memory is ResourceExhausted, not an exception (unless
  // even the few bytes of that Status cannot be had).
  virtual Result<LookupResult> Lookup(NamespaceId ns, std::span<const BlockKey> keys,
                                      const LookupOptions& options) = 0;
  // Lookup without hints.
  Result<LookupResult> Lookup(NamespaceId ns, std::span<const BlockKey> keys) {
    return Lookup(ns, keys, LookupOptions{});
  }
  // Optional: the request whose lookup named `keys` has finished decoding,
  // with `output_tokens` generated tokens. The `reuse` admission and eviction
  // policies learn from it which requests' blocks are used again (an agent's
  // tool-call turn, with a short output, is usually continued by the next
  // turn); other policies ignore it. Call it when the request ends, before
  // its blocks leave the hub. A chain no lookup named is ignored.
  virtual void RequestFinished(NamespaceId ns, std::span<const BlockKey> keys,
                               uint32_t output_tokens) = 0;
  // As Lookup, and pins the hits until the returned handle is destroyed.
  virtual Result<PinnedPrefix> LookupAndPin(NamespaceId ns, std::span<const BlockKey> keys,
                                            const LookupOptions& options) = 0;
  // LookupAndPin without hints.
  Result<PinnedPrefix> LookupAndPin(NamespaceId ns, std::span<const BlockKey> keys) {
    return LookupAndPin(ns, keys, LookupOptions{});
  }

  // Copies keys[i] into engine_blocks[i], reading lower tiers into the hub
  // first. Each block ends OK, NotFound, DeadlineExceeded (not done within
  // `timeout`; nanoseconds::max() = no deadline) or another error; the
  // engine recomputes the failures. The
  // timeout bounds the waits for hub room and for reads from lower tiers.
  // Room that blocks of other keys pinned by other requests (LookupAndPin,
  // their loads) hold is waited for too, but at most a second: a block that
  // got no room by then fails ResourceExhausted when the deadline is later.
  // Pins on this load's own keys are not waited for. One exception to the
  // bound: making hub room may run a whole eviction batch on
  // the worker thread running the load (demotions, with the room they need
  // in the tiers below), which, once begun, finishes past the deadline.
  // The copy into engine pages, once issued, is waited for until the device
  // ends it, since a copy abandoned in flight could still land in pages the
  // engine has given to another request. Wait for the Completion before
  // reusing engine_blocks.
  // `on_layer(l)` runs when layer l of every block being copied has landed,
  // on the copy engine's completion thread or inline on the runtime's
  // worker: it must not block, wait on another Save or Load, or shut the
  // runtime down (nothing could then finish this Load). Blocks that failed
  // before the copy (a miss, a read error, the deadline) are not waited for
  // and their pages are not written: work started on `on_layer` for a
  // request must be discarded when the Completion reports one of its blocks
  // failed. An on_layer that throws is not called again for this load, and
  // the blocks copied end Internal ("on_layer failed: <what>"); the copy
  // itself runs to its end.
  virtual Completion Load(NamespaceId ns, std::span<const BlockKey> keys,
                          std::span<const uint32_t> engine_blocks, std::chrono::nanoseconds timeout,
                          LayerDone on_layer = {}) = 0;

  // Drops keys from every tier. Keys not stored are ignored. A key with
  // stored children is refused (InvalidArgument) unless they are removed in
  // the same call, so no stored block is left behind an absent parent.
  // Busy if a key is in use (pinned, being saved or moved). The keys leave
  // the index at once; an error names a lower tier that could not drop a
  // copy yet: the mover retries it, and no lookup finds the key meanwhile.
  // Waits at most 1 s for the lower tiers: one that has not answered by then
  // is named in a DeadlineExceeded, and its copies go when it answers.
  virtual Status Remove(NamespaceId ns, std::span<const BlockKey> keys) = 0;

  // ---- Hybrid models: state checkpoints -------------------------------------
  // A hybrid model (SSM or linear-attention layers beside attention) resumes
  // a prefix only from the recurrent state at its end. With
  // RuntimeOptions::state_blocks > 0 the engine saves that state as a
  // checkpoint of state_blocks engine blocks on a stored block (its
  // boundary), and a lookup answers only keys up to the deepest one whose
  // checkpoint is stored: a KV hit without its state is a miss at that depth
  // (counted in RuntimeStats::lookup_state_cut_blocks). A request found with
  // hit_blocks = d > 0 resumes by Load of keys[0, d) and LoadState of
  // keys[d - 1]. LookupAndPin pins that checkpoint too. Only a whole
  // checkpoint counts: one missing a part is no hit, and its other parts are
  // dropped rather than written down when they leave their tier. A
  // checkpoint leaves a tier before its boundary block does, and Remove of a
  // key removes its checkpoint with it. Blocks adopted from a lower tier
  // (after a restart, or saved by another process into a shared tier) have
  // their checkpoint asked for there once, by the first lookup that needs
  // it; blocks this process stored cost a lookup no I/O. A preempted
  // request resumes by load only if its state at the end of its last key
  // is saved too (SaveState with bypass_admission, once its Save has
  // completed); an engine whose live state is past that point (mid-decode)
  // must not save it there: the request then resumes by recompute.

  // Copies engine_blocks (state_blocks of them, laid out as any block of the
  // copy engine's layout), the state right after the last token of
  // `boundary`, into the hub as the checkpoint of `boundary`,
  // which must be stored (else every part fails InvalidArgument). One result
  // per part, as Save's: parts stored already are skipped; a checkpoint the
  // hub's admission refuses (asked once for the whole checkpoint; the
  // policies see BlockMeta::is_checkpoint with the boundary's id) ends OK
  // with 0 bytes and is not stored. Submit it once the Save that stores
  // `boundary` has completed: one still queued has not stored it yet.
  // InvalidArgument when state_blocks is 0 or engine_blocks has another size.
  virtual Completion SaveState(NamespaceId ns, const BlockKey& boundary,
                               std::span<const uint32_t> engine_blocks,
                               const SaveOptions& options) = 0;
  // Copies the checkpoint of `boundary` into engine_blocks (state_blocks of
  // them), as Load copies blocks: one result per part (NotFound when not
  // stored, DeadlineExceeded past `timeout`). The engine recomputes the
  // prefix when any part fails.
  virtual Completion LoadState(NamespaceId ns, const BlockKey& boundary,
                               std::span<const uint32_t> engine_blocks,
                               std::chrono::nanoseconds timeout) = 0;

  // ---- GPU pool usage, admission and preemption -----------------------------
  // The engine reports its KV pool: `free_blocks` of `total_blocks` are free.
  // InvalidArgument if total_blocks is 0 or free_blocks > total_blocks.
  virtual Status ReportEngineUsage(uint32_t free_blocks, uint32_t total_blocks) = 0;
  // Registers a running request: its keys (a prefix chain, full blocks only)
  // and the engine blocks it occupies (>= keys.size(): partial and decode
  // blocks count too). Tracking an id again replaces its entry, so a growing
  // request re-tracks itself. InvalidArgument if keys.size() > engine_blocks.
  virtual Status TrackRequest(uint64_t request_id, NamespaceId ns, std::span<const BlockKey> keys,
                              uint32_t engine_blocks) = 0;
  // Forgets a finished or preempted request; unknown ids are ignored.
  virtual void UntrackRequest(uint64_t request_id) = 0;
  // False when admitting a request needing `blocks_needed` blocks would leave
  // fewer than RuntimeOptions::gpu_watermark of the reported pool free (with
  // gpu_watermark 0: when the blocks do not fit). True before any report.
  virtual bool ShouldAdmitNewRequest(uint32_t blocks_needed) = 0;
  // Tracked requests to preempt, cheapest to restore first: fewest engine
  // blocks not already stored in kvtier (ties: more blocks freed, lower id).
  // Enough victims to free max(blocks_to_free, the blocks missing to get back
  // above the watermark), or every tracked request holding blocks if that is
  // not enough; empty when that target is 0. Counted in
  // RuntimeStats::preemption_proposals. The engine must save each victim's
  // chain (PreemptionVictim) and wait before freeing its blocks; IsSaved
  // checks it.
  virtual std::vector<PreemptionVictim> ProposePreemption(uint32_t blocks_to_free) = 0;
  // True when every key is stored in some tier (empty: true), and with
  // state_blocks > 0 the last key's state checkpoint too (what a resume
  // needs; ProposePreemption's saved_blocks counts the same way); false
  // once the runtime is shut down (it loads nothing then). Reads the index
  // only: no I/O, no lookup statistics.
  virtual bool IsSaved(NamespaceId ns, std::span<const BlockKey> keys) = 0;

  virtual RuntimeStats Stats() const = 0;
  // Emits a snapshot of Stats() as metric samples (metrics.h).
  void VisitMetrics(const MetricVisitor& visitor) const;

  // Stops accepting work, waits for queued and in-flight requests, stops the
  // threads and shuts the tiers down. Idempotent; the destructor calls it.
  virtual void Shutdown() = 0;

  // Runs one mover pass on the calling thread (tests with
  // mover.start_thread = false). Returns the number of blocks moved or dropped.
  virtual Result<size_t> TEST_RunMoverOnce() = 0;

 protected:
  friend class PinnedPrefix;
  virtual void Unpin(NamespaceId ns, std::span<const BlockKey> keys) = 0;
};

}  // namespace kvtier
