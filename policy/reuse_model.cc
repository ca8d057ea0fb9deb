// The reuse learner. Rates are counted per class: a block entering a class
// counts as named there, and a later request naming it again counts a reuse
// of the class it was in. The tree sees every request, stored or not, so the
// rates are learned from refused and evicted blocks too and no exploration is
// needed.
//
// A first-named block is judged by the length class of the request that
// brought it until that request finishes; the finish tells its output length
// (an engine knows it once decoding ends, before the blocks leave the host),
// and from then on the block is judged by the output class, which on agentic
// traces separates tool-call turns (short outputs, context continued by the
// next turn) from final answers. Both tables keep learning side by side.
// A block named again is judged by its sightings until the request that
// named it last finishes, then by that request's output class too: a prefix
// whose latest turn was a tool call is likely to be continued again.
//
// Bounded memory: past max_nodes the least recently named blocks are
// forgotten, a few per request (a forgotten block named again is new). A
// chain is marked named leaf first, so a block is never remembered without
// the blocks before it: `known` stays the longest remembered prefix.
#include "policy/reuse_model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>

#include "policy/policy_internal.h"

namespace kvtier::internal {

uint8_t ReuseModel::LengthClass(size_t blocks) {
  const double q = 4.0 * std::log2(double(std::max<size_t>(blocks, 1)));
  return static_cast<uint8_t>(std::min<double>(kLengthClasses - 1, q));
}

uint8_t ReuseModel::OutputClass(uint32_t tokens) {
  const auto octave = static_cast<size_t>(std::bit_width(tokens));  // 0 for 0 tokens
  return static_cast<uint8_t>(std::min(kOutputClasses - 1, octave));
}

void ReuseModel::Enter(size_t cls) {
  rates_[cls].named += 1;
  // Counts decay so the rates follow a drifting workload: every
  // `half_life_` sightings all counts halve.
  if (half_life_ != 0 && ++entries_ >= half_life_) {
    for (Rate& r : rates_) r = {r.named / 2, r.renamed / 2, r.matured / 2};
    entries_ = 0;
  }
}

void ReuseModel::Mature() {
  const double lag = std::max(1.0, mean_lag_);
  while (!immature_.empty() && double(next_tag_ - immature_.front().seq) >= lag) {
    rates_[immature_.front().cls].matured += immature_.front().count;
    immature_.pop_front();
  }
}

void ReuseModel::Immature(uint64_t seq, uint8_t cls, uint32_t count) {
  // Kept in naming order (Mature reads the front): a finish's entries carry
  // their request's naming and go behind the requests named since.
  auto pos = immature_.end();
  while (pos != immature_.begin() && std::prev(pos)->seq > seq) --pos;
  immature_.insert(pos, {seq, cls, count});
}

void ReuseModel::Rename(Node& n) {
  mean_lag_ += (double(next_tag_ - n.seq) - mean_lag_) / 256.0;
  rates_[n.cls].renamed += 1;
  if (n.post != kNone) rates_[n.post].renamed += 1;
}

void ReuseModel::ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks) {
  // Finishes that never came (aborted requests) age out, oldest first.
  while (!pending_.empty() && (pending_.size() > kMaxPending || pending_ids_ > kMaxPendingIds)) {
    pending_ids_ -= pending_.begin()->second.Ids();
    pending_.erase(pending_.begin());
  }
  size_t known = 0;
  while (known < chain.size() && nodes_.Contains(chain[known])) ++known;
  Mature();
  const uint64_t tag = next_tag_++;
  std::array<uint32_t, kClasses> entered{};
  Pending p{chain.empty() ? 0 : chain.back(), chain.size(), known >= kContinuedBlocks, {}, {}};
  const float coin = chain.empty() ? 0.0f : float(Mix64(chain.back() ^ kSalt) >> 40) * 0x1p-24f;
  const uint8_t first_cls = p.continued ? uint8_t(kContinued) : LengthClass(chain.size());
  path_.clear();
  for (size_t i = 0; i < chain.size(); ++i) {
    auto [e, fresh] = nodes_.TryEmplace(chain[i]);
    path_.push_back(e);
    Node& n = e->second;
    if (!fresh) Rename(n);
    n.sightings = fresh ? 1 : std::min<uint32_t>(n.sightings + 1, 3);
    n.cls = n.sightings == 1 ? first_cls : uint8_t(kTwice + n.sightings - 2);
    n.post = kNone;
    n.partial = i >= full_blocks;
    n.seq = tag;
    ++entered[n.cls];
    if (fresh) {
      n.tag = tag;
      n.coin = coin;
    }
    if (!n.partial) (fresh ? p.fresh : p.renamed[n.sightings == 2 ? 0 : 1]).push_back(chain[i]);
    Enter(n.cls);
  }
  for (size_t c = 0; c < kClasses; ++c) {
    if (entered[c] != 0) immature_.push_back({tag, uint8_t(c), entered[c]});
  }
  // The finish is matched by the last block's tag, which is this request's
  // only if it named that block first; and only a request that brings a new
  // full block is followed to its finish. So the blocks a request names
  // again take its output class only when it also adds a block: a turn that
  // adds less than a block (or nothing) leaves them judged by sightings.
  // Following those turns too was measured and loses (synthetic 5/30:
  // 58.28 % of tokens against 58.97 %, the same writes); why is not
  // established.
  if (!p.fresh.empty() && nodes_.Find(chain.back())->tag == tag) {
    pending_ids_ += p.Ids();
    auto [slot, added] = pending_.try_emplace(tag);
    if (!added) pending_ids_ -= slot->second.Ids();  // a tag used again replaces its request
    slot->second = std::move(p);
  }
  recency_.TouchChainAndTrim(path_, nodes_, max_nodes_);
}

