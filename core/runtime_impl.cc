#include "core/runtime_impl.h"

#include <algorithm>
#include <exception>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>

namespace kvtier {

using internal::EntryState;
using internal::IndexEntry;
using internal::NsKey;

// ---- PinnedPrefix ----------------------------------------------------------

PinnedPrefix::PinnedPrefix(PinnedPrefix&& other) noexcept
    : runtime_(std::exchange(other.runtime_, nullptr)),
      ns_(other.ns_),
      keys_(std::move(other.keys_)),
      result_(std::exchange(other.result_, LookupResult{})) {}

PinnedPrefix& PinnedPrefix::operator=(PinnedPrefix&& other) noexcept {
  if (this != &other) {
    Release();
    runtime_ = std::exchange(other.runtime_, nullptr);
    ns_ = other.ns_;
    keys_ = std::move(other.keys_);
    result_ = std::exchange(other.result_, LookupResult{});  // it holds no pin now
  }
  return *this;
}

PinnedPrefix::~PinnedPrefix() { Release(); }

void PinnedPrefix::Release() {
  if (runtime_ != nullptr && !keys_.empty()) runtime_->Unpin(ns_, keys_);
  runtime_ = nullptr;
  keys_.clear();
}

// ---- Open ------------------------------------------------------------------

Result<std::unique_ptr<Runtime>> Runtime::Open(RuntimeOptions options,
                                               std::shared_ptr<CopyEngine> engine) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  if (!engine) return Status::InvalidArgument("runtime: no copy engine");
  if (engine->layout().BlockBytes() != options.block_bytes) {
    return Status::InvalidArgument(
        "runtime: the copy engine's block is " + std::to_string(engine->layout().BlockBytes()) +
        " bytes but options.block_bytes is " + std::to_string(options.block_bytes));
  }
  // A checkpoint is saved from, and loaded into, state_blocks engine blocks
  // of their own, beside at least one holding KV.
  if (options.state_blocks > 0 && engine->layout().num_blocks <= options.state_blocks) {
    return Status::InvalidArgument(
        "runtime: state_blocks " + std::to_string(options.state_blocks) +
        " needs an engine pool of more blocks than that; the copy engine has " +
        std::to_string(engine->layout().num_blocks));
  }
  if (!options.clock) options.clock = SystemClock();
  if (!options.log) options.log = StderrLogSink();

  const TierOptions& hub = options.tiers[0];
  internal::HostArenaOptions arena_options{.capacity_bytes = hub.capacity_bytes,
                                           .slot_bytes = options.block_bytes,
                                           .hugepages = hub.hugepages,
                                           .mlock = hub.mlock};
  auto arena = internal::HostArena::Create(arena_options, options.log.get());
  if (!arena.ok()) return arena.status().WithContext("tier '" + hub.name + "'");
  // A device engine registers the arena for DMA; unregistered memory still
  // works, so a refusal is only logged.
  auto pin = engine->PinHostMemory((*arena)->Mapping());
  if (pin.ok()) {
    (*arena)->AdoptPin(std::move(pin).value());
  } else {
    options.log->Log(LogLevel::kWarning,
                     "host arena not registered with the copy engine: " + pin.status().ToString());
  }

