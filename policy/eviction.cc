// Eviction orders: lru, s3fifo and flop_aware. The caller offers only the
// blocks it may drop (leaves), so each policy only has to rank them.
#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <tuple>
#include <vector>

#include "policy/policy_build.h"
#include "policy/policy_internal.h"
#include "policy/reuse_model.h"
#include "policy/sharded_map.h"

namespace kvtier {
namespace {

// Blocks that left a tier, each with a value, remembered up to a bound and
// forgotten oldest first. A block taken back, or remembered again, leaves
// its earlier queue entry stale: such an entry forgets nothing (it used to
// forget the newer record) and counts against no bound but the queue's own.
template <typename V>
class Ghosts {
 public:
  void Remember(uint64_t id, V value, size_t bound) {
    map_[id] = Record{value, ++seq_};
    fifo_.push_back({id, seq_});
    while (map_.size() > bound || fifo_.size() > 2 * bound) {
      const auto [old, seq] = fifo_.front();
      fifo_.pop_front();
      if (const Record* r = map_.Find(old); r != nullptr && r->seq == seq) map_.Erase(old);
    }
  }
  // Forgets `id`; its value, if it was remembered.
  std::optional<V> Take(uint64_t id) {
    const Record* r = map_.Find(id);
    if (r == nullptr) return std::nullopt;
    const V value = r->value;
    map_.Erase(id);
    return value;
  }

 private:
  struct Record {
    V value;
    uint64_t seq = 0;  // of the Remember that made it
  };
  internal::ShardedMap<uint64_t, Record> map_;
  std::deque<std::pair<uint64_t, uint64_t>> fifo_;  // (id, seq), oldest first
  uint64_t seq_ = 0;
};

class LruEviction final : public EvictionPolicy {
 public:
  std::string_view Name() const override { return "lru"; }
  void Order(std::span<BlockMeta> c, uint64_t) override {
    std::stable_sort(c.begin(), c.end(), [](const BlockMeta& a, const BlockMeta& b) {
      return a.last_use_ns < b.last_use_ns;
    });
  }
};

// Marconi's score over the candidates: recency and prefill FLOPs saved per
// byte, each min-max normalised to [0, 1]; the lowest score leaves first.
class FlopAwareEviction final : public EvictionPolicy {
 public:
  explicit FlopAwareEviction(double alpha) : alpha_(alpha) {}
  std::string_view Name() const override { return "flop_aware"; }
  void SetAlpha(double alpha) override { alpha_ = alpha; }
  double alpha() const override { return alpha_; }

  void Order(std::span<BlockMeta> c, uint64_t) override {
    if (c.empty()) return;
    double rmin = INFINITY, rmax = -INFINITY, fmin = INFINITY, fmax = -INFINITY;
    for (const BlockMeta& b : c) {
      rmin = std::min(rmin, double(b.last_use_ns));
      rmax = std::max(rmax, double(b.last_use_ns));
      fmin = std::min(fmin, PerByte(b));
      fmax = std::max(fmax, PerByte(b));
    }
    const double rspan = rmax > rmin ? rmax - rmin : 1.0;
    const double fspan = fmax > fmin ? fmax - fmin : 1.0;
    internal::OrderByKeys(c, [&](const BlockMeta& b) {
      return (double(b.last_use_ns) - rmin) / rspan + alpha_ * (PerByte(b) - fmin) / fspan;
    });
  }

 private:
  static double PerByte(const BlockMeta& b) {
    return b.bytes == 0 ? 0.0 : b.flops / double(b.bytes);
  }
  double alpha_;
};

// S3-FIFO over leaves: new blocks enter a small FIFO; blocks evicted from it
// leave a ghost, and a ghost that comes back goes straight to the main FIFO.
// Evicting from a FIFO passes over the blocks ahead of the victim that were
// hit since they entered it: a small one moves to main, a main one goes to
// main's tail with its count lowered. Order only ranks (a ranking evicts
// nothing, and is asked for over every leaf); the passing over happens as a
// block leaves, to the hit blocks the last ranking saw ahead of it in its FIFO.
class S3FifoEviction final : public EvictionPolicy {
 public:
  explicit S3FifoEviction(double small_fraction) : small_fraction_(small_fraction) {}
  std::string_view Name() const override { return "s3fifo"; }

