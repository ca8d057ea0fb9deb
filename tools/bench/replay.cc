#include "tools/bench/replay.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>

#include "kvtier/copy_engine.h"
#include "tools/bench/block_content.h"

namespace kvtier::bench {
namespace {

// A simulated serving engine: a paged KV pool with a FIFO free list, so
// block ids rotate and a load that silently copied nothing would leave some
// other key's bytes behind (caught by the verification).
class Replayer {
 public:
  Replayer(const KvtierConfig& config, std::shared_ptr<HostCopyEngine> engine,
           std::unique_ptr<Runtime> runtime, const ReplayOptions& options, ReplayReport* report)
      : options_(options),
        engine_(std::move(engine)),
        runtime_(std::move(runtime)),
        ns_(ComputeNamespaceId(config.model.Namespace())),
        hasher_(ns_, config.runtime.hash),
        block_bytes_(config.model.BlockBytes()),
        state_blocks_(config.runtime.state_blocks),
        expected_(block_bytes_),
        actual_(block_bytes_),
        report_(report) {
    for (uint32_t b = 0; b < config.gpu_pool_blocks; ++b) free_.push_back(b);
  }

  // REQUIRES: the pool has room for the request and a state checkpoint.
  void Request(const TraceRequest& req, uint32_t block_tokens);
  void Finish() {
    report_->runtime = runtime_->Stats();
    runtime_->Shutdown();
  }
  // Shuts the runtime down, then opens the next: a store's file is free
  // only once its runtime is gone.
  Status Restart(const std::function<Result<std::unique_ptr<Runtime>>()>& open) {
    runtime_->Shutdown();
    runtime_.reset();
    KVTIER_ASSIGN_OR_RETURN(runtime_, open());
    return Status::Ok();
  }

 private:
  std::vector<BlockKey> Keys(const TraceRequest& req, uint32_t block_tokens) const;
  bool Verify(const BlockKey& key, uint32_t block);
  size_t LoadAndVerify(std::span<const BlockKey> keys, std::span<const uint32_t> blocks);
  void PrefillAndSave(std::span<const BlockKey> keys, std::span<const uint32_t> blocks,
                      size_t hits);
  bool LoadStateAndVerify(const BlockKey& boundary, std::span<const uint32_t> blocks);
  void SaveCheckpoints(std::span<const BlockKey> boundaries, std::span<const uint32_t> blocks);
  void Fill(const BlockKey& key, uint32_t block);

