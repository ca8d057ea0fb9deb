// The hybrid cache: KV blocks form prefix chains (leaf-first LRU), each block
// may carry the state checkpoint of the boundary at its end. A lookup walks
// the stored chain and resumes at the deepest boundary that has a checkpoint.
#include "tools/bench/sweep_hybrid.h"

#include <cstdio>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>

namespace kvtier::bench {
namespace {

class HybridCache {
 public:
  HybridCache(const HybridModel& m, uint64_t capacity) : m_(m), capacity_(capacity) {}

  // Leading stored blocks of `ids`, and the tokens up to the deepest
  // checkpointed boundary among them. Refreshes the stored blocks.
  std::pair<size_t, uint64_t> Lookup(const TraceRequest& r, uint64_t now) {
    size_t n = 0;
    uint64_t tokens = 0, usable = 0;
    for (; n < r.hash_ids.size(); ++n) {
      auto it = map_.find(r.hash_ids[n]);
      if (it == map_.end()) break;
      Touch(it->first, it->second, now);
      tokens += BlockTokensAt(r, n, m_.block_tokens);
      if (it->second.checkpoint) usable = tokens;
    }
    return {n, usable};
  }
  // Stores the blocks of `r` from `from` on, until the tier is full.
  void SaveBlocks(const TraceRequest& r, size_t from, uint64_t now, HybridResult* out) {
    for (size_t j = from; j < r.hash_ids.size(); ++j) {
      // A block stored already past the first miss (a chain naming an id
      // twice) would get a second parent, or itself as one: the chain stops.
      if (map_.count(r.hash_ids[j]) != 0) return;
      if (!MakeRoom(m_.kv_bytes_per_block, now)) return;
      Entry& e = map_[r.hash_ids[j]];
      e.last_use = now;
      if (j > 0) {
        e.parent = r.hash_ids[j - 1];
        e.has_parent = true;
        Entry& p = map_.at(e.parent);
        if (p.children++ == 0) leaves_.erase({p.last_use, e.parent});
      }
      leaves_.insert({now, r.hash_ids[j]});
      used_ += m_.kv_bytes_per_block;
      out->kv_bytes_written += m_.kv_bytes_per_block;
    }
  }
  // Adds the checkpoint at the end of block `id` if it is stored.
  void SaveCheckpoint(uint64_t id, uint64_t now, HybridResult* out) {
    auto it = map_.find(id);
    if (it == map_.end() || it->second.checkpoint) return;
    if (!MakeRoom(m_.state_bytes, now)) return;
    it = map_.find(id);  // MakeRoom never drops a block used at `now`
    if (it == map_.end()) return;
    it->second.checkpoint = true;
    used_ += m_.state_bytes;
    out->state_bytes_written += m_.state_bytes;
    ++out->checkpoints_written;
  }
  bool Has(uint64_t id) const { return map_.count(id) != 0; }

 private:
  struct Entry {
    uint64_t parent = 0;
    bool has_parent = false;
    bool checkpoint = false;
    uint32_t children = 0;
    uint64_t last_use = 0;
  };

  void Touch(uint64_t id, Entry& e, uint64_t now) {
    if (e.children == 0) {
      leaves_.erase({e.last_use, id});
      leaves_.insert({now, id});
    }
    e.last_use = now;
  }
  // Evicts least recently used leaves (with their checkpoints) until `need`
  // more bytes fit. Blocks of the request in hand (used at `now`) stay.
  bool MakeRoom(uint64_t need, uint64_t now) {
    while (used_ + need > capacity_) {
      if (leaves_.empty() || leaves_.begin()->first >= now) return false;
      const uint64_t id = leaves_.begin()->second;
      leaves_.erase(leaves_.begin());
      Entry& e = map_.at(id);
      used_ -= m_.kv_bytes_per_block + (e.checkpoint ? m_.state_bytes : 0);
      if (e.has_parent) {
        Entry& p = map_.at(e.parent);
        if (--p.children == 0) leaves_.insert({p.last_use, e.parent});
      }
      map_.erase(id);
    }
    return true;
  }

  HybridModel m_;
  uint64_t capacity_;
  uint64_t used_ = 0;
  std::unordered_map<uint64_t, Entry> map_;
  std::set<std::pair<uint64_t, uint64_t>> leaves_;  // (last use, id)
};

}  // namespace

Result<HybridResult> RunHybridSweep(const Trace& trace, const HybridModel& model,
                                    CheckpointPlacement placement, uint64_t capacity_bytes,
                                    const PolicyKnobs& knobs) {
  KVTIER_RETURN_IF_ERROR(knobs.Validate());
  if (model.kv_bytes_per_block == 0 || model.block_tokens == 0) {
    return Status::InvalidArgument("hybrid sweep: KV bytes per block and block tokens must be > 0");
  }
  std::unique_ptr<AdmissionPolicy> marconi;
  if (placement == CheckpointPlacement::kMarconi) {
    auto p = CreateAdmissionPolicy("marconi", knobs);
    if (!p.ok()) return p.status();
    marconi = std::move(*p);
  }
  HybridCache cache(model, capacity_bytes);
  HybridResult out;
  out.label = placement == CheckpointPlacement::kMarconi ? "marconi (branch points + tails)"
                                                         : "checkpoint every block";
  out.capacity_bytes = capacity_bytes;
  uint64_t now = 0;
  for (const TraceRequest& r : trace.requests) {
    ++now;
    const uint32_t full = FullBlocks(r, model.block_tokens);
    if (marconi) marconi->ObserveRequest(r.hash_ids, full, RequestHints{}, now);
    auto [stored, usable] = cache.Lookup(r, now);
    out.tokens += r.input_length;
    out.hit_tokens += std::min<uint64_t>(usable, r.input_length);
    cache.SaveBlocks(r, stored, now, &out);
    for (uint32_t j = 0; j < full && cache.Has(r.hash_ids[j]); ++j) {
      BlockMeta m;
      m.id = r.hash_ids[j];
      m.depth = j;
      m.tokens = model.block_tokens;
      m.bytes = model.state_bytes;
      m.is_tail = j + 1 == full;
      m.is_checkpoint = true;
      if (marconi && !marconi->Admit(m, TierState{})) continue;
      cache.SaveCheckpoint(m.id, now, &out);
    }
  }
  return out;
}

std::string FormatHybridTable(const std::vector<HybridResult>& rows) {
  std::string out =
      "| checkpoints | capacity GiB | token hit % | checkpoints written | state GiB written "
      "| KV GiB written |\n|---|---:|---:|---:|---:|---:|\n";
  const double gib = 1024.0 * 1024.0 * 1024.0;
  char buf[256];
  for (const HybridResult& r : rows) {
    std::snprintf(buf, sizeof(buf), "| %s | %.1f | %.2f | %llu | %.1f | %.1f |\n", r.label.c_str(),
                  double(r.capacity_bytes) / gib, 100.0 * r.HitRate(),
                  (unsigned long long)r.checkpoints_written, double(r.state_bytes_written) / gib,
                  double(r.kv_bytes_written) / gib);
    out += buf;
  }
  return out;
}

}  // namespace kvtier::bench