  void OnInsert(const BlockMeta& b) override {
    auto [e, fresh] = state_.TryEmplace(b.id);
    if (!fresh) return;
    e->second.main = ghosts_.Take(b.id).has_value();
    e->second.seq = ++seq_;
    ++(e->second.main ? main_ : small_);
  }
  void OnAccess(const BlockMeta& b) override {
    Entry* e = state_.Find(b.id);
    if (e != nullptr && e->freq < 3) ++e->freq;
  }
  void OnRemove(uint64_t id) override {
    const Entry* e = state_.Find(id);
    if (e == nullptr) return;
    // Only a block the last ranking offered is evicted (a Remove of another
    // passes nothing over).
    if (e->ranked == ranking_) PassOver(e->main, e->seq);
    if (e->main) {
      --main_;
    } else {
      --small_;
      ghosts_.Remember(id, true, std::max<size_t>(main_ + small_, 16));
    }
    state_.Erase(id);
  }

  // The FIFO evicted from first, then the other. Within main: blocks by how
  // often they will be passed over first (their count), then FIFO order.
  // Small blocks that were hit go to main's tail when passed over.
  void Order(std::span<BlockMeta> c, uint64_t) override {
    const bool small_first =
        main_ == 0 || double(small_) > small_fraction_ * double(small_ + main_);
    ++ranking_;
    for (Hit& h : hits_) {
      h.fifo.clear();
      h.next = 0;
    }
    internal::OrderByKeys(c, [&](const BlockMeta& b) -> std::tuple<int, int, uint64_t> {
      Entry* e = state_.Find(b.id);
      if (e == nullptr) return {0, 0, 0};  // unknown to the policy: first to go
      e->ranked = ranking_;
      if (e->freq > 0) hits_[e->main].fifo.emplace_back(e->seq, b.id);
      if (e->main) return {small_first ? 2 : 1, e->freq, e->seq};
      if (!small_first) return {2, e->freq, e->seq};
      if (e->freq == 0) return {1, 0, e->seq};
      return {2, e->freq - 1, seq_ + e->seq};  // moves to main's tail first
    });
    for (Hit& h : hits_) std::sort(h.fifo.begin(), h.fifo.end());
  }

 private:
  struct Entry {
    bool main = false;
    uint8_t freq = 0;
    uint64_t seq = 0;
    uint64_t ranked = 0;  // the last ranking that offered it
  };
  // The hit blocks of one FIFO the last ranking offered, in FIFO order;
  // those before `next` were passed over.
  struct Hit {
    std::vector<std::pair<uint64_t, uint64_t>> fifo;  // (seq, id)
    size_t next = 0;
  };
  // A block of `main`'s FIFO (or small's) with `seq` leaves: the hit blocks
  // of that FIFO the last ranking saw ahead of it are passed over, in order.
  void PassOver(bool main, uint64_t seq) {
    Hit& h = hits_[main];
    for (; h.next < h.fifo.size() && h.fifo[h.next].first < seq; ++h.next) {
      const auto [was, id] = h.fifo[h.next];
      Entry* p = state_.Find(id);
      // Gone, or moved since the ranking: not this FIFO's to pass over now.
      if (p == nullptr || p->main != main || p->freq == 0 || p->seq != was) continue;
      if (!p->main) {
        --small_;
        ++main_;
        p->main = true;
      }
      --p->freq;
      p->seq = ++seq_;
    }
  }