  auto policies = internal::TierPolicies::Create(options);
  if (!policies.ok()) return policies.status();
  std::vector<std::unique_ptr<Tier>> lower;
  auto relay = std::make_shared<internal::LostCopiesRelay>();
  for (size_t i = 1; i < options.tiers.size(); ++i) {
    TierContext context;
    context.block_bytes = options.block_bytes;
    context.clock = options.clock;
    context.log = options.log;
    context.copies_lost = [relay, i](NamespaceId ns, std::span<const BlockKey> keys) {
      std::lock_guard lock(relay->mu);
      if (relay->runtime != nullptr) relay->runtime->ForgetLostCopies(i, ns, keys);
    };
    auto tier = options.tier_factory ? options.tier_factory(options.tiers[i], context)
                                     : CreateTier(options.tiers[i], context);
    if (!tier.ok() || *tier == nullptr) {
      for (auto& t : lower) t->Shutdown();
      if (!tier.ok()) return tier.status();
      return Status::InvalidArgument("tier '" + options.tiers[i].name +
                                     "': the tier factory returned no tier");
    }
    // The hub's slots are the buffers lower tiers read into and write from.
    (void)(*tier)->RegisterHostMemory((*arena)->Mapping());
    lower.push_back(std::move(tier).value());
  }
  auto impl = std::make_unique<internal::RuntimeImpl>(std::move(options), std::move(engine),
                                                      std::move(arena).value(), std::move(lower),
                                                      std::move(policies).value(), relay);
  KVTIER_RETURN_IF_ERROR(impl->StartAdmin());
  return std::unique_ptr<Runtime>(std::move(impl));
}

namespace internal {

RuntimeImpl::RuntimeImpl(RuntimeOptions options, std::shared_ptr<CopyEngine> engine,
                         std::unique_ptr<HostArena> arena, std::vector<std::unique_ptr<Tier>> lower,
                         std::unique_ptr<TierPolicies> policies,
                         std::shared_ptr<LostCopiesRelay> relay)
    : options_(std::move(options)),
      engine_(std::move(engine)),
      clock_(options_.clock),
      log_(options_.log),
      arena_(std::move(arena)),
      lower_(std::move(lower)),
      index_(1 + lower_.size()),
      policies_(std::move(policies)),
      tier_counts_(1 + lower_.size()),
      pending_removes_(1 + lower_.size()) {
  index_.set_observer(policies_.get());
  index_.set_deepest_only(policies_->deepest_only_tiers());
  adopt_shared_.assign(1 + lower_.size(), false);
  for (size_t t = 1; t < tier_count(); ++t) {
    const TierCapabilities& c = lower_[t - 1]->capabilities();
    if (c.shared && c.checksummed && options_.tiers[t].shared) shared_tiers_ |= 1U << t;
    adopt_shared_[t] = !c.local_index && SharedTier(t);
    if (c.expiry_ms != 0) {
      const uint64_t half_ns = c.expiry_ms * 500'000;
      refresh_after_ns_ = expiring_tiers_ == 0 ? half_ns : std::min(refresh_after_ns_, half_ns);
      expiring_tiers_ |= 1U << t;
    }
    has_adoptable_tier_ |= c.local_index || adopt_shared_[t];
  }
  adopt_skip_until_ = std::make_unique<std::atomic<uint64_t>[]>(1 + lower_.size());
  workers_ = std::make_unique<WorkerPool>(options_.worker_threads, options_.max_queued_requests,
                                          options_.log);
  relay_ = std::move(relay);
  blocks_saving_.reset(new std::atomic<uint32_t>[engine_->layout().num_blocks]());
  blocks_loading_.reset(new std::atomic<uint32_t>[engine_->layout().num_blocks]());
  out_of_memory_ = CompletionSource::Done(0, Status::ResourceExhausted("out of memory"));
  if (relay_) {
    std::lock_guard lock(relay_->mu);
    relay_->runtime = this;
  }
  // Last: anything above that throws (out of memory) must not leave a
  // joinable thread behind, which would end the process.
  if (options_.mover.start_thread) mover_thread_ = std::thread([this] { MoverLoop(); });
}

RuntimeImpl::~RuntimeImpl() { Shutdown(); }

void RuntimeImpl::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    shut_down_.store(true, std::memory_order_release);
    admin_.reset();        // its handler reads this runtime
    workers_->Shutdown();  // runs every queued request to its end
    {
      std::lock_guard lock(mover_mu_);
      mover_stop_ = true;
    }
    mover_cv_.notify_all();
    if (mover_thread_.joinable()) mover_thread_.join();
    WriteBackHub();
    for (auto& t : lower_) t->Shutdown();
    if (relay_) {
      std::lock_guard relay_lock(relay_->mu);
      relay_->runtime = nullptr;
    }
    std::unique_lock lock(mu_);
    late_calls_done_.wait(lock, [&] { return late_calls_ == 0; });
  });
}