  const ReplayOptions& options_;
  std::shared_ptr<HostCopyEngine> engine_;
  std::unique_ptr<Runtime> runtime_;
  const NamespaceId ns_;
  const KeyHasher hasher_;
  const uint64_t block_bytes_;
  const uint32_t state_blocks_;
  std::vector<std::byte> expected_;
  std::vector<std::byte> actual_;
  std::deque<uint32_t> free_;
  ReplayReport* report_;
};

// The keys of the request's full blocks: an engine hashes no partial block,
// so a prompt's partial last block is always computed, never looked up.
std::vector<BlockKey> Replayer::Keys(const TraceRequest& req, uint32_t block_tokens) const {
  const std::span<const uint64_t> full =
      std::span(req.hash_ids).first(FullBlocks(req, block_tokens));
  std::vector<BlockKey> keys;
  keys.reserve(full.size());
  for (uint64_t id : full) {
    // The trace id plays the engine's block hash: 8 little-endian bytes.
    std::byte bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::byte>(id >> (8 * i));
    keys.push_back(hasher_.NextFromEngineHash(keys.empty() ? nullptr : &keys.back(), bytes));
  }
  return keys;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Whether engine block `block` holds the content of `key`.
bool Replayer::Verify(const BlockKey& key, uint32_t block) {
  FillBlockContent(key, expected_);
  return engine_->ReadBlock(block, actual_).ok() &&
         std::memcmp(expected_.data(), actual_.data(), block_bytes_) == 0;
}

// The engine computing `key` into `block`.
void Replayer::Fill(const BlockKey& key, uint32_t block) {
  FillBlockContent(key, expected_);
  if (!engine_->WriteBlock(block, expected_).ok()) {
    report_->warnings.push_back("WriteBlock failed on engine block " + std::to_string(block));
  }
}

// Returns the number of leading blocks that loaded OK with the right bytes.
size_t Replayer::LoadAndVerify(std::span<const BlockKey> keys, std::span<const uint32_t> blocks) {
  if (keys.empty()) return 0;
  const auto start = std::chrono::steady_clock::now();
  Completion c = runtime_->Load(ns_, keys, blocks, std::chrono::milliseconds(options_.timeout_ms));
  (void)c.Wait();  // per-block results are read below
  report_->load_s += SecondsSince(start);
  const LoadTally tally = TallyLoad(c, [&](size_t i) { return Verify(keys[i], blocks[i]); });
  report_->load_failures += tally.load_failures;
  report_->verify_failures += tally.verify_failures;
  report_->bytes_loaded += tally.verified * block_bytes_;
  return tally.leading_hits;
}

// Loads the state checkpoint of `boundary` into `blocks`; true when every
// part loaded OK with the right bytes (the engine can resume there). Counts
// the outcome as a resume or a state load failure.
bool Replayer::LoadStateAndVerify(const BlockKey& boundary, std::span<const uint32_t> blocks) {
  const auto start = std::chrono::steady_clock::now();
  Completion c =
      runtime_->LoadState(ns_, boundary, blocks, std::chrono::milliseconds(options_.timeout_ms));
  (void)c.Wait();  // per-part results are read below
  report_->load_s += SecondsSince(start);
  const LoadTally tally =
      TallyLoad(c, [&](size_t i) { return Verify(hasher_.StatePart(boundary, i), blocks[i]); });
  report_->load_failures += tally.load_failures;
  report_->verify_failures += tally.verify_failures;
  if (tally.verified != blocks.size()) {
    ++report_->state_load_failures;
    return false;
  }
  ++report_->state_resumes;
  report_->state_bytes_loaded += tally.verified * block_bytes_;
  report_->bytes_loaded += tally.verified * block_bytes_;
  return true;
}

// Offers the state after each of `boundaries` (computed by the prefill) as
// its checkpoint; the hub's admission keeps some, refusing ends OK, 0 bytes.
void Replayer::SaveCheckpoints(std::span<const BlockKey> boundaries,
                               std::span<const uint32_t> blocks) {
  for (const BlockKey& boundary : boundaries) {
    for (uint32_t i = 0; i < state_blocks_; ++i) Fill(hasher_.StatePart(boundary, i), blocks[i]);
    const auto start = std::chrono::steady_clock::now();
    Completion c = runtime_->SaveState(ns_, boundary, blocks, SaveOptions{});
    (void)c.Wait();  // per-part results are counted below
    report_->save_s += SecondsSince(start);
    ++report_->checkpoints_offered;
    uint64_t bytes = 0;
    size_t ok = 0;
    size_t invalid = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      if (c.result(i).ok()) {
        ++ok;
        bytes += c.bytes(i);
      } else if (c.result(i).code() == StatusCode::kInvalidArgument) {
        ++invalid;
      } else {
        ++report_->save_failures;
      }
    }
    if (invalid == c.size()) {
      // The block itself is not stored: nothing to attach the state to.
      ++report_->checkpoints_unstored;
    } else {
      report_->save_failures += invalid;  // a bad call, not a missing block
    }
    if (ok == c.size() && bytes > 0) ++report_->checkpoints_saved;
    report_->state_bytes_saved += bytes;
    report_->bytes_saved += bytes;
  }
}

void Replayer::PrefillAndSave(std::span<const BlockKey> keys, std::span<const uint32_t> blocks,
                              size_t hits) {
  if (hits == keys.size()) return;
  for (size_t i = hits; i < keys.size(); ++i) Fill(keys[i], blocks[i]);
  std::optional<BlockKey> parent;
  if (hits > 0) parent = keys[hits - 1];
  const auto start = std::chrono::steady_clock::now();
  Completion c = runtime_->Save(ns_, parent, keys.subspan(hits), blocks.subspan(hits));
  (void)c.Wait();  // per-block results are counted below
  report_->save_s += SecondsSince(start);
  report_->save_failures += c.size() - c.ok_count();
  // A key admission refused ends OK with 0 bytes: it was not saved.
  for (size_t i = 0; i < c.size(); ++i) {
    if (c.result(i).ok()) report_->bytes_saved += c.bytes(i);
  }
}

void Replayer::Request(const TraceRequest& req, uint32_t block_tokens) {
  const std::vector<BlockKey> keys = Keys(req, block_tokens);
  ++report_->requests;
  report_->blocks += req.hash_ids.size();
  report_->tokens += req.input_length;

  // The pin lives until this function returns, past the save.
  size_t pinned_hits = 0;
  Result<PinnedPrefix> pin = runtime_->LookupAndPin(ns_, keys);
  if (pin.ok()) {
    pinned_hits = pin->hit_blocks();
  } else {
    ++report_->lookup_failures;
  }
  report_->lookup_hits += pinned_hits;

  // The request's blocks, then (hybrid models) those its state lives in.
  const size_t taken = keys.size() + state_blocks_;
  std::vector<uint32_t> blocks(free_.begin(), free_.begin() + taken);
  free_.erase(free_.begin(), free_.begin() + taken);
  const std::span<const uint32_t> kv = std::span<const uint32_t>(blocks).first(keys.size());
  const std::span<const uint32_t> state = std::span<const uint32_t>(blocks).subspan(keys.size());

  std::span<const BlockKey> all(keys);
  size_t hits = LoadAndVerify(all.first(pinned_hits), kv.first(pinned_hits));
  if (state_blocks_ > 0 && hits > 0) {
    // The state resumes only where the lookup found it; a shorter KV prefix
    // or a failed state load leaves nothing to resume from.
    if (hits < pinned_hits || !LoadStateAndVerify(keys[hits - 1], state)) hits = 0;
  }
  report_->block_hits += hits;
  if (hits > 0) ++report_->hit_requests;
  for (size_t i = 0; i < hits; ++i) report_->token_hits += BlockTokensAt(req, i, block_tokens);

  PrefillAndSave(all, kv, hits);
  if (state_blocks_ > 0) SaveCheckpoints(all.subspan(hits), state);
  // Decoding is not modelled: the request ends as soon as it is saved.
  runtime_->RequestFinished(ns_, keys, req.output_length);
  free_.insert(free_.end(), blocks.begin(), blocks.end());
}

}  // namespace

Status ReplayOptions::Validate() const {
  if (timeout_ms > kMaxReplayTimeoutMs) {
    return Status::InvalidArgument("--timeout-ms " + std::to_string(timeout_ms) +
                                   " is out of range; expected at most " +
                                   std::to_string(kMaxReplayTimeoutMs) + " (one day)");
  }
  return Status::Ok();
}

LoadTally TallyLoad(const Completion& load, const std::function<bool(size_t i)>& verify) {
  LoadTally t;
  bool leading = true;
  for (size_t i = 0; i < load.size(); ++i) {
    if (!load.result(i).ok()) {
      ++t.load_failures;
      leading = false;
      continue;
    }
    // Checked even past the first failure: a wrong block anywhere counts.
    if (!verify(i)) {
      ++t.verify_failures;
      leading = false;
      continue;
    }
    ++t.verified;
    if (leading) ++t.leading_hits;
  }
  return t;
}

Result<ReplayReport> ReplayTrace(const KvtierConfig& config, const Trace& trace,
                                 const ReplayOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  ReplayReport report;
  report.trace_source = trace.source;
  report.renamed_blocks = trace.renamed_blocks;
  report.config_source = config.source;
  report.block_bytes = config.model.BlockBytes();
  report.block_tokens = trace.block_tokens;
  report.state_blocks = config.runtime.state_blocks;
  if (config.model.block_tokens != trace.block_tokens) {
    report.warnings.push_back("model.block_tokens is " + std::to_string(config.model.block_tokens) +
                              " but the trace has " + std::to_string(trace.block_tokens) +
                              "-token blocks; token counts follow the trace");
  }
  if (config.gpu_pool_blocks == 0) return Status::InvalidArgument("gpu_pool_blocks must be > 0");
  if (config.gpu_pool_blocks <= report.state_blocks) {
    return Status::InvalidArgument(
        "engine.pool_blocks " + std::to_string(config.gpu_pool_blocks) +
        " leaves no block beside a state checkpoint of runtime.state_blocks " +
        std::to_string(report.state_blocks) + "; expected more than " +
        std::to_string(report.state_blocks));
  }

  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<HostCopyEngine> created,
                          HostCopyEngine::Create(config.model.Layout(config.gpu_pool_blocks)));
  std::shared_ptr<HostCopyEngine> engine = std::move(created);
  RuntimeOptions runtime_options = config.runtime;
  if (runtime_options.block_bytes == 0) runtime_options.block_bytes = report.block_bytes;
  auto open = [&]() { return Runtime::Open(runtime_options, engine); };
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, open());

  // Requests that cannot fit the engine pool (beside a state checkpoint) are
  // left out of the replay and of the infinite-cache reference alike, so the
  // two stay comparable.
  std::vector<TraceRequest> replayed;
  for (const TraceRequest& req : trace.requests) {
    if (options.limit != 0 && replayed.size() + report.skipped_requests >= options.limit) break;
    if (req.hash_ids.size() + report.state_blocks > config.gpu_pool_blocks) {
      ++report.skipped_requests;
      report.skipped_blocks += req.hash_ids.size();
      continue;
    }
    replayed.push_back(req);
  }
  // A replay of nothing measures nothing: it must not pass for a clean run.
  if (replayed.empty()) {
    if (report.skipped_requests == 0) {
      return Status::InvalidArgument("the trace " + trace.source + " has no requests");
    }
    return Status::InvalidArgument(
        "no request fits the engine pool: all " + std::to_string(report.skipped_requests) +
        " need more than engine.pool_blocks " + std::to_string(config.gpu_pool_blocks) +
        (report.state_blocks > 0 ? " (less the state checkpoint's blocks)" : std::string()));
  }
  // Requests of no tokens name no block: nothing would be looked up.
  if (std::all_of(replayed.begin(), replayed.end(),
                  [](const TraceRequest& r) { return r.hash_ids.empty(); })) {
    return Status::InvalidArgument("the trace " + trace.source + " names no block: all " +
                                   std::to_string(replayed.size()) +
                                   " requests have input_length 0");
  }
  report.infinite = ComputeInfiniteCacheStats(replayed, trace.block_tokens, CachedBlocks::kFull);
  if (options.restart_at >= replayed.size() && options.restart_at != 0) {
    return Status::InvalidArgument("--restart-at " + std::to_string(options.restart_at) +
                                   " is not before the last of the " +
                                   std::to_string(replayed.size()) + " requests replayed");
  }
  Replayer replayer(config, engine, std::move(runtime), options, &report);
  const auto start = std::chrono::steady_clock::now();
  ReplayReport before;  // the counts at the restart
  for (size_t i = 0; i < replayed.size(); ++i) {
    if (options.interrupt != nullptr && options.interrupt->load() != 0) {
      report.interrupted_by = options.interrupt->load();
      report.planned_requests = replayed.size();
      // The reference covers the same requests as the figures.
      report.infinite = ComputeInfiniteCacheStats(std::span(replayed).first(i), trace.block_tokens,
                                                  CachedBlocks::kFull);
      break;
    }
    if (i == options.restart_at && i != 0) {
      before = report;
      KVTIER_RETURN_IF_ERROR(replayer.Restart(open));
      report.restart_at = i;  // a replay interrupted before it reports no restart
    }
    replayer.Request(replayed[i], trace.block_tokens);
    if (options.progress) options.progress(i + 1, replayed.size());
  }
  if (report.restart_at != 0) {
    report.requests_after_restart = report.requests - before.requests;
    report.blocks_after_restart = report.blocks - before.blocks;
    report.block_hits_after_restart = report.block_hits - before.block_hits;
    report.tokens_after_restart = report.tokens - before.tokens;
    report.token_hits_after_restart = report.token_hits - before.token_hits;
  }
  report.elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  replayer.Finish();
  return report;
}

Result<ReplayReport> RunReplay(const ReplayOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(KvtierConfig config,
                          LoadConfigFile(options.config_path, options.overrides));
  Result<Trace> trace = options.synthetic ? GenerateSyntheticTrace(*options.synthetic)
                                          : ReadMooncakeTrace(options.trace_path);
  if (!trace.ok()) return trace.status();
  return ReplayTrace(config, *trace, options);
}

}  // namespace kvtier::bench
