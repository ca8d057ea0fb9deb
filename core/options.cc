#include "kvtier/options.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/names.h"
#include "core/tier_stores.h"
#include "kvtier/tier.h"
#include "tiers/host/host_arena.h"

namespace kvtier {
namespace {

constexpr uint64_t kPiB = 1024 * kTiB;
// A block is one I/O on every tier; beyond this a single transfer stalls the
// whole queue, and the geometry is almost certainly a typo.
constexpr uint64_t kMaxBlockBytes = kGiB;
// Each worker is a thread with its own stack; more than this cannot help a
// runtime whose work is copies and tier I/O, and a huge count is a typo.
constexpr uint32_t kMaxWorkerThreads = 256;
constexpr uint32_t kMaxStateBlocks = 4096;
// An idle mover still looks at the watermarks once an hour; 0 would spin.
constexpr uint64_t kMaxMoverIntervalMs = 3600 * 1000;
// Every tier refuses a batch larger than this (TierCapabilities).
constexpr uint32_t kMaxMoverBatchBlocks = TierCapabilities{}.max_batch_blocks;
// The engine's own level: metrics and stats name it "gpu".
constexpr std::string_view kEngineTierName = "gpu";

bool ValidTierNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// Shortest faithful text of a fraction ("0.95", not "0.950000").
std::string FormatFraction(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Status TierError(const std::string& tier, const std::string& what) {
  return Status::InvalidArgument("tier '" + tier + "': " + what);
}

struct Preset {
  std::string_view name;
  std::string_view model_id;
  std::string_view dtype;
  uint32_t num_layers;
  uint32_t num_kv_heads;
  uint32_t head_size;
  uint32_t block_tokens;
  uint32_t hidden_size;
};

// Geometries of the models the benchmarks and examples refer to. tiny and
// small are synthetic; their blocks stay small so tests run in little memory.
constexpr std::array<Preset, 4> kPresets = {{
    {"tiny", "kvtier/tiny", "fp16", 4, 2, 16, 512, 0},
    {"small", "kvtier/small", "fp16", 2, 1, 16, 512, 0},
    {"llama3-8b", "meta-llama/Meta-Llama-3-8B", "fp16", 32, 8, 128, 16, 4096},
    {"qwen2-7b", "Qwen/Qwen2-7B", "bf16", 28, 4, 128, 16, 3584},
}};

// Product of the block dimensions, saturating at kMaxBlockBytes + 1 so that
// absurd geometries cannot wrap around to a small number.
uint64_t CappedBlockBytes(const ModelOptions& m) {
  const uint64_t factors[] = {m.num_layers,   m.Layout(1).Planes(), m.block_tokens,
                              m.num_kv_heads, m.head_size,          m.ElementBytes()};
  uint64_t product = 1;
  for (uint64_t f : factors) {
    product *= f;  // both operands <= 2^32, cannot overflow
    if (product > kMaxBlockBytes) return kMaxBlockBytes + 1;
  }
  return product;
}

}  // namespace

// The runtime runs every policy the policy library builds.
std::span<const std::string_view> EvictionPolicyNames() { return PolicyEvictionNames(); }
std::span<const std::string_view> AdmissionPolicyNames() { return PolicyAdmissionNames(); }

Status WatermarkOptions::Validate() const {
  const std::string text =
      "watermarks low " + FormatFraction(low) + " / high " + FormatFraction(high);
  // Written as negations so that NaN fails every comparison and is rejected.
  if (!(low > 0.0) || !(high <= 1.0)) {
    return Status::InvalidArgument(text + " are out of range; expected 0 < low < high <= 1");
  }
  if (!(low < high)) {
    return Status::InvalidArgument(text + ": low is not below high; expected 0 < low < high <= 1");
  }
  return Status::Ok();
}

Status TierOptions::ValidatePolicies() const {
  const auto eviction_names = EvictionPolicyNames();
  if (!internal::ContainsName(eviction_names, eviction)) {
    return TierError(name, "unknown eviction policy '" + eviction +
                               "'; expected one of: " + internal::JoinNames(eviction_names));
  }
  if (admission.empty()) {
    return TierError(name, "admission list is empty; expected at least one policy");
  }
  const auto admission_names = AdmissionPolicyNames();
  for (size_t i = 0; i < admission.size(); ++i) {
    const std::string& a = admission[i];
    if (!internal::ContainsName(admission_names, a)) {
      return TierError(name, "unknown admission policy '" + a +
                                 "'; expected one of: " + internal::JoinNames(admission_names));
    }
    // Each would judge a block on its own: a write budget twice would admit
    // at the square of its rate, a sketch twice would count every sighting.
    if (std::find(admission.begin(), admission.begin() + i, a) != admission.begin() + i) {
      return TierError(name, "admission policy '" + a + "' is listed twice; expected each once");
    }
    if (a == "write_budget" && policy.write_budget_bytes_per_day == 0) {
      return TierError(name,
                       "admission write_budget has no budget; expected "
                       "policy.write_budget_bytes_per_day > 0");
    }
  }
  Status knobs = policy.ValidateFor(admission);
  if (!knobs.ok()) return TierError(name, "policy " + std::string(knobs.message()));
  // Written as negations so that NaN is rejected too.
  if (!(read_bytes_per_s >= 0) || !(read_latency_s >= 0)) {
    return TierError(name, "negative read bandwidth or latency; expected values >= 0");
  }
  return Status::Ok();
}

Status TierOptions::Validate() const {
  if (name.empty()) return Status::InvalidArgument("tier name is empty; expected a name");
  for (char c : name) {
    if (!ValidTierNameChar(c)) {
      return TierError(name,
                       "name has a character outside [a-z0-9_-]; expected a name "
                       "of lower-case letters, digits, '_' and '-'");
    }
  }
  if (name == kEngineTierName) {
    return TierError(name,
                     "name is reserved for the engine's GPU pool; expected another tier name");
  }
  if (type.empty()) return TierError(name, "type is empty; expected a tier type");
  if (capacity_bytes == 0) {
    return TierError(name, "capacity is 0; expected a capacity of at least 1 byte");
  }
  if (capacity_bytes > kPiB) {
    return TierError(name, "capacity " + std::to_string(capacity_bytes) +
                               " bytes is absurd; expected at most 1 PiB");
  }
  Status wm = watermarks.Validate();
  if (!wm.ok()) return TierError(name, std::string(wm.message()));
  KVTIER_RETURN_IF_ERROR(ValidatePolicies());
  if (type == "nvme" && path.empty()) {
    return TierError(name, "nvme tier has no path; expected a file or block device path");
  }
  Status backend;
  if (type == "nvme") backend = nvme.Validate();
  if (type == "redis") backend = redis.Validate();
  if (type == "remote") backend = remote.Validate();
  if (!backend.ok()) return TierError(name, std::string(backend.message()));
  return Status::Ok();
}

uint32_t ModelOptions::ElementBytes() const {
  if (dtype == "fp16" || dtype == "bf16") return 2;
  if (dtype == "fp8") return 1;
  if (dtype == "fp32") return 4;
  return 0;
}

KvLayout ModelOptions::Layout(uint32_t num_blocks) const {
  KvLayout l;
  l.kind = layout;
  l.num_layers = num_layers;
  l.num_blocks = num_blocks;
  l.block_tokens = block_tokens;
  l.num_kv_heads = num_kv_heads;
  l.head_size = head_size;
  l.elem_bytes = ElementBytes();
  return l;
}

NamespaceSpec ModelOptions::Namespace() const {
  NamespaceSpec spec;
  spec.model_id = model_id;
  spec.weights_revision = revision;
  spec.dtype = dtype;
  spec.layout_signature = Layout(1).Signature();
  spec.tp_rank = tp_rank;
  spec.tp_size = tp_size;
  spec.block_tokens = block_tokens;
  return spec;
}

Status ModelOptions::Validate() const {
  if (model_id.empty()) return Status::InvalidArgument("model id is empty; expected a model id");
  const std::pair<const char*, uint32_t> dims[] = {
      {"layers", num_layers},         {"kv_heads", num_kv_heads}, {"head_size", head_size},
      {"block_tokens", block_tokens}, {"tp_size", tp_size},
  };
  for (const auto& [field, value] : dims) {
    if (value == 0) {
      return Status::InvalidArgument(std::string("model ") + field +
                                     " is 0; expected a value of at least 1");
    }
  }
  if (ElementBytes() == 0) {
    return Status::InvalidArgument("unknown model dtype '" + dtype +
                                   "'; expected one of: fp16, bf16, fp8, fp32");
  }
  if (tp_rank >= tp_size) {
    return Status::InvalidArgument("model tp_rank " + std::to_string(tp_rank) +
                                   " is not below tp_size " + std::to_string(tp_size) +
                                   "; expected 0 <= tp_rank < tp_size");
  }
  if (CappedBlockBytes(*this) > kMaxBlockBytes) {
    return Status::InvalidArgument(
        "model block is larger than 1 GiB (layers * planes (2, or 1 for mla) * block_tokens * "
        "kv_heads * head_size * dtype bytes); expected a block of at most 1 GiB");
  }
  return Status::Ok();
}

Status ApplyModelPreset(std::string_view preset, ModelOptions* model) {
  for (const Preset& p : kPresets) {
    if (p.name != preset) continue;
    model->preset = std::string(p.name);
    model->model_id = std::string(p.model_id);
    model->revision = "main";
    model->dtype = std::string(p.dtype);
    model->num_layers = p.num_layers;
    model->num_kv_heads = p.num_kv_heads;
    model->head_size = p.head_size;
    model->block_tokens = p.block_tokens;
    model->hidden_size = p.hidden_size;
    return Status::Ok();
  }
  std::string names;
  for (const Preset& p : kPresets) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return Status::InvalidArgument("unknown model preset '" + std::string(preset) +
                                 "'; expected one of: " + names);
}

namespace internal {

std::vector<std::string> TierStores(const TierOptions& t) {
  std::vector<std::string> out;
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  if (t.type == "nvme") {
    const auto path = [](const std::string& p) {
      return std::filesystem::path(p).lexically_normal().string();
    };
    out.push_back("the nvme file " + path(t.path));
    out.push_back("the nvme index " +
                  path(t.nvme.index_path.empty() ? t.path + ".index" : t.nvme.index_path));
  } else if (t.type == "redis") {
    for (const std::string& s : t.servers) {
      out.push_back("redis " + lower(s) + " db " + std::to_string(t.redis.db) + " under prefix '" +
                    t.redis.key_prefix + "'");
    }
  } else if (t.type == "remote") {
    for (const std::string& s : t.servers) out.push_back("kvtier-memd " + lower(s));
  }
  return out;
}

std::optional<StoreClash> FindStoreClash(const TierOptions& t,
                                         std::unordered_map<std::string, std::string>& store_of) {
  for (const std::string& store : TierStores(t)) {
    const auto [it, fresh] = store_of.emplace(store, t.name);
    if (!fresh) return StoreClash{store, it->second, store.rfind("the nvme index ", 0) == 0};
  }
  return std::nullopt;
}

std::string StoreClashWhat(const std::string& tier, const StoreClash& clash) {
  return "tier '" + tier + "' stores in " + clash.store + ", as tier '" + clash.other_tier +
         "' does";
}

}  // namespace internal

Status RuntimeOptions::Validate() const {
  if (block_bytes == 0) {
    return Status::InvalidArgument("block_bytes is 0; expected the bytes of one host block");
  }
  if (tiers.empty()) return Status::InvalidArgument("no tiers; expected at least one tier");
  if (tiers.size() > kMaxTiers) {
    return Status::InvalidArgument(std::to_string(tiers.size()) + " tiers; expected at most " +
                                   std::to_string(kMaxTiers));
  }
  if (tiers[0].type != "host") {
    return Status::InvalidArgument("first tier '" + tiers[0].name + "' has type '" + tiers[0].type +
                                   "'; expected the first tier to be a host tier");
  }
  std::unordered_set<std::string> names;
  std::unordered_map<std::string, std::string> store_of;  // store -> the tier writing it
  for (const TierOptions& t : tiers) {
    KVTIER_RETURN_IF_ERROR(t.Validate());
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("duplicate tier name '" + t.name +
                                     "'; expected unique tier names");
    }
    if (auto clash = internal::FindStoreClash(t, store_of)) {
      return Status::InvalidArgument(internal::StoreClashWhat(t.name, *clash) + "; expected " +
                                     std::string(internal::kOwnStoreExpected));
    }
    // Every tier stores whole blocks: a smaller one could never take a write.
    // A host tier holds them in slots rounded up to 4 KiB.
    const uint64_t unit =
        t.type == "host" ? internal::HostArena::SlotStride(block_bytes) : block_bytes;
    if (t.capacity_bytes < unit) {
      return TierError(t.name, "capacity " + std::to_string(t.capacity_bytes) +
                                   " bytes is below one block of " + std::to_string(unit) +
                                   " bytes; expected a capacity of at least one block");
    }
    // The host arena's slot numbers (HostArena::Create refuses it too, at open).
    if (t.type == "host" && t.capacity_bytes / unit > internal::HostArena::kMaxSlots) {
      return TierError(t.name, "capacity " + std::to_string(t.capacity_bytes) + " bytes is " +
                                   std::to_string(t.capacity_bytes / unit) + " blocks of " +
                                   std::to_string(unit) + " bytes; expected at most " +
                                   std::to_string(internal::HostArena::kMaxSlots) +
                                   " blocks in one host tier");
    }
  }
  if (worker_threads == 0) {
    return Status::InvalidArgument("worker_threads is 0; expected at least 1");
  }
  if (worker_threads > kMaxWorkerThreads) {
    return Status::InvalidArgument("worker_threads " + std::to_string(worker_threads) +
                                   " is too many; expected 1 to " +
                                   std::to_string(kMaxWorkerThreads));
  }
  if (max_queued_requests == 0) {
    return Status::InvalidArgument("max_queued_requests is 0; expected at least 1");
  }
  if (mover.interval_ms == 0 || mover.interval_ms > kMaxMoverIntervalMs) {
    return Status::InvalidArgument("mover interval_ms " + std::to_string(mover.interval_ms) +
                                   " is out of range; expected 1 to " +
                                   std::to_string(kMaxMoverIntervalMs));
  }
  if (mover.batch_blocks == 0) {
    return Status::InvalidArgument("mover batch_blocks is 0; expected at least 1");
  }
  if (mover.batch_blocks > kMaxMoverBatchBlocks) {
    return Status::InvalidArgument("mover batch_blocks " + std::to_string(mover.batch_blocks) +
                                   " exceeds the tiers' batch limit; expected 1 to " +
                                   std::to_string(kMaxMoverBatchBlocks));
  }
  if (mover.shutdown_writeback_ms > kMaxMoverIntervalMs) {
    return Status::InvalidArgument(
        "mover shutdown_writeback_ms " + std::to_string(mover.shutdown_writeback_ms) +
        " is out of range; expected 0 (off) to " + std::to_string(kMaxMoverIntervalMs));
  }
  if (!(gpu_flops_per_s >= 0)) {
    return Status::InvalidArgument("gpu_flops_per_s is negative; expected a rate >= 0");
  }
  if (model_cost.layers == 0 || model_cost.hidden == 0) {
    return Status::InvalidArgument("model_cost has 0 layers or 0 hidden; expected both >= 1");
  }
  if (!(gpu_watermark >= 0 && gpu_watermark < 1)) {
    return Status::InvalidArgument("gpu_watermark is " + std::to_string(gpu_watermark) +
                                   "; expected a fraction in [0, 1)");
  }
  if (state_blocks > kMaxStateBlocks) {
    return Status::InvalidArgument("state_blocks " + std::to_string(state_blocks) +
                                   " is too many; expected 0 (no state checkpoints) to " +
                                   std::to_string(kMaxStateBlocks));
  }
  // A checkpoint is saved into the hub whole, beside its boundary block.
  const uint64_t hub_blocks = internal::HostArena::SlotsIn(tiers[0].capacity_bytes, block_bytes);
  if (state_blocks > 0 && hub_blocks <= state_blocks) {
    return TierError(tiers[0].name,
                     "holds " + std::to_string(hub_blocks) +
                         " blocks, too few for a state checkpoint of " +
                         std::to_string(state_blocks) +
                         " blocks and its boundary block; expected a capacity of at least " +
                         std::to_string(state_blocks + 1) + " blocks");
  }
  return Status::Ok();
}

}  // namespace kvtier