Status RuntimeImpl::CheckBlocks(std::span<const BlockKey> keys,
                                std::span<const uint32_t> blocks) const {
  if (keys.size() != blocks.size()) {
    return Status::InvalidArgument("got " + std::to_string(keys.size()) + " keys but " +
                                   std::to_string(blocks.size()) + " engine blocks");
  }
  const uint32_t n = engine_->layout().num_blocks;
  for (uint32_t b : blocks) {
    if (b >= n) {
      return Status::InvalidArgument("engine block " + std::to_string(b) +
                                     " is out of range (the cache has " + std::to_string(n) +
                                     " blocks)");
    }
  }
  // One engine block holds one key's KV: a save from it twice would store
  // the first key's bytes under the second, a load into it twice lose one.
  std::unordered_map<uint32_t, size_t> first_at;  // engine block -> its first position
  first_at.reserve(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto [it, fresh] = first_at.emplace(blocks[i], i);
    if (!fresh) {
      return Status::InvalidArgument("engine block " + std::to_string(blocks[i]) +
                                     " appears twice, for keys " + std::to_string(it->second) +
                                     " and " + std::to_string(i));
    }
  }
  return Status::Ok();
}

void RuntimeImpl::CountRefusedLocked(RuntimeMetrics::Op op, size_t items, StatusCode code) {
  if (op == RuntimeMetrics::Op::kSave) {
    stats_.save_blocks += items;
    stats_.save_failures += items;
  } else {
    stats_.load_blocks += items;
    stats_.load_failures += items;
  }
  metrics_.AddFailures(op, code, items);
}

Completion RuntimeImpl::Refuse(RuntimeMetrics::Op op, size_t items, const Status& status) {
  // Built first: without memory for it the caller counts the refusal itself
  // (OutOfMemory), once.
  Completion refused = CompletionSource::Done(items, status);
  std::lock_guard lock(mu_);
  CountRefusedLocked(op, items, status.code());
  return refused;
}

Completion RuntimeImpl::OutOfMemory(RuntimeMetrics::Op op, size_t items) noexcept {
  try {
    return Refuse(op, items, Status::ResourceExhausted("out of memory building the request"));
  } catch (...) {
    return out_of_memory_;
  }
}

void RuntimeImpl::FailThrownJob(RuntimeMetrics::Op op, CompletionSource& src, const Status& why,
                                uint64_t start_ns) noexcept {
  // An item keeps its first result: those the job had not answered end
  // Internal, and are the failures it did not count itself.
  auto failures = [&] {
    size_t n = 0;
    for (size_t i = 0; i < src.size(); ++i) n += src.result(i).ok() ? 0 : 1;
    return n;
  };
  const size_t before = failures();
  src.SetAll(why);
  const size_t failed = failures() - before;
  {
    std::lock_guard lock(mu_);
    (op == RuntimeMetrics::Op::kSave ? stats_.save_failures : stats_.load_failures) += failed;
  }
  metrics_.RecordRequest(op, src, NowNs() - start_ns);
}