void ReuseModel::ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens) {
  if (chain.empty()) return;
  finishes_ = true;
  const Node* last = nodes_.Find(chain.back());
  if (last == nullptr) return;
  auto pit = pending_.find(last->tag);
  if (pit == pending_.end() || pit->second.last != chain.back() ||
      pit->second.length != chain.size()) {
    return;
  }
  const Pending p = std::move(pit->second);
  const uint64_t tag = pit->first;
  pending_.erase(pit);
  pending_ids_ -= p.Ids();
  const uint8_t out = OutputClass(output_tokens);
  for (size_t level = 0; level < 2; ++level) {
    Judge(p.renamed[level], tag, static_cast<uint8_t>(kRenamedBase + level * kOutputClasses + out));
  }
  if (p.continued) return;  // continued paths keep their own class
  Judge(p.fresh, tag, static_cast<uint8_t>(kOutputBase + out));
}

void ReuseModel::Judge(std::span<const uint64_t> ids, uint64_t tag, uint8_t post) {
  uint32_t count = 0;
  for (uint64_t id : ids) {
    Node* n = nodes_.Find(id);
    if (n == nullptr) continue;
    rates_[post].named += 1;
    ++count;
    // Named again (by a later request) before the finish: a reuse of the
    // output class as well; otherwise the block is judged by it from now on.
    if (n->seq != tag) {
      rates_[post].renamed += 1;
    } else {
      n->post = post;
    }
  }
  // Its lag runs from its naming, like the request's other blocks.
  if (count != 0) Immature(tag, post, count);
}

double ReuseModel::FirstSightingRate() const {
  double named = rates_[kContinued].matured, renamed = rates_[kContinued].renamed;
  for (size_t c = 0; c < kLengthClasses; ++c) {
    named += rates_[c].matured;
    renamed += rates_[c].renamed;
  }
  return named == 0 ? -1 : renamed / named;
}

double ReuseModel::RateOf(const Node& n) const {
  for (uint8_t c : {n.post, n.cls}) {
    if (c != kNone && Learned(c)) return std::min(1.0, rates_[c].renamed / rates_[c].matured);
  }
  return -1;
}

double ReuseModel::RateOf(uint64_t id) const {
  const Node* n = nodes_.Find(id);
  return n == nullptr ? -1 : RateOf(*n);
}

bool ReuseModel::Partial(uint64_t id) const {
  const Node* n = nodes_.Find(id);
  return n != nullptr && n->partial;
}

bool ReuseModel::Unfinished(const Node& n) const {
  return finishes_ && !n.partial && n.sightings == 1 && n.post == kNone &&
         pending_.count(n.tag) != 0;
}

bool ReuseModel::Unfinished(uint64_t id) const {
  const Node* n = nodes_.Find(id);
  return n != nullptr && Unfinished(*n);
}

ReuseModel::Look ReuseModel::LookUp(uint64_t id) const {
  const Node* n = nodes_.Find(id);
  if (n == nullptr) return {};
  return {true, n->partial, Unfinished(*n), RateOf(*n), n->coin};
}

size_t ReuseModel::ClassOf(uint64_t id) const {
  const Node* n = nodes_.Find(id);
  if (n == nullptr) return kClasses;
  return n->post != kNone ? n->post : n->cls;
}

std::shared_ptr<ReuseModel> SharedReuseModels::For(const PolicyKnobs& k) {
  for (const Slot& s : models_) {
    if (s.min_samples == k.reuse_min_samples && s.half_life == k.reuse_half_life) return s.model;
  }
  models_.push_back({k.reuse_min_samples, k.reuse_half_life, std::make_shared<ReuseModel>(k)});
  return models_.back().model;
}

void SharedReuseModels::ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks) {
  for (Slot& s : models_) s.model->ObserveRequest(chain, full_blocks);
}

void SharedReuseModels::ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens) {
  for (Slot& s : models_) s.model->ObserveFinish(chain, output_tokens);
}

}  // namespace kvtier::internal
