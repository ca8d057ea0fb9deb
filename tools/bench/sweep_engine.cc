// The sweep's engine model: requests arrive at their trace timestamps, wait
// for GPU blocks (and, with a watermark, for headroom), are prefilled (tiered
// cache loads + recompute of the rest) and decoded one token per step; a
// request that needs a block when none is free preempts the cheapest victim.
// One GPU: prefills and decode steps run one after another.
#include <algorithm>
#include <cmath>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tier_policies.h"
#include "policy/policy_build.h"
#include "policy/reuse_model.h"
#include "tools/bench/sweep.h"
#include "tools/bench/sweep_cache.h"

namespace kvtier::bench {
namespace {

// Pool blocks a context of `tokens` holds: its full blocks, plus the one the
// next token goes into.
uint64_t PoolBlocksFor(uint64_t tokens, uint32_t block_tokens) {
  return (tokens + block_tokens) / block_tokens;
}

constexpr uint64_t kGeneratedBit = 1ULL << 63;

// The policies' clock: model seconds in nanoseconds, held at 2^63 rather
// than cast out of range (undefined) by a model that runs that long.
uint64_t ClockNs(double seconds) {
  const double ns = seconds * 1e9;
  return ns < 0x1p63 ? static_cast<uint64_t>(ns) : uint64_t{1} << 63;
}

struct ReqState {
  std::vector<SimBlock> chain;  // prompt blocks
  uint32_t full_blocks = 0;
  uint32_t generated = 0;
  bool started = false;
};

struct Running {
  size_t idx = 0;
  uint32_t blocks = 0;
};

class Engine {
 public:
  Engine(const Trace& trace, const SweepEngine& e, const SweepPolicy& p,
         const SweepCapacity& capacity, TieredCache& cache)
      : trace_(trace),
        e_(e),
        p_(p),
        capacity_(capacity),
        cache_(cache),
        wm_(e.gpu_watermark, e.gpu_flops_per_s) {
    BuildChains();
  }
  SweepResult Run(const PolicyKnobs& knobs);

 private:
  void BuildChains();
  // The first request past every one begun so far that names block `id`
  // (UINT64_MAX: none): its next use as the oracle sees it from now.
  uint64_t NextNamer(uint64_t id) const;
  std::vector<SimBlock> ResumeChain(size_t r, bool saving) const;
  double Prefill(size_t r);
  void DecodeStep();
  void Preempt();
  uint32_t BlocksFor(uint64_t tokens) const {
    return static_cast<uint32_t>(PoolBlocksFor(tokens, e_.block_tokens));
  }
  uint64_t Context(size_t r) const { return trace_.requests[r].input_length + req_[r].generated; }
  // Tokens ResumeChain covers with save_on_preempt: every full block of the
  // context, or the prompt while generation has filled no block past it.
  uint64_t SavedTokens(size_t r) const {
    return std::max<uint64_t>(Context(r) / e_.block_tokens * e_.block_tokens,
                              trace_.requests[r].input_length);
  }
  void MaybeTune(const PolicyKnobs& knobs);