Completion RuntimeImpl::Submit(RuntimeMetrics::Op op, size_t items,
                               std::function<void(CompletionSource&, uint64_t)> job,
                               std::function<void()> on_done) noexcept {
  std::shared_ptr<CompletionSource> src;
  try {
    if (items == 0 || shut_down_.load(std::memory_order_acquire)) {
      // Run once, here: the catch below must not run it again.
      if (on_done) std::exchange(on_done, nullptr)();
      return items == 0 ? Completion()
                        : Refuse(op, items, Status::Unavailable("runtime is shut down"));
    }
    src = std::make_shared<CompletionSource>(items);
  } catch (...) {
    if (on_done) on_done();
    return OutOfMemory(op, items);
  }
  Completion c = src->completion();
  // From here `src` answers, and so runs on_done, whatever happens: when the
  // job finishes, or when the last reference to it is dropped (refused).
  if (on_done) c.OnDone(std::move(on_done));  // room reserved: allocates nothing
  // Loads are urgent: an engine waits on them with a deadline, and a save
  // may hold its worker for its wait for hub room.
  const auto lane =
      op == RuntimeMetrics::Op::kLoad ? WorkerPool::Lane::kUrgent : WorkerPool::Lane::kOrdinary;
  Status st;
  try {
    st = workers_->TrySubmit(
        [this, op, src, job = std::move(job), start = NowNs()] {
          // A throw is a bug or memory running out, but the caller must
          // still get an answer, not wait forever: every item without a
          // result ends Internal (or ResourceExhausted).
          try {
            job(*src, start);
          } catch (const std::bad_alloc&) {
            FailThrownJob(op, *src, Status::ResourceExhausted("request ran out of memory"), start);
          } catch (...) {
            FailThrownJob(op, *src, Status::Internal("request failed with an exception"), start);
          }
          src->Finish();
        },
        lane);
  } catch (...) {
    st = Status::ResourceExhausted("out of memory queueing the request");
  }
  if (!st.ok()) {
    {
      std::lock_guard lock(mu_);
      if (st.code() == StatusCode::kBusy) ++stats_.busy_rejections;  // not a shutdown racing it
      CountRefusedLocked(op, items, st.code());
    }
    src->SetAll(st);
    src->Finish();
  }
  return c;
}

Completion RuntimeImpl::Save(NamespaceId ns, std::optional<BlockKey> parent,
                             std::span<const BlockKey> keys,
                             std::span<const uint32_t> engine_blocks, const SaveOptions& options) {
  return Guarded(RuntimeMetrics::Op::kSave, keys.size(), [&] {
    if (Status st = CheckBlocks(keys, engine_blocks); !st.ok()) {
      return Refuse(RuntimeMetrics::Op::kSave, keys.size(), st.WithContext("save"));
    }
    return SubmitSave(ns, parent, {keys.begin(), keys.end()},
                      {engine_blocks.begin(), engine_blocks.end()}, options, /*checkpoint=*/false);
  });
}

Completion RuntimeImpl::SubmitSave(NamespaceId ns, std::optional<BlockKey> parent,
                                   std::vector<BlockKey> keys, std::vector<uint32_t> blocks,
                                   const SaveOptions& options, bool checkpoint) {
  const size_t n = keys.size();  // read before keys is moved into the job
  // Everything that allocates is built before the blocks are marked as
  // being saved: once marked, Submit unmarks them however the call ends.
  std::function<void(CompletionSource&, uint64_t)> job;
  std::function<void()> unmark;
  try {
    unmark = [counts = blocks_saving_, saving = blocks] {
      for (uint32_t b : saving) counts[b].fetch_sub(1, std::memory_order_release);
    };
    job = [this, ns, parent, k = std::move(keys), b = blocks, options, checkpoint](
              CompletionSource& done, uint64_t start) {
      RunSave(ns, parent, k, b, options, checkpoint, done);
      metrics_.RecordRequest(RuntimeMetrics::Op::kSave, done, NowNs() - start);
    };
  } catch (...) {
    return OutOfMemory(RuntimeMetrics::Op::kSave, n);
  }
  // Marked, then checked against loads, each seq_cst: a load does the same
  // the other way round, so of a save and a load of one block that overlap,
  // at least one sees the other and is refused.
  for (uint32_t b : blocks) blocks_saving_[b].fetch_add(1, std::memory_order_seq_cst);
  Status loading;
  try {
    if (after_save_marked_) after_save_marked_();
    loading = CheckNotLoading(blocks);  // its message allocates
  } catch (...) {
    unmark();
    throw;
  }
  if (!loading.ok()) {
    unmark();
    return Refuse(RuntimeMetrics::Op::kSave, n, loading);
  }
  return Submit(RuntimeMetrics::Op::kSave, n, std::move(job), std::move(unmark));
}

