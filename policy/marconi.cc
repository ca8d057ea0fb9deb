// Marconi-style admission: a radix tree over block chains. Because block ids
// are prefix-chained, the tree is the parent/child relation of ids; each
// node remembers how often it was named and what it is to the requests that
// named it (a branch point, a request's tail, on a continuing session's path).
//
// Speculative insertion: a request's longest common prefix with the tree is
// found before it is inserted, so the branch point is known before prefill.
//
// Bounded memory: past max_nodes, the least recently named nodes are
// forgotten, as many per request as it added. A request's chain is marked
// named leaf first, so a parent is always more recently named than its
// children and is forgotten after them: a remembered node's parent is
// remembered too, and the tree stays a tree. Forgetting makes `children`
// approximate, never less than zero: a forgotten child stays counted (a
// node that once branched stays a checkpoint candidate, as its `branch`
// flag does), and a forgotten parent named again starts from zero.
#include <list>
#include <unordered_map>
#include <vector>

#include "policy/policy_internal.h"
#include "policy/recency_list.h"

namespace kvtier::internal {
namespace {

struct Node {
  uint32_t sightings = 0;
  uint32_t children = 0;
  bool branch = false;  // a request's common prefix with the tree ended here
  bool tail = false;    // last full block of some request
  bool keep = false;    // on the new path of a request expected to continue
  RecencyLinks<Node> recency;
};

class MarconiAdmission final : public AdmissionPolicy {
 public:
  MarconiAdmission(const PolicyKnobs& k, size_t max_nodes)
      : max_nodes_(max_nodes),
        admit_tails_(k.marconi_admit_tails),
        threshold_(k.marconi_continue_threshold),
        probation_(k.marconi_probation),
        checkpoints_only_(k.marconi_checkpoints_only) {}
  std::string_view Name() const override { return "marconi"; }

  void ObserveRequest(std::span<const uint64_t> chain, uint32_t full_blocks,
                      const RequestHints& hints, uint64_t) override {
    size_t lcp = 0;
    while (lcp < chain.size() && nodes_.Contains(chain[lcp])) ++lcp;
    if (lcp > 0 && lcp < chain.size()) nodes_[chain[lcp - 1]].branch = true;
    // Without hints, a fixed id-hashed share of requests counts as continuing.
    bool continuing = hints.expected_reuse >= threshold_ ||
                      (hints.expected_reuse < 0 && !chain.empty() && Probation(chain.back()));
    if (hints.session_id != 0) {
      continuing = SeenSession(hints.session_id) || continuing;
    }
    path_.clear();
    for (size_t i = 0; i < chain.size(); ++i) {
      auto [e, fresh] = nodes_.TryEmplace(chain[i]);
      if (fresh && i > 0) ++path_.back()->second.children;
      Node& n = e->second;
      ++n.sightings;
      if (continuing && admit_tails_ && i >= lcp && i < full_blocks) n.keep = true;
      path_.push_back(e);
    }
    if (full_blocks > 0 && full_blocks <= chain.size()) nodes_[chain[full_blocks - 1]].tail = true;
    recency_.TouchChainAndTrim(path_, nodes_, max_nodes_);
  }

  // KV block: shared (seen twice), or on a continuing path, or hinted: by
  // the Save's expected_reuse, or by its session_id naming a session that
  // has already come back (its blocks past the looked-up chain, such as the
  // decoded turn the next request will start with, are in no chain yet).
  // State checkpoint: only at branch points and at tails worth keeping.
  // With checkpoints_only_, every KV block is admitted.
  bool Admit(const BlockMeta& block, const TierState&) override {
    if (checkpoints_only_ && !block.is_checkpoint) return true;
    const Node* found = nodes_.Find(block.id);
    const bool hinted =
        admit_tails_ && (block.expected_reuse >= threshold_ || SessionContinued(block.session_id));
    if (found == nullptr) return hinted || block.sightings >= 2;
    const Node& n = *found;
    if (block.is_checkpoint) {
      return n.branch || n.children >= 2 || (n.tail && (n.keep || hinted || admit_tails_));
    }
    return n.sightings >= 2 || n.keep || hinted;
  }

 private:
  // A fixed share of requests, chosen by a hash of their last block, whose
  // new path is kept: their first reuse may come after the hub evicted them,
  // and no signal of a Mooncake-style trace tells which will be reused
  // (docs/BENCHMARKS.md). Whole paths, because the prefix rule needs them.
  bool Probation(uint64_t id) const {
    return double(Mix64(id ^ 0x6d61726b6f6e6921ULL) >> 11) * 0x1p-53 < probation_;
  }

  // Whether `session` named a request before; remembers it as the most
  // recent session, forgetting the least recent beyond kMaxSessions.
  bool SeenSession(uint64_t session) {
    auto it = sessions_.find(session);
    if (it != sessions_.end()) {
      session_order_.splice(session_order_.begin(), session_order_, it->second.pos);
      it->second.continued = true;
      return true;
    }
    session_order_.push_front(session);
    sessions_.emplace(session, Session{session_order_.begin(), false});
    if (sessions_.size() > kMaxSessions) {
      sessions_.erase(session_order_.back());
      session_order_.pop_back();
    }
    return false;
  }

  // Whether a remembered session has named two requests or more (0 = none).
  bool SessionContinued(uint64_t session) const {
    if (session == 0) return false;
    auto it = sessions_.find(session);
    return it != sessions_.end() && it->second.continued;
  }

  // Sessions remembered, least recently seen forgotten first: a session
  // idle while this many others came is treated as new when it returns.
  static constexpr size_t kMaxSessions = size_t{1} << 16;
  size_t max_nodes_;
  bool admit_tails_;
  float threshold_;
  double probation_;
  bool checkpoints_only_;
  ShardedMap<uint64_t, Node> nodes_;
  RecencyList<Node> recency_;                    // of nodes_
  std::vector<RecencyList<Node>::Entry*> path_;  // the chain being observed, root first
  // Recently seen sessions, most recent first, and where each sits.
  std::list<uint64_t> session_order_;
  struct Session {
    std::list<uint64_t>::iterator pos;
    bool continued;  // a second request named it
  };
  std::unordered_map<uint64_t, Session> sessions_;
};

}  // namespace

Result<std::unique_ptr<AdmissionPolicy>> NewMarconiAdmission(const PolicyKnobs& knobs,
                                                             size_t max_nodes) {
  return std::unique_ptr<AdmissionPolicy>(new MarconiAdmission(knobs, max_nodes));
}

}  // namespace kvtier::internal