  double small_fraction_;
  uint64_t seq_ = 0;
  size_t small_ = 0;
  size_t main_ = 0;
  internal::ShardedMap<uint64_t, Entry> state_;
  Ghosts<bool> ghosts_;   // a set: the value is unused
  uint64_t ranking_ = 0;  // Order calls so far
  Hit hits_[2];           // [0]: small, [1]: main
};

// Segmented LRU with a ghost history: a block named by two or more requests
// (its sightings, plus those remembered from an earlier stay in this tier)
// is protected; unprotected leaves go first, oldest first. Protected blocks
// may hold at most `protected_fraction` of the tier: beyond that the oldest
// protected leaves go first. The reuse share of a block seen twice is several
// times that of a block seen once in agentic traces (docs/BENCHMARKS.md).
class SlruEviction final : public EvictionPolicy {
 public:
  explicit SlruEviction(double protected_fraction) : protected_fraction_(protected_fraction) {}
  std::string_view Name() const override { return "slru"; }

  void OnInsert(const BlockMeta& b) override {
    auto [e, fresh] = seen_.TryEmplace(b.id, 0);
    if (!fresh) return;
    const uint32_t past = ghosts_.Take(b.id).value_or(0);
    e->second = std::max<uint32_t>(b.sightings, 1) + past;
    if (e->second >= 2) ++protected_;
  }
  void OnAccess(const BlockMeta& b) override {
    uint32_t* n = seen_.Find(b.id);
    if (n == nullptr) return;
    if (++*n == 2) ++protected_;
  }
  void OnRemove(uint64_t id) override {
    const uint32_t* n = seen_.Find(id);
    if (n == nullptr) return;
    if (*n >= 2) --protected_;
    const uint32_t sightings = *n;
    seen_.Erase(id);
    ghosts_.Remember(id, sightings, std::max<size_t>(4 * seen_.size(), 64));
  }
  void Order(std::span<BlockMeta> c, uint64_t) override {
    const bool over = double(protected_) > protected_fraction_ * double(seen_.size());
    internal::OrderByKeys(c, [&](const BlockMeta& b) {
      const uint32_t* n = seen_.Find(b.id);
      const bool prot = n != nullptr && *n >= 2;
      return std::pair<int, uint64_t>{prot == over ? 0 : 1, b.last_use_ns};
    });
  }

 private:
  double protected_fraction_;
  size_t protected_ = 0;
  internal::ShardedMap<uint64_t, uint32_t> seen_;   // in the tier: sightings
  Ghosts<uint32_t> ghosts_;                         // left the tier: sightings
};

}  // namespace

namespace internal {

Result<std::unique_ptr<EvictionPolicy>> BuildEviction(std::string_view name,
                                                      const PolicyKnobs& knobs,
                                                      SharedReuseModels* models) {
  if (name == "lru") return std::unique_ptr<EvictionPolicy>(new LruEviction());
  if (name == "flop_aware") {
    return std::unique_ptr<EvictionPolicy>(new FlopAwareEviction(knobs.flop_alpha));
  }
  if (name == "slru") {
    return std::unique_ptr<EvictionPolicy>(new SlruEviction(knobs.slru_protected_fraction));
  }
  if (name == "s3fifo") {
    return std::unique_ptr<EvictionPolicy>(new S3FifoEviction(knobs.s3fifo_small_fraction));
  }
  if (name == "reuse") {
    KVTIER_RETURN_IF_ERROR(CheckReuseMinSamples(knobs));
    return NewReuseEviction(knobs, models ? models->For(knobs) : nullptr);
  }
  return Status::InvalidArgument("unknown eviction policy '" + std::string(name) + "'");
}

}  // namespace internal

Result<std::unique_ptr<EvictionPolicy>> CreateEvictionPolicy(std::string_view name,
                                                             const PolicyKnobs& knobs) {
  return internal::BuildEviction(name, knobs, nullptr);
}

}  // namespace kvtier