Completion RuntimeImpl::Load(NamespaceId ns, std::span<const BlockKey> keys,
                             std::span<const uint32_t> engine_blocks,
                             std::chrono::nanoseconds timeout, LayerDone on_layer) {
  return Guarded(RuntimeMetrics::Op::kLoad, keys.size(), [&] {
    if (Status st = CheckBlocks(keys, engine_blocks); !st.ok()) {
      return Refuse(RuntimeMetrics::Op::kLoad, keys.size(), st.WithContext("load"));
    }
    // Saturated: a timeout of nanoseconds::max() ("no deadline") must not wrap
    // into the past.
    const auto now = std::chrono::steady_clock::now();
    const auto deadline = timeout >= std::chrono::steady_clock::time_point::max() - now
                              ? std::chrono::steady_clock::time_point::max()
                              : now + timeout;
    // Marked as loading, atomically against another load of the same block,
    // then checked against saves (seq_cst, as a save marks and checks).
    for (size_t i = 0; i < engine_blocks.size(); ++i) {
      if (blocks_loading_[engine_blocks[i]].fetch_add(1, std::memory_order_seq_cst) == 0) continue;
      for (size_t j = 0; j <= i; ++j) {
        blocks_loading_[engine_blocks[j]].fetch_sub(1, std::memory_order_release);
      }
      return Refuse(RuntimeMetrics::Op::kLoad, keys.size(),
                    Status::InvalidArgument(
                        "load: engine block " + std::to_string(engine_blocks[i]) +
                        " is still being loaded into by another load; wait for that load's "
                        "completion before loading into the block again"));
    }
    auto unmark_here = [&] {
      for (uint32_t b : engine_blocks) blocks_loading_[b].fetch_sub(1, std::memory_order_release);
    };
    for (size_t i = 0; i < engine_blocks.size(); ++i) {
      if (blocks_saving_[engine_blocks[i]].load(std::memory_order_seq_cst) == 0) continue;
      unmark_here();
      return Refuse(RuntimeMetrics::Op::kLoad, keys.size(),
                    Status::InvalidArgument(
                        "load: engine block " + std::to_string(engine_blocks[i]) +
                        " is still being saved; wait for that save's completion before "
                        "loading into the block (the load would overwrite what it saves)"));
    }
    // Marked: Submit unmarks them however the call ends, once it has the
    // callback that does; until then a failure unmarks them here.
    std::function<void(CompletionSource&, uint64_t)> job;
    std::function<void()> unmark;
    try {
      job = [this, ns, deadline, on_layer = std::move(on_layer),
             k = std::vector<BlockKey>(keys.begin(), keys.end()),
             b = std::vector<uint32_t>(engine_blocks.begin(), engine_blocks.end())](
                CompletionSource& done, uint64_t start) {
        RunLoad(ns, k, b, deadline, on_layer, done);
        metrics_.RecordRequest(RuntimeMetrics::Op::kLoad, done, NowNs() - start);
      };
      unmark = [counts = blocks_loading_,
                loading = std::vector<uint32_t>(engine_blocks.begin(), engine_blocks.end())] {
        for (uint32_t b : loading) counts[b].fetch_sub(1, std::memory_order_release);
      };
    } catch (...) {
      unmark_here();
      return OutOfMemory(RuntimeMetrics::Op::kLoad, keys.size());
    }
    return Submit(RuntimeMetrics::Op::kLoad, keys.size(), std::move(job), std::move(unmark));
  });
}