  const Trace& trace_;
  const SweepEngine& e_;
  const SweepPolicy& p_;
  SweepCapacity capacity_;
  TieredCache& cache_;
  GpuWatermark wm_;
  std::vector<ReqState> req_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> namers_;  // block id -> requests, ascending
  size_t begun_ = 0;  // requests whose first prefill has run: the highest index + 1
  std::deque<size_t> waiting_;
  std::vector<Running> running_;
  uint32_t free_ = 0;
  double now_s_ = 0;
  size_t finished_ = 0;
  std::vector<double> ttft_;
  std::deque<TuneRequest> window_;
  size_t since_tune_ = 0;
  SweepResult out_;
};

void Engine::BuildChains() {
  const size_t n = trace_.requests.size();
  req_.resize(n);
  std::unordered_map<uint64_t, uint64_t> next;
  for (size_t r = n; r-- > 0;) {
    const TraceRequest& tr = trace_.requests[r];
    ReqState& s = req_[r];
    uint64_t begin = 0;
    for (size_t i = 0; i < tr.hash_ids.size(); ++i) {
      const uint32_t tok = BlockTokensAt(tr, i, e_.block_tokens);
      auto it = next.find(tr.hash_ids[i]);
      s.chain.push_back({tr.hash_ids[i], tok, e_.model.SpanFlops(begin, begin + tok),
                         it == next.end() ? UINT64_MAX : it->second});
      if (tok == e_.block_tokens) s.full_blocks = static_cast<uint32_t>(i + 1);
      begin += tok;
    }
    for (uint64_t id : tr.hash_ids) next[id] = r;
  }
  for (size_t r = 0; r < n; ++r) {
    for (uint64_t id : trace_.requests[r].hash_ids) namers_[id].push_back(static_cast<uint32_t>(r));
  }
}

uint64_t Engine::NextNamer(uint64_t id) const {
  const auto it = namers_.find(id);
  if (it == namers_.end() || begun_ == 0) return UINT64_MAX;
  const auto past = std::upper_bound(it->second.begin(), it->second.end(), begun_ - 1);
  return past == it->second.end() ? UINT64_MAX : *past;
}

// The chain a preempted request resumes with. Without save_on_preempt, its
// prompt chain. With it, every full block of its context was saved before
// the engine freed it (Preempt): the prompt's full blocks, then the blocks of
// the rest of the prompt and the generated tokens (the prompt's partial last
// block, once generation fills it, holds other tokens: a new block).
// `saving`: the chain Preempt stores, all of it next used at the resume;
// after the resume nothing names the new blocks again.
std::vector<SimBlock> Engine::ResumeChain(size_t r, bool saving) const {
  const ReqState& s = req_[r];
  std::vector<SimBlock> chain = s.chain;
  const uint64_t bt = e_.block_tokens;
  uint64_t begin = uint64_t{s.full_blocks} * bt;
  const uint64_t end = Context(r) / bt * bt;
  if (e_.save_on_preempt && end > begin) {
    chain.resize(s.full_blocks);
    for (uint64_t g = 0; begin < end; ++g, begin += bt) {
      chain.push_back({kGeneratedBit | (uint64_t(r) << 24) | g, static_cast<uint32_t>(bt),
                       e_.model.SpanFlops(begin, begin + bt), UINT64_MAX});
    }
  }
  // Saved, the whole chain is next used at the resume (the oracle must
  // know); the resume's own use puts the prompt's next uses back.
  if (saving) {
    for (SimBlock& b : chain) b.next_use = r;
  }
  return chain;
}

double Engine::Prefill(size_t r) {
  ReqState& s = req_[r];
  const bool first = !s.started;
  s.started = true;
  const TraceRequest& tr = trace_.requests[r];
  const uint64_t now_ns = ClockNs(now_s_);
  std::vector<SimBlock> chain = first ? s.chain : ResumeChain(r, /*saving=*/false);
  if (first) begun_ = std::max(begun_, r + 1);
  // A request resumed after later ones began: the next uses it was built
  // with may have passed (those requests used the blocks or missed them).
  // Left so, they would rank as the most urgent blocks in the oracle's
  // tiers for the rest of the run.
  for (SimBlock& b : chain) {
    if (b.next_use != UINT64_MAX && b.next_use < begun_) b.next_use = NextNamer(b.id);
  }
  if (first) {
    cache_.ObserveRequest(tr.hash_ids, s.full_blocks, RequestHints{}, now_ns);
  }
  std::vector<uint8_t> tier_of;
  const size_t hits = cache_.Lookup(chain, &tier_of);
  uint64_t hit_tokens = 0;
  std::array<uint64_t, kSimTiers> tier_tokens{}, tier_blocks{};
  for (size_t i = 0; i < hits; ++i) {
    hit_tokens += chain[i].tokens;
    tier_tokens[tier_of[i]] += chain[i].tokens;
    ++tier_blocks[tier_of[i]];
  }
  const double bw[kSimTiers] = {e_.host_read_bytes_per_s, e_.nvme_read_bytes_per_s};
  const double lat[kSimTiers] = {e_.host_read_latency_s, e_.nvme_read_latency_s};
  double load_s = 0;
  for (size_t t = 0; t < kSimTiers; ++t) {
    if (tier_blocks[t] != 0) load_s += double(tier_blocks[t] * e_.BlockBytes()) / bw[t] + lat[t];
  }
  const uint64_t ctx = Context(r);
  hit_tokens = std::min(hit_tokens, ctx);
  const double flops = e_.model.PrefixFlops(ctx) - e_.model.PrefixFlops(hit_tokens);
  const double time_s = load_s + flops / e_.gpu_flops_per_s;
  if (first) {
    ++out_.requests;
    out_.tokens += tr.input_length;
    out_.hit_tokens_host += tier_tokens[0];
    out_.hit_tokens_nvme += tier_tokens[1];
    out_.flops_total += e_.model.PrefixFlops(tr.input_length);
    out_.flops_saved += e_.model.PrefixFlops(hit_tokens);
    ttft_.push_back(now_s_ + time_s - double(tr.timestamp_ms) / 1000.0);
    TuneRequest tune;
    for (const SimBlock& b : chain) {
      BlockMeta m;
      m.id = b.id;
      m.bytes = e_.BlockBytes();
      m.flops = b.flops;
      tune.blocks.push_back(m);
    }
    window_.push_back(std::move(tune));
  } else {
    out_.recomputed_tokens += ctx - hit_tokens;
  }
  cache_.Use(chain, hits, now_ns);
  return time_s;
}

void Engine::Preempt() {
  std::vector<RunningRequest> cands;
  for (const Running& run : running_) {
    RunningRequest rr;
    rr.request_id = run.idx;
    rr.blocks_held = run.blocks;
    rr.tokens = Context(run.idx);
    rr.saved_tokens =
        e_.save_on_preempt ? SavedTokens(run.idx) : trace_.requests[run.idx].input_length;
    rr.restore_load_s =
        double(rr.saved_tokens) * double(e_.model.kv_bytes_per_token) / e_.host_read_bytes_per_s;
    rr.recompute_flops = e_.model.SpanFlops(rr.saved_tokens, rr.tokens);
    cands.push_back(rr);
  }
  wm_.Report(free_, e_.gpu_pool_blocks);
  std::vector<PreemptionProposal> victims = wm_.Propose(cands, 1);
  for (const PreemptionProposal& v : victims) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [&](const Running& x) { return x.idx == v.request_id; });
    const size_t r = it->idx;
    if (e_.save_on_preempt) {  // saved before the engine frees the blocks
      std::vector<SimBlock> chain = ResumeChain(r, /*saving=*/true);
      std::vector<uint8_t> tier_of;
      cache_.Use(chain, cache_.Lookup(chain, &tier_of), ClockNs(now_s_));
    }
    free_ += it->blocks;
    running_.erase(it);
    waiting_.push_front(r);
    ++out_.preemptions;
  }
}

