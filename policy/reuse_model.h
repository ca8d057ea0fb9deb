// The learner behind the `reuse` admission and eviction policies: a radix
// tree of every request's chain (ids are prefix-chained, so a chain is a path)
// and, per block class, the learned rate at which a block of that class is
// named again by a later request. Pure; not thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/policy.h"
#include "policy/recency_list.h"

namespace kvtier::internal {

class ReuseModel {
 public:
  // Length classes (quarter-octaves of the chain length) of a request's new
  // blocks before it finishes; output classes (octaves of its output tokens)
  // after; blocks new to a request that continued a known path of at least
  // kContinuedBlocks blocks; blocks named twice; named three or more times;
  // and, once the request that named them last finishes, blocks named twice
  // and three or more times by that request's output class.
  static constexpr size_t kLengthClasses = 24;
  static constexpr size_t kOutputClasses = 14;
  static constexpr uint32_t kContinuedBlocks = 2;
  static constexpr size_t kOutputBase = kLengthClasses;
  static constexpr size_t kContinued = kOutputBase + kOutputClasses;
  static constexpr size_t kTwice = kContinued + 1;
  static constexpr size_t kRenamedBase = kTwice + 2;
  static constexpr size_t kClasses = kRenamedBase + 2 * kOutputClasses;

  // `max_nodes`: the most blocks the tree remembers; past it the least
  // recently named are forgotten, as many per request as it added (tests
  // pass a small bound).
  explicit ReuseModel(const PolicyKnobs& k, size_t max_nodes = kMaxNodes)
      : max_nodes_(max_nodes),
        min_samples_(std::max<uint32_t>(1, k.reuse_min_samples)),  // 0 is refused upstream
        half_life_(k.reuse_half_life) {}

  // A request's chain, before its prefill; blocks from `full_blocks` on are
  // partial (the request's last, partly filled block).
  void ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks);
  // The request whose chain ends in `chain.back()` (chain.size() blocks)
  // finished with `output_tokens` tokens: its new blocks move to an output
  // class. A finish the model cannot match to a pending request is ignored.
  void ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens);

  // Learned rate at which the block's class is named again, and the average
  // rate of first-named blocks; -1 when the block or its class is unknown
  // (fewer than reuse_min_samples blocks judged).
  double RateOf(uint64_t id) const;
  double FirstSightingRate() const;
  // Whether `id` is a partial last block the tree has seen (never worth a write).
  bool Partial(uint64_t id) const;
  // Whether `id` was named first by a request that has not finished yet
  // (false until some finish has been observed: the engine reports none).
  bool Unfinished(uint64_t id) const;
  bool Known(uint64_t id) const { return nodes_.Contains(id); }
  // The class `id` is judged by now (kClasses when unknown); for tests.
  size_t ClassOf(uint64_t id) const;

  // What one decision needs of a block, found with one lookup: the fields
  // of RateOf, Partial and Unfinished, and the naming request's coin.
  struct Look {
    bool known = false;
    bool partial = false;
    bool unfinished = false;
    double rate = -1;
    // One coin per request, uniform in [0, 1): a request's new path is
    // admitted or refused as a whole under a probabilistic cut.
    float coin = 0;
  };
  Look LookUp(uint64_t id) const;

  static uint8_t LengthClass(size_t blocks);
  static uint8_t OutputClass(uint32_t tokens);

  // Requests followed to their finish at most; past it the oldest are dropped.
  static constexpr size_t kMaxPending = size_t{1} << 16;
  // Tests: the tag the next request gets; ids held for pending finishes.
  void TEST_SetNextTag(uint64_t tag) { next_tag_ = tag; }
  size_t TEST_PendingIds() const { return pending_ids_; }
  size_t TEST_Nodes() const { return nodes_.size(); }

 private:
  static constexpr uint8_t kNone = 0xFF;
  struct Node {
    uint64_t tag = 0;  // the request that named it first
    uint64_t seq = 0;  // the request that named it last
    uint32_t sightings = 0;
    uint8_t cls = 0;       // class while first-named before the finish, or kTwice+
    uint8_t post = kNone;  // output (or continued) class after the finish
    bool partial = false;
    float coin = 0;  // the naming request's coin, uniform in [0, 1)
    RecencyLinks<Node> recency;
  };
  struct Rate {
    double named = 0;    // blocks that entered the class
    double renamed = 0;  // of those, named again while in it
    double matured = 0;  // of `named`, those named at least the mean reuse lag ago
  };
  struct Entry {  // blocks that entered a class at request `seq`, not yet matured
    uint64_t seq = 0;
    uint8_t cls = 0;
    uint32_t count = 0;
  };
  struct Pending {
    uint64_t last = 0;  // the request's last id and chain length, to match its finish
    size_t length = 0;
    bool continued = false;
    std::vector<uint64_t> fresh;  // full blocks it named first
    // Full blocks it named again: [0] for the second time, [1] for the
    // third or later (the level it named them at, whatever came since).
    std::array<std::vector<uint64_t>, 2> renamed;
    size_t Ids() const { return fresh.size() + renamed[0].size() + renamed[1].size(); }
  };
  bool Learned(size_t cls) const { return rates_[cls].matured >= double(min_samples_); }
  double RateOf(const Node& n) const;
  bool Unfinished(const Node& n) const;
  void Enter(size_t cls);
  void Mature();
  void Immature(uint64_t seq, uint8_t cls, uint32_t count);
  // At the finish of request `tag`: enters its blocks `ids` into class `post`.
  void Judge(std::span<const uint64_t> ids, uint64_t tag, uint8_t post);
  void Rename(Node& n);

  static constexpr size_t kMaxNodes = size_t{1} << 23;
  static constexpr size_t kMaxPendingIds = size_t{1} << 22;  // 32 MiB of ids
  static constexpr uint64_t kSalt = 0x7265757365636f69ULL;
  size_t max_nodes_;
  uint32_t min_samples_;
  uint64_t half_life_;
  uint64_t entries_ = 0;
  // Requests are tagged in order; 64 bits never wrap, so tag order is age.
  uint64_t next_tag_ = 1;
  std::array<Rate, kClasses> rates_{};
  ShardedMap<uint64_t, Node> nodes_;
  RecencyList<Node> recency_;                    // of nodes_
  std::vector<RecencyList<Node>::Entry*> path_;  // the chain being observed, root first
  // Ordered by tag, so the oldest (finishes that never came) go first.
  std::map<uint64_t, Pending> pending_;
  size_t pending_ids_ = 0;  // ids held by pending_, bounded like its size
  // Rates divide reuses by matured blocks: a block named a moment ago has
  // had no time to come back, and counting it would favour the classes whose
  // reuse comes soonest. The lag is learned (mean over renames, in requests).
  std::deque<Entry> immature_;
  double mean_lag_ = 1;
  bool finishes_ = false;  // some finish was observed
};