Status RuntimeImpl::CheckNotLoading(std::span<const uint32_t> blocks) const {
  for (uint32_t b : blocks) {
    if (blocks_loading_[b].load(std::memory_order_seq_cst) != 0) {
      return Status::InvalidArgument(
          "save: engine block " + std::to_string(b) +
          " is still being loaded into; wait for that load's completion before saving from the "
          "block (the save would store bytes the load is still writing)");
    }
  }
  return Status::Ok();
}

Result<LookupResult> RuntimeImpl::Lookup(NamespaceId ns, std::span<const BlockKey> keys,
                                         const LookupOptions& options) {
  if (shut_down_.load(std::memory_order_acquire)) {
    return Status::Unavailable("runtime is shut down");
  }
  LookupResult r;
  bool tune = false;
  try {
    AdoptStoredBlocks(ns, keys);
    AdoptState(ns, keys);
    std::lock_guard lock(mu_);
    tune = LookupLocked(ns, keys, options, r, nullptr);
  } catch (...) {
    return LookupFailure("lookup");
  }
  if (tune) WakeMover();  // the replay runs on the mover thread, not here
  return r;
}

Result<PinnedPrefix> RuntimeImpl::LookupAndPin(NamespaceId ns, std::span<const BlockKey> keys,
                                               const LookupOptions& options) {
  if (shut_down_.load(std::memory_order_acquire)) {
    return Status::Unavailable("runtime is shut down");
  }
  PinnedPrefix pin;
  bool tune = false;
  try {
    AdoptStoredBlocks(ns, keys);
    AdoptState(ns, keys);
    std::lock_guard lock(mu_);
    // All that may throw (allocations, the policies' observation) runs
    // before the first pin, and the handle gets runtime_ (its destructor
    // unpins under mu_) only once it holds them all.
    std::vector<IndexEntry*> hits;  // the hits, then their checkpoint's parts
    tune = LookupLocked(ns, keys, options, pin.result_, &hits);
    const size_t hit = pin.result_.hit_blocks;
    pin.keys_.assign(keys.begin(), keys.begin() + hit);
    if (hits.size() > hit) {
      const std::vector<BlockKey> parts = StateParts(ns, keys[hit - 1]);
      pin.keys_.insert(pin.keys_.end(), parts.begin(), parts.end());
    }
    for (IndexEntry* e : hits) ++e->pins;
    pin.runtime_ = this;
    pin.ns_ = ns;
  } catch (...) {
    return LookupFailure("lookup and pin");
  }
  if (tune) WakeMover();
  return pin;
}

// What a lookup that threw answers: the exception it caught (bad_alloc from
// an allocation or a policy, anything else from a policy) as a Status, so
// that no exception reaches the engine. Only allocations and the policies'
// observations throw, so the index is consistent: at worst sightings were
// counted without the policies seeing the request.
Status RuntimeImpl::LookupFailure(std::string_view what) {
  StatusCode code = StatusCode::kInternal;
  try {
    try {
      throw;
    } catch (const std::bad_alloc&) {
      code = StatusCode::kResourceExhausted;
      return Status::ResourceExhausted(std::string(what) + ": out of memory");
    } catch (const std::exception& e) {
      return Status::Internal(std::string(what) + ": " + e.what());
    } catch (...) {
      return Status::Internal(std::string(what) + ": an exception that is not a std::exception");
    }
  } catch (...) {
    // The message could not be built (memory is short): the code alone.
    return Status(code, {});
  }
}