void Engine::DecodeStep() {
  now_s_ += e_.decode_step_s;
  for (size_t i = 0; i < running_.size();) {
    Running& run = running_[i];
    const TraceRequest& tr = trace_.requests[run.idx];
    if (++req_[run.idx].generated >= tr.output_length) {
      // The engine learns the output length when decoding ends, not before.
      cache_.ObserveFinish(tr.hash_ids, tr.output_length, ClockNs(now_s_));
      free_ += run.blocks;
      running_.erase(running_.begin() + static_cast<long>(i));
      ++finished_;
      continue;
    }
    ++i;
  }
  std::vector<size_t> needing;
  for (const Running& run : running_) {
    if (BlocksFor(Context(run.idx)) > run.blocks) needing.push_back(run.idx);
  }
  auto find = [&](size_t idx) {
    return std::find_if(running_.begin(), running_.end(),
                        [&](const Running& x) { return x.idx == idx; });
  };
  for (size_t idx : needing) {
    while (free_ == 0 && find(idx) != running_.end()) Preempt();
    auto it = find(idx);
    if (it == running_.end()) continue;  // it was the cheapest victim itself
    --free_;
    ++it->blocks;
  }
}

void Engine::MaybeTune(const PolicyKnobs& knobs) {
  while (window_.size() > knobs.alpha_tune_window) window_.pop_front();
  if (!p_.tune_alpha || knobs.alpha_tune_every == 0) return;
  if (++since_tune_ < knobs.alpha_tune_every) return;
  since_tune_ = 0;
  std::vector<TuneRequest> window(window_.begin(), window_.end());
  const uint64_t capacity[kSimTiers] = {capacity_.host_blocks, capacity_.nvme_blocks};
  // As the runtime tunes (core/tier_policies.h): each flop_aware tier against
  // its own capacity, over the grid that starts at its α, so ties keep it.
  for (size_t t = 0; t < kSimTiers; ++t) {
    EvictionPolicy* ev = cache_.eviction(t);
    if (ev == nullptr || ev->Name() != "flop_aware") continue;
    const std::vector<double> grid = internal::AlphaGridFrom(ev->alpha());
    ev->SetAlpha(TuneAlpha(window, capacity[t], grid));
  }
}