// The learners of one cache: one ReuseModel per set of learning knobs,
// shared by every `reuse` policy of every tier built from it (BuildEviction,
// BuildAdmissionChain in policy/policy_build.h), so each request is learned
// once, not once per policy. The owner feeds it; the policies do not.
class SharedReuseModels {
 public:
  std::shared_ptr<ReuseModel> For(const PolicyKnobs& k);
  void ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks);
  void ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens);
  size_t size() const { return models_.size(); }

 private:
  struct Slot {
    uint32_t min_samples = 0;
    uint64_t half_life = 0;
    std::shared_ptr<ReuseModel> model;
  };
  std::vector<Slot> models_;
};

// Base of the `reuse` admission and eviction policies (Policy is
// AdmissionPolicy or EvictionPolicy). With its own model it feeds it every
// request and finish the policy observes; with a shared one (from
// SharedReuseModels) it leaves that to the model's owner.
template <typename Policy>
class ObservesReuse : public Policy {
 public:
  ObservesReuse(const PolicyKnobs& k, std::shared_ptr<ReuseModel> shared)
      : feeds_(shared == nullptr),
        owned_(feeds_ ? std::make_shared<ReuseModel>(k) : std::move(shared)),
        model_(*owned_) {}
  void ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks, const RequestHints&,
                      uint64_t) override {
    if (feeds_) model_.ObserveRequest(chain, full_blocks);
  }
  void ObserveFinish(std::span<const uint64_t> chain, uint32_t output_tokens, uint64_t) override {
    if (feeds_) model_.ObserveFinish(chain, output_tokens);
  }

 private:
  bool feeds_;
  std::shared_ptr<ReuseModel> owned_;

 protected:
  ReuseModel& model_;
};

}  // namespace kvtier::internal
