// Plain option structs for the runtime and its tiers. Every field has a
// default and a comment; Validate() says what is wrong in words. The core
// never sees YAML: config/ turns a file into these structs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/export.h"
#include "kvtier/kv_layout.h"
#include "kvtier/nvme_options.h"
#include "kvtier/policy.h"
#include "kvtier/redis_options.h"
#include "kvtier/remote_options.h"
#include "kvtier/status.h"

namespace kvtier {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;
inline constexpr uint64_t kTiB = 1024 * kGiB;
inline constexpr size_t kMaxTiers = 8;

// Fractions of capacity. Crossing `high` wakes the mover, which demotes or
// evicts until usage is at or below `low`.
struct KVTIER_EXPORT WatermarkOptions {
  double high = 0.95;
  double low = 0.85;
  // 0 < low < high <= 1.
  Status Validate() const;
};

// Policy names TierOptions::Validate accepts for `eviction` and `admission`,
// in the order error messages list them: PolicyEvictionNames() and
// PolicyAdmissionNames() of policy.h. config/ reports against these too.
KVTIER_EXPORT std::span<const std::string_view> EvictionPolicyNames();
KVTIER_EXPORT std::span<const std::string_view> AdmissionPolicyNames();

// kvtier's default policy set: what every tier runs unless its options (or
// its YAML) name others. This is the one place the default is named.
inline constexpr std::string_view kDefaultEvictionPolicy = "lru";
inline constexpr std::string_view kDefaultAdmissionPolicy = "always";

struct KVTIER_EXPORT TierOptions {
  std::string name;              // unique, not "gpu" (the engine); names the tier in stats
  std::string type;              // registry name: "host", later "nvme", "redis", "remote"
  uint64_t capacity_bytes = 0;   // required; at least one block, at most 1 PiB
  WatermarkOptions watermarks;
  std::string eviction{kDefaultEvictionPolicy};                              // eviction policy name
  std::vector<std::string> admission{std::string(kDefaultAdmissionPolicy)};  // all must accept
  // Knobs of this tier's admission and eviction policies (policy.h). A tier
  // whose admission names write_budget needs write_budget_bytes_per_day > 0;
  // the budget counts payload bytes and `write_amplification` converts them
  // to device bytes.
  PolicyKnobs policy;
  // What `cost` admission knows of the tier: read bandwidth (bytes/s) and
  // per-read latency (s). 0 bandwidth = unknown: cost admission then admits.
  double read_bytes_per_s = 0;
  double read_latency_s = 0;
  bool hugepages = true;   // host: try MAP_HUGETLB, else advise transparent huge pages
  bool mlock = true;       // host: lock the arena in memory, best effort (warns on refusal)
  std::string path;        // nvme: file or block device
  uint64_t region_bytes = 64 * kMiB;  // nvme: log region size
  std::vector<std::string> servers;   // redis / remote: "host:port" entries
  // redis / remote: other processes store blocks here too, so a lookup miss
  // asks the tier for keys this process has not indexed (one EXISTS or
  // Contains round trip, waited on for at most 50 ms). false for a tier only
  // this process writes: misses then cost nothing, but blocks it held before
  // a restart are not found again.
  bool shared = true;
  NvmeTierOptions nvme;               // type nvme only
  RedisTierOptions redis;             // type redis only
  RemoteTierOptions remote;           // type remote only

  Status Validate() const;
  // The eviction, admission and policy fields only (part of Validate).
  Status ValidatePolicies() const;
};

// The model whose KV is cached: its namespace and the block geometry.
struct KVTIER_EXPORT ModelOptions {
  std::string preset = "tiny";    // named geometry; fields below override it
  std::string model_id = "kvtier/tiny";
  std::string revision = "main";
  std::string dtype = "fp16";     // fp16 | bf16 | fp8 | fp32
  uint32_t num_layers = 4;
  uint32_t num_kv_heads = 2;
  uint32_t head_size = 16;
  uint32_t block_tokens = 512;
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  KvLayoutKind layout = KvLayoutKind::kVllmNhd;  // the engine's cache layout
  uint32_t hidden_size = 0;  // for FLOP estimates; 0 = num_kv_heads * head_size * 8

  uint32_t ElementBytes() const;  // from dtype
  // The engine layout for a pool of `num_blocks` pages.
  KvLayout Layout(uint32_t num_blocks) const;
  uint64_t BlockBytes() const { return Layout(1).BlockBytes(); }
  NamespaceSpec Namespace() const;
  Status Validate() const;
};

// Fills `model` with a named preset ("tiny", "small", "llama3-8b", "qwen2-7b").
KVTIER_EXPORT Status ApplyModelPreset(std::string_view preset, ModelOptions* model);

struct MoverOptions {
  uint64_t interval_ms = 50;    // how often an idle mover re-checks watermarks; 1..3600000
  uint32_t batch_blocks = 64;   // blocks demoted per tier write batch; 1..4096 (tier limit)
  bool start_thread = true;     // false: tests drive Runtime::TEST_RunMoverOnce()
  // At Shutdown, write the blocks only the hub holds to the tier below it
  // (those its admission accepts, root first) for at most this long, so a
  // persistent tier has them after a restart; 0 = off (the hub's blocks end
  // with the process); at most 3600000.
  uint64_t shutdown_writeback_ms = 0;
};

class Tier;
struct TierContext;
// Builds a tier from its options; the default is CreateTier() (tier.h).
using TierFactory = std::function<Result<std::unique_ptr<Tier>>(const TierOptions&,
                                                                const TierContext&)>;

struct KVTIER_EXPORT RuntimeOptions {
  uint64_t block_bytes = 0;  // bytes of one host block; required
  HashAlgorithm hash = HashAlgorithm::kXxh3_128;
  std::vector<TierOptions> tiers;      // tiers[0] is the host hub and must be type "host"
  MoverOptions mover;
  uint32_t max_queued_requests = 1024;  // Saves, and apart Loads, queued before Busy
  uint32_t worker_threads = 3;          // threads serving Save and Load (Loads first; Saves
                                        // hold at most all but one); 1..256
  std::shared_ptr<Clock> clock;         // null: SystemClock()
  std::shared_ptr<LogSink> log;         // null: StderrLogSink()
  TierFactory tier_factory;             // null: CreateTier; builds tiers[1..]
  // Unix socket path of the admin endpoint (GET /stats as JSON, GET /metrics
  // as Prometheus text), served by one runtime thread; empty = off.
  std::string admin_socket;
  uint32_t block_tokens = 0;  // tokens per block, for token metrics; 0 = unknown
  // Fraction of the engine's KV pool kept free when admitting new requests
  // (Runtime::ShouldAdmitNewRequest); in [0, 1), 0 = off.
  double gpu_watermark = 0.01;
  // Prefill cost of the model, for the FLOPs a block saves (flop_aware
  // eviction, cost admission); used when block_tokens > 0. config/ derives it
  // from the model.
  ModelCost model_cost;
  // The engine's prefill rate in FLOP/s, for cost admission; 0 = unknown
  // (cost admission then admits).
  double gpu_flops_per_s = 0;
  // Hybrid models (SSM or linear-attention layers beside attention): the
  // engine blocks one recurrent-state checkpoint takes (Runtime::SaveState),
  // 0 to 4096. With 0 there are no checkpoints and lookups answer KV blocks
  // alone; otherwise a lookup answers only prefixes whose last block has its
  // checkpoint stored.
  uint32_t state_blocks = 0;

  Status Validate() const;
};

}  // namespace kvtier