SweepResult Engine::Run(const PolicyKnobs& knobs) {
  out_.capacity = capacity_;
  const size_t n = trace_.requests.size();
  free_ = e_.gpu_pool_blocks;
  size_t next = 0;
  while (finished_ < n) {
    while (next < n && double(trace_.requests[next].timestamp_ms) / 1000.0 <= now_s_) {
      waiting_.push_back(next++);
    }
    while (!waiting_.empty()) {
      const size_t r = waiting_.front();
      const uint32_t need = BlocksFor(Context(r));
      wm_.Report(free_, e_.gpu_pool_blocks);
      if (!running_.empty() && (need > free_ || (e_.gpu_watermark > 0 && !wm_.ShouldAdmit(need)))) {
        break;
      }
      if (need > free_) break;  // cannot happen: every request fits the pool alone
      waiting_.pop_front();
      const bool first = !req_[r].started;
      now_s_ += Prefill(r);
      if (first) MaybeTune(knobs);
      free_ -= need;
      running_.push_back({r, need});
    }
    if (running_.empty()) {
      if (next >= n) break;
      now_s_ = std::max(now_s_, double(trace_.requests[next].timestamp_ms) / 1000.0);
      continue;
    }
    DecodeStep();
  }
  std::sort(ttft_.begin(), ttft_.end());
  auto pct = [&](double q) {
    if (ttft_.empty()) return 0.0;
    const size_t k = std::min(ttft_.size() - 1, size_t(std::ceil(q * double(ttft_.size()))) - 1);
    return ttft_[k];
  };
  out_.sim_seconds = now_s_;
  out_.ttft_p50_s = pct(0.50);
  out_.ttft_p99_s = pct(0.99);
  out_.bytes_written_host = cache_.counters(0).bytes_written;
  out_.bytes_written_nvme = cache_.counters(1).bytes_written;
  out_.nvme_forced_writes = cache_.counters(1).forced_writes;
  if (cache_.eviction(1) != nullptr) out_.final_alpha = cache_.eviction(1)->alpha();
  return out_;
}

}  // namespace

uint64_t PeakPoolBlocks(const TraceRequest& request, uint32_t block_tokens) {
  return PoolBlocksFor(
      uint64_t{request.input_length} + (request.output_length > 0 ? request.output_length - 1 : 0),
      block_tokens);
}

LeftOut DropRequestsLargerThanPool(Trace& trace, const SweepEngine& engine) {
  LeftOut out;
  std::erase_if(trace.requests, [&](const TraceRequest& r) {
    if (PeakPoolBlocks(r, engine.block_tokens) <= engine.gpu_pool_blocks) return false;
    ++out.requests;
    out.blocks += r.hash_ids.size();
    return true;
  });
  return out;
}

Result<SweepResult> RunSweepOne(const Trace& trace, const SweepEngine& engine,
                                const SweepPolicy& policy, const SweepCapacity& capacity,
                                const PolicyKnobs& knobs) {
  KVTIER_RETURN_IF_ERROR(knobs.Validate());
  if (capacity.host_blocks == 0) {
    return Status::InvalidArgument("sweep: host capacity is 0 blocks; expected at least 1");
  }
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const uint64_t peak = PeakPoolBlocks(trace.requests[i], engine.block_tokens);
    if (peak > engine.gpu_pool_blocks) {
      return Status::InvalidArgument(
          "sweep: request " + std::to_string(i) + " needs " + std::to_string(peak) +
          " GPU blocks at its longest, more than the pool's " +
          std::to_string(engine.gpu_pool_blocks) + "; leave it out (DropRequestsLargerThanPool)");
    }
  }
  std::array<SimTierConfig, kSimTiers> tiers;
  tiers[0].capacity_blocks = capacity.host_blocks;
  tiers[1].capacity_blocks = capacity.nvme_blocks;
  tiers[0].read_bytes_per_s = engine.host_read_bytes_per_s;
  tiers[0].read_latency_s = engine.host_read_latency_s;
  tiers[1].read_bytes_per_s = engine.nvme_read_bytes_per_s;
  tiers[1].read_latency_s = engine.nvme_read_latency_s;
  const std::string evictions[kSimTiers] = {policy.host_eviction, policy.nvme_eviction};
  auto models = std::make_unique<internal::SharedReuseModels>();
  for (size_t t = 0; t < kSimTiers; ++t) {
    tiers[t].oracle = policy.oracle;
    tiers[t].deepest_only = !policy.oracle && evictions[t] == "flop_aware";
    auto ev = internal::BuildEviction(policy.oracle ? "lru" : evictions[t], knobs, models.get());
    if (!ev.ok()) return ev.status();
    tiers[t].eviction = std::move(*ev);
  }
  auto chain =
      internal::BuildAdmissionChain(policy.nvme_admission, knobs, /*seed=*/7, models.get());
  if (!chain.ok()) return chain.status();
  tiers[1].admission = std::move(*chain);
  TieredCache cache(std::move(tiers), engine.BlockBytes(), engine.gpu_flops_per_s,
                    engine.evict_batch, std::move(models));
  Engine sim(trace, engine, policy, capacity, cache);
  SweepResult r = sim.Run(knobs);
  r.label = policy.label;
  r.capacity = capacity;
  return r;
}

}  // namespace kvtier::bench