bool RuntimeImpl::LookupLocked(NamespaceId ns, std::span<const BlockKey> keys,
                               const LookupOptions& hints, LookupResult& r,
                               std::vector<IndexEntry*>* found) {
  const bool observe = looked_up_.FirstSighting(hints.request_id);
  std::vector<IndexEntry*> own;
  std::vector<IndexEntry*>& hit = found != nullptr ? *found : own;
  std::vector<IndexEntry*> parts;
  const size_t stored = ResumablePrefixLocked(ns, keys, hit, &parts);
  const size_t hits = hit.size();
  stats_.lookup_state_cut_blocks += stored - hits;
  for (IndexEntry* e : hit) {
    e->sightings += observe;
    e->hits += observe;
    r.tier.push_back(static_cast<uint8_t>(e->FastestTier()));
  }
  r.hit_blocks = hits;
  if (found != nullptr) found->insert(found->end(), parts.begin(), parts.end());
  ++stats_.lookups;
  stats_.lookup_blocks += keys.size();
  stats_.lookup_hit_blocks += hits;
  if (!observe) return false;
  // The hits' sightings are counted above. Keys past the first miss may
  // still be indexed (being filled, or kept only as a link of a longer
  // chain): they were named all the same.
  for (size_t i = hits; i < keys.size(); ++i) {
    IndexEntry* e = index_.Find({ns, keys[i]});
    if (e != nullptr) ++e->sightings;
  }
  const RequestHints request{.session_id = hints.session_id,
                             .expected_reuse = hints.expected_reuse};
  return policies_->ObserveRequest(ns, keys, request, NowNs());
}

void RuntimeImpl::RequestFinished(NamespaceId ns, std::span<const BlockKey> keys,
                                  uint32_t output_tokens) {
  if (keys.empty()) return;
  std::lock_guard lock(mu_);
  policies_->ObserveFinish(ns, keys, output_tokens, NowNs());
}

void RuntimeImpl::Unpin(NamespaceId ns, std::span<const BlockKey> keys) {
  std::lock_guard lock(mu_);
  // Deepest first, so a parent left with no copy follows its child out.
  for (size_t i = keys.size(); i-- > 0;) {
    IndexEntry* e = index_.Find({ns, keys[i]});
    if (e != nullptr && e->pins != 0) DropPinLocked(e);
  }
}

void RuntimeImpl::EraseIfUnheldLocked(IndexEntry* e) {
  if (e->locations == 0 && e->pins == 0 && e->children == 0 && e->state == EntryState::kReady)
    index_.Erase(e);
}

Status RuntimeImpl::Remove(NamespaceId ns, std::span<const BlockKey> keys) {
  try {
    return RemoveBlocks(ns, keys);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(
        "remove: out of memory; some of the blocks may not be removed (retry)");
  } catch (...) {  // a policy's exception
    return Status::Internal("remove failed with an exception; some of the blocks may remain");
  }
}

