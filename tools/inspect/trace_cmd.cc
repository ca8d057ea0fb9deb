// trace: what a request trace asks of a cache.
#include <iostream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tools/bench/trace.h"
#include "tools/inspect/inspect.h"
#include "tools/inspect/json_text.h"
#include "tools/inspect/table.h"

namespace kvtier::inspect {
namespace {

using nlohmann::json;

// Reuse distance of a block access: how many distinct other blocks were
// accessed since the previous access of the same block (the LRU stack
// distance: an LRU cache of more than d blocks would still hold it). The
// first access of a block is "cold". Buckets are 0, 1, 2-3, 4-7, ...
struct ReuseHistogram {
  uint64_t cold = 0;
  std::vector<uint64_t> buckets;  // buckets[0] = distance 0, buckets[k] = [2^(k-1), 2^k)
};

// Counts, over access times, the accesses that are the latest of their block.
class Fenwick {
 public:
  explicit Fenwick(size_t n) : tree_(n + 1, 0) {}
  void Add(size_t i, int64_t v) {
    for (++i; i < tree_.size(); i += i & -i) tree_[i] += v;
  }
  int64_t Prefix(size_t i) const {  // sum over [0, i)
    int64_t s = 0;
    for (; i > 0; i -= i & -i) s += tree_[i];
    return s;
  }

 private:
  std::vector<int64_t> tree_;
};

ReuseHistogram ComputeReuse(const bench::Trace& trace) {
  size_t accesses = 0;
  for (const auto& r : trace.requests) accesses += r.hash_ids.size();
  Fenwick latest(accesses);
  std::unordered_map<uint64_t, size_t> last;  // block -> time of its latest access
  ReuseHistogram h;
  size_t now = 0;
  for (const auto& r : trace.requests) {
    for (uint64_t id : r.hash_ids) {
      auto [it, fresh] = last.try_emplace(id, now);
      if (fresh) {
        ++h.cold;
      } else {
        const size_t prev = it->second;
        const auto d = static_cast<uint64_t>(latest.Prefix(now) - latest.Prefix(prev + 1));
        size_t bucket = 0;
        while ((uint64_t{1} << bucket) <= d) ++bucket;  // d = 0 -> 0, 1 -> 1, 2..3 -> 2
        if (h.buckets.size() <= bucket) h.buckets.resize(bucket + 1, 0);
        ++h.buckets[bucket];
        latest.Add(prev, -1);
        it->second = now;
      }
      latest.Add(now, 1);
      ++now;
    }
  }
  return h;
}

std::pair<uint64_t, uint64_t> BucketRange(size_t k) {
  if (k == 0) return {0, 0};
  return {uint64_t{1} << (k - 1), (uint64_t{1} << k) - 1};
}

double Ratio(uint64_t a, uint64_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / b; }

}  // namespace

int RunTrace(const std::string& file, uint32_t block_tokens, const Output& o) {
  Result<bench::Trace> trace = bench::ReadMooncakeTrace(file, block_tokens);
  if (!trace.ok()) {
    o.err << "kvtier-inspect trace: " << trace.status().ToString() << "\n";
    return kExitBad;
  }
  const bench::InfiniteCacheStats s = bench::ComputeInfiniteCacheStats(*trace);
  // What an engine that saves full blocks only can hit: kvtier-bench replay's reference.
  const bench::InfiniteCacheStats full = bench::ComputeInfiniteCacheStats(
      trace->requests, trace->block_tokens, bench::CachedBlocks::kFull);
  const ReuseHistogram reuse = ComputeReuse(*trace);
  const uint64_t reused = s.blocks - reuse.cold;
  if (o.json) {
    json buckets = json::array();
    for (size_t k = 0; k < reuse.buckets.size(); ++k) {
      auto [lo, hi] = BucketRange(k);
      buckets.push_back({{"min", lo}, {"max", hi}, {"accesses", reuse.buckets[k]}});
    }
    o.out << JsonText({{"trace", file},
                       {"block_tokens", trace->block_tokens},
                       {"requests", s.requests},
                       {"blocks", s.blocks},
                       {"unique_blocks", s.unique_blocks},
                       {"renamed_blocks", trace->renamed_blocks},
                       {"tokens", s.tokens},
                       {"infinite_cache_hit_blocks", s.hit_blocks},
                       {"infinite_cache_hit_tokens", s.hit_tokens},
                       {"infinite_cache_block_hit_rate", Ratio(s.hit_blocks, s.blocks)},
                       {"infinite_cache_token_hit_rate", Ratio(s.hit_tokens, s.tokens)},
                       {"infinite_cache_full_hit_blocks", full.hit_blocks},
                       {"infinite_cache_full_hit_tokens", full.hit_tokens},
                       {"infinite_cache_full_block_hit_rate", Ratio(full.hit_blocks, s.blocks)},
                       {"infinite_cache_full_token_hit_rate", Ratio(full.hit_tokens, s.tokens)},
                       {"reuse_distance", {{"cold", reuse.cold}, {"buckets", buckets}}}})
          << "\n";
    return kExitOk;
  }
  o.out << "trace: " << file << "\n";
  Table t({"measure", "value"});
  t.Row({"requests", std::to_string(s.requests)});
  t.Row({"blocks", std::to_string(s.blocks)});
  t.Row({"unique blocks", std::to_string(s.unique_blocks)});
  t.Row({"blocks under an id used for another", std::to_string(trace->renamed_blocks)});
  t.Row({"tokens", std::to_string(s.tokens)});
  t.Row({"infinite-cache block hits", std::to_string(s.hit_blocks)});
  t.Row({"infinite-cache block hit rate", Fixed(Ratio(s.hit_blocks, s.blocks), 4)});
  t.Row({"infinite-cache token hits", std::to_string(s.hit_tokens)});
  t.Row({"infinite-cache token hit rate", Fixed(Ratio(s.hit_tokens, s.tokens), 4)});
  t.Row({"infinite-cache full-block hits", std::to_string(full.hit_blocks)});
  t.Row({"infinite-cache full-block token hits", std::to_string(full.hit_tokens)});
  o.out << t.Render()
        << "full-block: the infinite cache holding full blocks only, as an engine saves them\n"
           "(the reference of kvtier-bench replay)\n"
        << "\nreuse distance (distinct blocks between two uses of a block)\n";
  Table r({"distance", "accesses", "share", "cumulative"});
  r.Row({"cold (first use)", std::to_string(reuse.cold), Percent(reuse.cold, s.blocks), "-"});
  uint64_t running = 0;
  for (size_t k = 0; k < reuse.buckets.size(); ++k) {
    auto [lo, hi] = BucketRange(k);
    running += reuse.buckets[k];
    r.Row({lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi),
           std::to_string(reuse.buckets[k]), Percent(reuse.buckets[k], s.blocks),
           Percent(running, reused)});
  }
  o.out << r.Render();
  return kExitOk;
}

}  // namespace kvtier::inspect
