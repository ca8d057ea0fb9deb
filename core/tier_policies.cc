#include "core/tier_policies.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "policy/policy_build.h"

namespace kvtier::internal {
namespace {

// splitmix64's finaliser: every input bit reaches every output bit, so the
// fold of two keys differing anywhere differs (up to 2^-64 collisions).
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t PolicyId(const NsKey& id) {
  return Mix(id.key.lo ^ Mix(id.key.hi ^ Mix(id.ns.value + 0x9e3779b97f4a7c15ULL)));
}

std::vector<double> AlphaGridFrom(double current) {
  std::vector<double> grid{current};
  for (double a : kAlphaGrid) {
    if (a != current) grid.push_back(a);
  }
  return grid;
}

double RunAlphaTuning(const AlphaTuning& tuning, uint64_t capacity_blocks) {
  std::vector<TuneRequest> window;
  window.reserve(tuning.window.size());
  for (const auto& r : tuning.window) window.push_back(*r);
  const std::vector<double> grid = AlphaGridFrom(tuning.current);
  return TuneAlpha(window, capacity_blocks, grid);
}

Result<std::unique_ptr<TierPolicies>> TierPolicies::Create(const RuntimeOptions& options) {
  std::unique_ptr<TierPolicies> p(new TierPolicies(options.block_bytes, options.block_tokens,
                                                   options.model_cost, options.gpu_flops_per_s));
  for (size_t t = 0; t < options.tiers.size(); ++t) {
    const TierOptions& o = options.tiers[t];
    const std::string where = "tier '" + o.name + "': ";
    PerTier tier;
    // The tier index seeds write_budget's coin: runs are reproducible.
    auto chain = BuildAdmissionChain(o.admission, o.policy, /*seed=*/t, &p->reuse_models_);
    if (!chain.ok()) return chain.status().WithContext(where + "admission");
    tier.admission = std::move(chain).value();
    auto eviction = BuildEviction(o.eviction, o.policy, &p->reuse_models_);
    if (!eviction.ok()) return eviction.status().WithContext(where + "eviction");
    tier.eviction = std::move(eviction).value();
    tier.lru = o.eviction == "lru";
    for (const std::string& a : o.admission) tier.admits_all = tier.admits_all && a == "always";
    tier.read_bytes_per_s = o.read_bytes_per_s;
    tier.read_latency_s = o.read_latency_s;
    tier.flop_aware = o.eviction == "flop_aware";
    if (tier.flop_aware && o.policy.alpha_tune_every != 0 && o.policy.alpha_tune_window != 0) {
      tier.tune_every = o.policy.alpha_tune_every;
      tier.tune_window = o.policy.alpha_tune_window;
      p->window_limit_ = std::max<size_t>(p->window_limit_, tier.tune_window);
    }
    // `reuse` eviction learns from the requests through reuse_models_, which
    // ObserveRequest feeds; the policy itself needs no call.
    p->observes_ = p->observes_ || !tier.admits_all || o.eviction == "reuse";
    p->tiers_.push_back(std::move(tier));
  }
  p->observes_ = p->observes_ || p->window_limit_ != 0;
  return p;
}

bool TierPolicies::ObserveRequest(NamespaceId ns, std::span<const BlockKey> keys,
                                  const RequestHints& hints, uint64_t now_ns) {
  // `always` ignores observations: with it on every tier and no tuning, a
  // lookup need not fold its keys.
  if (!observes_) return false;
  ids_.clear();
  for (const BlockKey& k : keys) ids_.push_back(PolicyId({ns, k}));
  const auto full = static_cast<uint32_t>(keys.size());  // a lookup names full blocks only
  reuse_models_.ObserveRequest(ids_, full);
  for (PerTier& t : tiers_) t.admission.ObserveRequest(ids_, full, hints, now_ns);
  return window_limit_ != 0 && RecordForTuning(ids_);
}

void TierPolicies::ObserveFinish(NamespaceId ns, std::span<const BlockKey> keys,
                                 uint32_t output_tokens, uint64_t now_ns) {
  if (!observes_) return;
  ids_.clear();
  for (const BlockKey& k : keys) ids_.push_back(PolicyId({ns, k}));
  reuse_models_.ObserveFinish(ids_, output_tokens);
  for (PerTier& t : tiers_) t.admission.ObserveFinish(ids_, output_tokens, now_ns);
}

double TierPolicies::FlopsAt(uint32_t depth) const {
  if (block_tokens_ == 0) return 0;
  const uint64_t begin = uint64_t{depth} * block_tokens_;
  return cost_.SpanFlops(begin, begin + block_tokens_);
}

bool TierPolicies::RecordForTuning(std::span<const uint64_t> ids) {
  // A lookup's keys start at the root, so a block's depth is its index.
  auto r = std::make_shared<TuneRequest>();
  r->blocks.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    BlockMeta& m = r->blocks[i];
    m.id = ids[i];
    m.depth = static_cast<uint32_t>(i);
    m.tokens = block_tokens_;
    m.bytes = block_bytes_;
    m.flops = FlopsAt(m.depth);
  }
  window_.push_back(std::move(r));
  while (window_.size() > window_limit_) window_.pop_front();
  bool due = false;
  for (PerTier& t : tiers_) {
    if (t.tune_every == 0) continue;
    ++t.since_tune;
    due = due || t.since_tune == t.tune_every;  // wake the mover once per tuning
  }
  return due;
}

std::vector<AlphaTuning> TierPolicies::TakeDueTunings() {
  std::vector<AlphaTuning> due;
  for (size_t i = 0; i < tiers_.size(); ++i) {
    PerTier& t = tiers_[i];
    if (t.tune_every == 0 || t.since_tune < t.tune_every) continue;
    t.since_tune = 0;
    AlphaTuning job{.tier = i, .current = t.eviction->alpha(), .window = {}};
    const size_t n = std::min<size_t>(t.tune_window, window_.size());
    job.window.assign(window_.end() - static_cast<std::ptrdiff_t>(n), window_.end());
    due.push_back(std::move(job));
  }
  return due;
}

void TierPolicies::SetAlpha(size_t tier, double alpha) {
  tiers_[tier].eviction->SetAlpha(alpha);
  ++tiers_[tier].tunings;
}

double TierPolicies::alpha(size_t tier) const {
  return tiers_[tier].flop_aware ? tiers_[tier].eviction->alpha() : -1.0;
}

uint32_t TierPolicies::deepest_only_tiers() const {
  uint32_t bits = 0;
  for (size_t t = 0; t < tiers_.size(); ++t) bits |= tiers_[t].flop_aware ? 1U << t : 0U;
  return bits;
}

BlockMeta TierPolicies::MetaOf(const IndexEntry& e, size_t tier) const {
  BlockMeta m;
  m.id = PolicyId(e.id);
  m.depth = e.depth;
  m.tokens = block_tokens_;
  m.bytes = e.bytes;
  m.sightings = e.sightings;
  m.hits = e.hits;
  m.last_use_ns = tiers_[tier].flop_aware ? e.deepest_use_ns : e.last_access_ns;
  m.inserted_ns = e.inserted_ns;
  m.flops = FlopsAt(e.depth);
  m.session_id = e.session_id;
  m.expected_reuse = e.expected_reuse;
  m.is_tail = e.is_tail;
  m.is_checkpoint = e.is_checkpoint;
  // A part of a state checkpoint is as useful as its boundary block: no
  // lookup names the part, and it serves every one that resumes there.
  if (const IndexEntry* b = BoundaryOf(e)) {
    m.depth = b->depth;
    m.sightings = b->sightings;
    m.hits = b->hits;
    m.flops = FlopsAt(b->depth);
  }
  return m;
}

const IndexEntry* TierPolicies::BoundaryOf(const IndexEntry& e) {
  if (!e.is_checkpoint) return nullptr;
  const IndexEntry* boundary = e.parent;
  while (boundary != nullptr && boundary->is_checkpoint) boundary = boundary->parent;
  return boundary;
}

BlockMeta TierPolicies::AdmissionMetaOf(const IndexEntry& e, size_t tier) const {
  BlockMeta m = MetaOf(e, tier);
  if (const IndexEntry* b = BoundaryOf(e)) m.id = PolicyId(b->id);
  return m;
}

TierState TierPolicies::StateOf(size_t tier, uint64_t capacity_bytes, uint64_t used_bytes,
                                uint64_t now_ns) const {
  TierState s;
  s.capacity_bytes = capacity_bytes;
  s.used_bytes = used_bytes;
  s.read_bytes_per_s = tiers_[tier].read_bytes_per_s;
  s.read_latency_s = tiers_[tier].read_latency_s;
  s.gpu_flops_per_s = gpu_flops_per_s_;
  s.now_ns = now_ns;
  return s;
}

bool TierPolicies::Admit(size_t tier, const BlockMeta& block, const TierState& state) {
  return tiers_[tier].admission.Admit(block, state);
}

void TierPolicies::OnWritten(size_t tier, uint64_t bytes, uint64_t now_ns) {
  if (bytes != 0) tiers_[tier].admission.OnWritten(bytes, now_ns);
}

std::vector<IndexEntry*> TierPolicies::Choose(size_t tier, std::span<IndexEntry* const> candidates,
                                              size_t max, const TakeCheck& may_take,
                                              uint64_t now_ns) {
  std::vector<BlockMeta> metas;
  metas.reserve(candidates.size());
  std::unordered_map<uint64_t, size_t> index_of;  // policy id -> candidate
  for (size_t i = 0; i < candidates.size(); ++i) {
    metas.push_back(MetaOf(*candidates[i], tier));
    metas.back().backed = (candidates[i]->locations >> (tier + 1)) != 0;
    index_of.emplace(metas.back().id, i);
  }
  tiers_[tier].eviction->Order(metas, now_ns);
  std::vector<IndexEntry*> ranked;
  ranked.reserve(metas.size());
  for (const BlockMeta& m : metas) {
    auto it = index_of.find(m.id);
    if (it == index_of.end()) continue;  // a (2^-64) id collision: offered once only
    ranked.push_back(candidates[it->second]);
    index_of.erase(it);
  }
  // Best-ranked entry whose children in the tier are all taken, again and
  // again: taking a child may free its parent, which is then considered at
  // its own rank. Quadratic in the candidates, which are a few batches.
  std::vector<IndexEntry*> out;
  std::vector<bool> taken(ranked.size(), false);
  std::unordered_map<const IndexEntry*, uint32_t> children_taken;
  while (out.size() < max) {
    size_t pick = ranked.size();
    for (size_t r = 0; r < ranked.size() && pick == ranked.size(); ++r) {
      if (taken[r]) continue;
      auto it = children_taken.find(ranked[r]);
      const uint32_t k = it == children_taken.end() ? 0 : it->second;
      if (ranked[r]->children_in[tier] == k && may_take(*ranked[r], k)) pick = r;
    }
    if (pick == ranked.size()) break;
    taken[pick] = true;
    out.push_back(ranked[pick]);
    if (ranked[pick]->parent != nullptr) ++children_taken[ranked[pick]->parent];
  }
  return out;
}

void TierPolicies::OnAdd(const IndexEntry& e, size_t tier) {
  if (!tiers_[tier].lru) tiers_[tier].eviction->OnInsert(MetaOf(e, tier));
}

void TierPolicies::OnDrop(const IndexEntry& e, size_t tier) noexcept {
  if (tiers_[tier].lru) return;
  try {
    tiers_[tier].eviction->OnRemove(PolicyId(e.id));
  } catch (...) {
    // Out of memory for what the policy keeps of departed blocks (a ghost
    // history): a hint lost. The index has let the copy go all the same.
  }
}

void TierPolicies::OnTouch(const IndexEntry& e, size_t tier) {
  if (!tiers_[tier].lru) tiers_[tier].eviction->OnAccess(MetaOf(e, tier));
}

}  // namespace kvtier::internal