Status RuntimeImpl::RemoveBlocks(NamespaceId ns, std::span<const BlockKey> keys) {
  if (shut_down_.load(std::memory_order_acquire)) {
    return Status::Unavailable("runtime is shut down");
  }
  // A key's state checkpoint goes with it (its parts are its children).
  // Where a lower tier may hold copies the index has not adopted (a
  // persistent or shared one), every key's parts are removed there;
  // otherwise only those of keys whose checkpoint is indexed.
  const bool every_part = options_.state_blocks > 0 && has_adoptable_tier_;
  std::vector<BlockKey> with_parts;
  // Points `keys` at themselves followed by the parts of those `has_parts` picks.
  auto add_parts = [&](const auto& has_parts) {
    with_parts.assign(keys.begin(), keys.end());
    for (const BlockKey& key : keys) {
      if (!has_parts(key)) continue;
      const std::vector<BlockKey> parts = StateParts(ns, key);
      with_parts.insert(with_parts.end(), parts.begin(), parts.end());
    }
    keys = with_parts;
  };
  if (every_part) add_parts([](const BlockKey&) { return true; });  // hashed without mu_
  std::vector<NsKey> lower_keys;
  {
    std::lock_guard lock(mu_);
    if (options_.state_blocks > 0 && !every_part) {
      add_parts([&](const BlockKey& key) {
        const IndexEntry* e = index_.Find({ns, key});
        return e != nullptr && e->first_part_indexed;
      });
    }
    lower_keys.reserve(keys.size());
    for (const BlockKey& key : keys) lower_keys.push_back({ns, key});
    // Once each: a key listed twice below would be rolled back once too few
    // should listing run out of memory, and stay listed for a Remove the
    // mover then runs against its still-indexed copy.
    std::sort(lower_keys.begin(), lower_keys.end(), [](const NsKey& a, const NsKey& b) {
      return a.key < b.key;  // one namespace
    });
    lower_keys.erase(std::unique(lower_keys.begin(), lower_keys.end()), lower_keys.end());
    std::unordered_map<IndexEntry*, uint32_t> removing;  // entry -> children also removed
    for (const BlockKey& key : keys) {
      IndexEntry* e = index_.Find({ns, key});
      if (e == nullptr) continue;
      if (e->pins != 0 || e->moving || e->state != EntryState::kReady) {
        return Status::Busy("remove: block " + ToHex(key) + " is in use; retry later");
      }
      removing.emplace(e, 0);
    }
    for (auto& [e, n] : removing) {
      if (e->parent != nullptr && removing.contains(e->parent)) ++removing[e->parent];
    }
    for (auto& [e, n] : removing) {
      if (e->children != n && e->children - n <= e->filling_children) {
        // Children a save is still copying in: gone again if it fails.
        return Status::Busy("remove: block " + ToHex(e->id.key) + " has " +
                            std::to_string(e->children - n) +
                            " children being saved; retry once the save ends");
      }
      if (e->children != n) {
        return Status::InvalidArgument("remove: block " + ToHex(e->id.key) + " has " +
                                       std::to_string(e->children - n) +
                                       " stored children not removed in the same call");
      }
    }
    // Every lower tier is asked for every key, indexed there or not: a
    // persistent tier may hold copies this run has not adopted (saved before
    // a restart, or behind a newer hub copy). Listed as pending removes
    // before the entries go: no write of a key there while its Remove runs,
    // no lookup adopts it back, and the mover retries a failed one. Listing
    // allocates; should memory run out, the call ends with every block still
    // stored and nothing it listed left listed.
    struct Listed {
      size_t tier;
      const NsKey* key;
      bool fresh;  // not listed before this call
    };
    std::vector<Listed> listed;
    listed.reserve((tier_count() - 1) * lower_keys.size());
    try {
      for (size_t t = 1; t < tier_count(); ++t) {
        for (const NsKey& k : lower_keys) {
          const bool fresh = !pending_removes_[t].contains(k);
          if (QueueRemoveLocked(t, k, /*running=*/true)) listed.push_back({t, &k, fresh});
        }
      }
    } catch (...) {
      for (const Listed& l : listed) {
        auto& list = pending_removes_[l.tier];
        const auto it = list.find(*l.key);
        if (--it->second.running == 0 && l.fresh) list.erase(it);
      }
      throw;
    }
    // Leaves first: an entry becomes erasable once its children are gone.
    // Each entry is pinned until its turn: erasing a child also erases a
    // parent that is left with no copy and no child (a link kept only for
    // the chain), which would free an entry still listed here. Allocates
    // nothing: an entry with no child is a leaf in every tier it is in, and
    // DropLocation reuses its node.
    for (auto& [e, n] : removing) ++e->pins;
    while (!removing.empty()) {
      for (auto it = removing.begin(); it != removing.end();) {
        IndexEntry* e = it->first;
        if (e->children != 0) {
          ++it;
          continue;
        }
        for (size_t t = 0; t < tier_count(); ++t) {
          const bool hub = t == 0 && e->In(0);
          index_.DropLocation(e, t);  // before its slot goes: see DropLocation
          if (hub) arena_->Free(std::exchange(e->host_slot, kNoSlot));
        }
        --e->pins;
        index_.Erase(e);
        it = removing.erase(it);
      }
    }
    ++removes_running_;
  }
  return RemoveFromLowerTiers(lower_keys);
}

}  // namespace internal
}  // namespace kvtier
