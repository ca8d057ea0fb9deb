#include "config/config_reader.h"

#include <sys/un.h>

#include <array>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config/config_values.h"
#include "kvtier/block_key.h"
#include "kvtier/kv_layout.h"
#include "kvtier/tier.h"
#include "tiers/host/host_arena.h"
#include "tiers/nvme/nvme_format.h"

namespace kvtier::internal {

namespace {

constexpr std::array<std::string_view, 6> kRootKeys = {"model",   "hashing", "engine",
                                                       "runtime", "mover",   "tiers"};
constexpr std::array<std::string_view, 12> kModelKeys = {
    "preset",    "id",           "revision", "dtype",   "layers", "kv_heads",
    "head_size", "block_tokens", "tp_rank",  "tp_size", "layout", "hidden_size"};
constexpr std::array<std::string_view, 1> kHashingKeys = {"algorithm"};
constexpr std::array<std::string_view, 1> kEngineKeys = {"pool_blocks"};
constexpr std::array<std::string_view, 6> kRuntimeKeys = {"worker_threads", "max_queued_requests",
                                                          "admin_socket",   "gpu_watermark",
                                                          "gpu_flops",      "state_blocks"};
constexpr std::array<std::string_view, 3> kMoverKeys = {"interval_ms", "batch_blocks",
                                                        "shutdown_writeback_ms"};

// The limits RuntimeOptions::Validate enforces, checked here too so that an
// error points at the value.
constexpr uint64_t kMaxIntervalMs = 3600 * 1000;  // an idle mover still looks once an hour
constexpr uint64_t kMaxWorkerThreads = 256;
constexpr uint64_t kMaxStateBlocks = 4096;
constexpr uint64_t kMaxBatchBlocks = TierCapabilities{}.max_batch_blocks;  // every tier's limit

struct U32Field {
  std::string_view key;
  uint32_t min;
  uint32_t ModelOptions::*member;
};

constexpr std::array<U32Field, 7> kModelNumbers = {{
    {"layers", 1, &ModelOptions::num_layers},
    {"kv_heads", 1, &ModelOptions::num_kv_heads},
    {"head_size", 1, &ModelOptions::head_size},
    {"block_tokens", 1, &ModelOptions::block_tokens},
    {"tp_rank", 0, &ModelOptions::tp_rank},
    {"tp_size", 1, &ModelOptions::tp_size},
    {"hidden_size", 0, &ModelOptions::hidden_size},
}};

// The section under `key`, or null when it is absent or written empty
// ("mover:" with every line commented out): both mean "all defaults".
const ConfigNode* Section(const ConfigNode& root, std::string_view key) {
  const ConfigNode* node = root.Find(key);
  return node != nullptr && node->kind != ConfigNode::Kind::kNull ? node : nullptr;
}

// Errors about a whole section point at its key ("model:"), not at its first
// entry; list items and the root have no key and point at themselves.
Status Prefixed(const ConfigNode& node, std::string_view prefix, const Status& s) {
  const std::string& where = node.key_where.empty() ? node.where : node.key_where;
  return Status::InvalidArgument(where + ": " + std::string(prefix) + ": " +
                                 std::string(s.message()));
}

// The model fields a block's size depends on.
constexpr std::array<std::string_view, 7> kModelSizeKeys = {
    "preset", "dtype", "layers", "kv_heads", "head_size", "block_tokens", "layout"};

// The first of the model's size fields an override set, alone or by
// writing the whole section; null when none did, or when there is no model
// section.
const ConfigNode* SizeOverride(const ConfigNode* model) {
  if (model == nullptr) return nullptr;
  for (const ConfigNode& item : model->items) {
    for (std::string_view k : kModelSizeKeys) {
      if (item.from_override && item.key == k) return &item;
    }
  }
  return nullptr;
}

// The copy engines refuse a layout that does not fit the model (mla keeps
// one latent vector per token, so one kv head): reported at model.layout,
// or at the override of layout or kv_heads that made the pair wrong.
Status CheckModelLayout(const ConfigNode& node, const ModelOptions& m) {
  Status s = m.Layout(1).Validate();
  if (s.ok()) return Status::Ok();
  std::string_view why = s.message();
  constexpr std::string_view kPrefix = "kv layout: ";
  if (why.substr(0, kPrefix.size()) == kPrefix) why.remove_prefix(kPrefix.size());
  const ConfigNode& at = Blame(node.Find("layout"), node.Find("kv_heads"), node);
  return NodeError(at.where,
                   "model.layout '" + std::string(KvLayoutKindName(m.layout)) +
                       "' does not fit the model: " + std::string(why),
                   "a layout the copy engine accepts for this model (mla needs kv_heads: 1)");
}

// The width the prefill cost model assumes when hidden_size is 0, in 64
// bits: a block of at most 1 GiB (ModelOptions::Validate) caps kv_heads *
// head_size at 2^30, so the product reaches 2^33, past 32 bits.
uint64_t DefaultHiddenSize(const ModelOptions& m) {
  return uint64_t{m.num_kv_heads} * m.head_size * 8;
}

// ModelCost::hidden is 32 bits wide: a default width that does not fit is
// refused, never wrapped (2^32 wrapped to 0 read as "0 hidden"). Reported at
// the override of kv_heads or head_size, else at kv_heads.
Status CheckHiddenSize(const ConfigNode& node, const ModelOptions& m) {
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  const uint64_t hidden = DefaultHiddenSize(m);
  if (m.hidden_size != 0 || hidden <= kMax) return Status::Ok();
  const ConfigNode& at = Blame(node.Find("kv_heads"), node.Find("head_size"), node);
  return NodeError(at.where,
                   "model.hidden_size 0 stands for kv_heads * head_size * 8 = " +
                       std::to_string(hidden) + ", more than " + std::to_string(kMax),
                   "an explicit model.hidden_size from 1 to " + std::to_string(kMax) +
                       ", or kv_heads * head_size of at most " + std::to_string(kMax / 8));
}

Status ReadModelStrings(const ConfigNode& node, ModelOptions* m) {
  if (const ConfigNode* p = node.Find("preset")) {
    std::string name;
    KVTIER_RETURN_IF_ERROR(ReadString(*p, "model.preset", &name));
    Status s = ApplyModelPreset(name, m);
    if (!s.ok()) {
      return Status::InvalidArgument(p->where + ": model.preset: " + std::string(s.message()));
    }
  }
  if (const ConfigNode* p = node.Find("id")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, "model.id", &m->model_id));
  }
  if (const ConfigNode* p = node.Find("revision")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, "model.revision", &m->revision));
  }
  if (const ConfigNode* p = node.Find("dtype")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, "model.dtype", &m->dtype));
    if (m->ElementBytes() == 0) {
      return NodeError(p->where, "unknown model.dtype '" + m->dtype + "'",
                       "one of: fp16, bf16, fp8, fp32");
    }
  }
  if (const ConfigNode* p = node.Find("layout")) {
    std::string name;
    KVTIER_RETURN_IF_ERROR(ReadString(*p, "model.layout", &name));
    Result<KvLayoutKind> kind = ParseKvLayoutKind(name);
    if (!kind.ok()) {
      std::vector<std::string_view> names;
      for (KvLayoutKind k : kAllKvLayoutKinds) names.push_back(KvLayoutKindName(k));
      return NodeError(p->where, "unknown model.layout '" + name + "'",
                       "one of: " + JoinNames(names));
    }
    m->layout = *kind;
  }
  return Status::Ok();
}

// A preset named by an override (--set model.preset=X) is meant to take
// effect: a field the file sets to something else than X's value would
// silently keep the file's geometry under X's name, so that is refused,
// naming every such field. Fields set by overrides, or that agree, are fine.
Status CheckPresetOverride(const ConfigNode& node, const ModelOptions& m) {
  const ConfigNode* p = node.Find("preset");
  if (p == nullptr || !p->from_override) return Status::Ok();
  ModelOptions preset;
  if (!ApplyModelPreset(m.preset, &preset).ok()) return Status::Ok();
  const std::pair<std::string_view, std::pair<std::string, std::string>> fields[] = {
      {"id", {m.model_id, preset.model_id}},
      {"revision", {m.revision, preset.revision}},
      {"dtype", {m.dtype, preset.dtype}},
      {"layers", {std::to_string(m.num_layers), std::to_string(preset.num_layers)}},
      {"kv_heads", {std::to_string(m.num_kv_heads), std::to_string(preset.num_kv_heads)}},
      {"head_size", {std::to_string(m.head_size), std::to_string(preset.head_size)}},
      {"block_tokens", {std::to_string(m.block_tokens), std::to_string(preset.block_tokens)}},
      {"hidden_size", {std::to_string(m.hidden_size), std::to_string(preset.hidden_size)}},
  };
  std::string kept;
  for (const auto& [key, values] : fields) {
    const ConfigNode* f = node.Find(key);
    if (f == nullptr || f->from_override || values.first == values.second) continue;
    kept += (kept.empty() ? "" : ", ") + std::string("model.") + std::string(key) + " " +
            values.first + " at " + f->where + " (the preset's: " + values.second + ")";
  }
  if (kept.empty()) return Status::Ok();
  return NodeError(p->where, "the file's own fields override the preset: " + kept,
                   "those keys removed from the file, or set with --set as well");
}

// Preset first, then every explicit field overrides it.
Status ReadModel(const ConfigNode* node, ModelOptions* m) {
  if (node == nullptr) return Status::Ok();  // the defaults are the "tiny" preset
  KVTIER_RETURN_IF_ERROR(CheckMap(*node, "model", kModelKeys));
  KVTIER_RETURN_IF_ERROR(ReadModelStrings(*node, m));
  for (const U32Field& f : kModelNumbers) {
    if (const ConfigNode* p = node->Find(f.key)) {
      KVTIER_RETURN_IF_ERROR(ReadU32(*p, "model." + std::string(f.key), f.min, &(m->*f.member)));
    }
  }
  if (m->tp_rank >= m->tp_size) {
    const ConfigNode& at = Blame(node->Find("tp_rank"), node->Find("tp_size"), *node);
    return NodeError(at.where,
                     "model.tp_rank " + std::to_string(m->tp_rank) + " is not below tp_size " +
                         std::to_string(m->tp_size),
                     "0 <= tp_rank < tp_size");
  }
  // Whatever the field checks above do not cover (e.g. a block over 1 GiB),
  // blamed on an override of the model when there is one.
  Status s = m->Validate();
  if (!s.ok()) {
    if (const ConfigNode* set = SizeOverride(node)) {
      return Status::InvalidArgument(set->where + ": model: " + std::string(s.message()));
    }
    return Prefixed(*node, "model", s);
  }
  KVTIER_RETURN_IF_ERROR(CheckPresetOverride(*node, *m));
  KVTIER_RETURN_IF_ERROR(CheckHiddenSize(*node, *m));
  return CheckModelLayout(*node, *m);
}

// The engine's whole cache, pool_blocks blocks, must stay within the copy
// engines' limit (KvLayout::Validate): reported at engine.pool_blocks, or at
// the model override that made the blocks larger.
Status CheckPoolSize(const ConfigNode& root, const KvtierConfig& c) {
  if (c.model.Layout(c.gpu_pool_blocks).Validate().ok()) return Status::Ok();
  const ConfigNode* engine = Section(root, "engine");
  const ConfigNode* pool = engine != nullptr ? engine->Find("pool_blocks") : nullptr;
  const ConfigNode& at = Blame(pool, SizeOverride(Section(root, "model")), root);
  const uint64_t block_bytes = c.model.BlockBytes();
  constexpr uint64_t kMaxCacheBytes = uint64_t{1} << 48;
  return NodeError(
      at.where,
      "engine.pool_blocks " + std::to_string(c.gpu_pool_blocks) + " blocks of " +
          std::to_string(block_bytes) + " bytes exceed the engine cache limit of 2^48 bytes",
      "at most " + std::to_string(kMaxCacheBytes / block_bytes) + " blocks of this model");
}

Status ReadHashing(const ConfigNode* node, HashAlgorithm* algo) {
  if (node == nullptr) return Status::Ok();
  KVTIER_RETURN_IF_ERROR(CheckMap(*node, "hashing", kHashingKeys));
  const ConfigNode* p = node->Find("algorithm");
  if (p == nullptr) return Status::Ok();
  std::string name;
  KVTIER_RETURN_IF_ERROR(ReadString(*p, "hashing.algorithm", &name));
  // Only the canonical names; ParseHashAlgorithm also knows aliases.
  Result<HashAlgorithm> parsed = ParseHashAlgorithm(name);
  if (!parsed.ok() || HashAlgorithmName(*parsed) != name) {
    return NodeError(p->where, "unknown hashing.algorithm '" + name + "'", "xxh3_128 or sha256");
  }
  *algo = *parsed;
  return Status::Ok();
}

// Empty means no admin endpoint; a path must fit in sockaddr_un, which the
// admin server refuses otherwise.
Status ReadAdminSocket(const ConfigNode& node, std::string* out) {
  KVTIER_RETURN_IF_ERROR(ReadOptionalString(node, "runtime.admin_socket", out));
  constexpr size_t kMaxPath = sizeof(sockaddr_un::sun_path) - 1;
  if (out->size() > kMaxPath) {
    return NodeError(node.where,
                     "runtime.admin_socket is " + std::to_string(out->size()) +
                         " bytes long, too long for a Unix socket path",
                     "a path of at most " + std::to_string(kMaxPath) + " bytes, or \"\" for off");
  }
  return Status::Ok();
}

Status ReadSections(const ConfigNode& root, KvtierConfig* out) {
  if (const ConfigNode* engine = Section(root, "engine")) {
    KVTIER_RETURN_IF_ERROR(CheckMap(*engine, "engine", kEngineKeys));
    if (const ConfigNode* p = engine->Find("pool_blocks")) {
      KVTIER_RETURN_IF_ERROR(ReadU32(*p, "engine.pool_blocks", 1, &out->gpu_pool_blocks));
    }
  }
  RuntimeOptions& rt = out->runtime;
  if (const ConfigNode* runtime = Section(root, "runtime")) {
    KVTIER_RETURN_IF_ERROR(CheckMap(*runtime, "runtime", kRuntimeKeys));
    if (const ConfigNode* p = runtime->Find("worker_threads")) {
      uint64_t threads = 0;
      KVTIER_RETURN_IF_ERROR(
          ReadUint(*p, "runtime.worker_threads", 1, kMaxWorkerThreads, &threads));
      rt.worker_threads = static_cast<uint32_t>(threads);
    }
    if (const ConfigNode* p = runtime->Find("max_queued_requests")) {
      KVTIER_RETURN_IF_ERROR(
          ReadU32(*p, "runtime.max_queued_requests", 1, &rt.max_queued_requests));
    }
    if (const ConfigNode* p = runtime->Find("admin_socket")) {
      KVTIER_RETURN_IF_ERROR(ReadAdminSocket(*p, &rt.admin_socket));
    }
    if (const ConfigNode* p = runtime->Find("gpu_watermark")) {
      KVTIER_RETURN_IF_ERROR(ReadDouble(*p, "runtime.gpu_watermark", &rt.gpu_watermark));
      // Written as a negation so that NaN fails too, as in RuntimeOptions::Validate.
      if (!(rt.gpu_watermark >= 0 && rt.gpu_watermark < 1)) {
        return NodeError(p->where, "runtime.gpu_watermark is " + std::to_string(rt.gpu_watermark),
                         "a fraction in [0, 1)");
      }
    }
    if (const ConfigNode* p = runtime->Find("gpu_flops")) {
      KVTIER_RETURN_IF_ERROR(ReadDouble(*p, "runtime.gpu_flops", &rt.gpu_flops_per_s));
      if (rt.gpu_flops_per_s < 0) {
        return NodeError(p->where, "runtime.gpu_flops " + p->text + " is negative",
                         "the engine's prefill rate in FLOP/s, e.g. 4e14; 0 = unknown");
      }
    }
    if (const ConfigNode* p = runtime->Find("state_blocks")) {
      uint64_t blocks = 0;
      KVTIER_RETURN_IF_ERROR(ReadUint(*p, "runtime.state_blocks", 0, kMaxStateBlocks, &blocks));
      rt.state_blocks = static_cast<uint32_t>(blocks);
    }
  }
  if (const ConfigNode* mover = Section(root, "mover")) {
    KVTIER_RETURN_IF_ERROR(CheckMap(*mover, "mover", kMoverKeys));
    if (const ConfigNode* p = mover->Find("interval_ms")) {
      KVTIER_RETURN_IF_ERROR(
          ReadUint(*p, "mover.interval_ms", 1, kMaxIntervalMs, &rt.mover.interval_ms));
    }
    if (const ConfigNode* p = mover->Find("batch_blocks")) {
      uint64_t batch = 0;
      KVTIER_RETURN_IF_ERROR(ReadUint(*p, "mover.batch_blocks", 1, kMaxBatchBlocks, &batch));
      rt.mover.batch_blocks = static_cast<uint32_t>(batch);
    }
    if (const ConfigNode* p = mover->Find("shutdown_writeback_ms")) {
      KVTIER_RETURN_IF_ERROR(ReadUint(*p, "mover.shutdown_writeback_ms", 0, kMaxIntervalMs,
                                      &rt.mover.shutdown_writeback_ms));
    }
  }
  return Status::Ok();
}

// Every tier must hold at least one block of the model; reported at the
// tier's capacity, which ReadTiers has checked is present. An nvme region
// must hold one block as the store lays it out (header page + payload
// rounded up to 4 KiB: DiskBytes, inline in nvme_format.h, so no nvme tier
// code is linked) or the store refuses to open; reported at the region size,
// or at the tier when the default region is too small. When an override of
// the model's size, and none of the capacity or region size, made the block
// too large, the error names that override instead.
Status CheckTierSizes(const ConfigNode& root, const RuntimeOptions& rt) {
  const ConfigNode* model_set = SizeOverride(Section(root, "model"));
  const ConfigNode* list = root.Find("tiers");
  for (size_t i = 0; i < rt.tiers.size() && list != nullptr && i < list->items.size(); ++i) {
    const TierOptions& t = rt.tiers[i];
    const ConfigNode& item = list->items[i];
    // A host tier holds blocks in slots rounded up to 4 KiB.
    const bool host = t.type == "host";
    const uint64_t unit = host ? internal::HostArena::SlotStride(rt.block_bytes) : rt.block_bytes;
    const std::string as_held =
        unit == rt.block_bytes ? "" : ", " + std::to_string(unit) + " bytes in a host tier";
    if (t.capacity_bytes < unit) {
      const ConfigNode* cap = item.Find("capacity");
      return NodeError(Blame(cap, model_set, item).where,
                       "tiers." + t.name + ".capacity " + std::to_string(t.capacity_bytes) +
                           " bytes is below one block of the model (" +
                           std::to_string(rt.block_bytes) + " bytes" + as_held + ")",
                       "a capacity of at least one block");
    }
    if (host && t.capacity_bytes / unit > internal::HostArena::kMaxSlots) {
      const ConfigNode* cap = item.Find("capacity");
      return NodeError(Blame(cap, model_set, item).where,
                       "tiers." + t.name + ".capacity " + std::to_string(t.capacity_bytes) +
                           " bytes is " + std::to_string(t.capacity_bytes / unit) +
                           " blocks of the model (" + std::to_string(rt.block_bytes) + " bytes" +
                           as_held + "), more than one host tier holds",
                       "at most " + std::to_string(internal::HostArena::kMaxSlots) + " blocks");
    }
    const uint64_t block_disk = DiskBytes(rt.block_bytes);
    if (t.type == "nvme" && t.region_bytes < block_disk) {
      const ConfigNode* region = item.Find("region_size");
      return NodeError(Blame(region, model_set, item).where,
                       "tiers." + t.name + ".region_size " + std::to_string(t.region_bytes) +
                           " bytes cannot hold one block of the model (" +
                           std::to_string(rt.block_bytes) + " bytes, " +
                           std::to_string(block_disk) + " on disk with its header page)",
                       "a region_size of at least " + std::to_string(block_disk) + " bytes");
    }
    const uint64_t regions =
        t.type == "nvme" ? NvmeRegionCount(t.capacity_bytes, rt.block_bytes, t.region_bytes) : 0;
    if (regions > kMaxNvmeRegions) {
      const ConfigNode* region = item.Find("region_size");
      return NodeError(Blame(region, item.Find("capacity"), item).where,
                       "tiers." + t.name + ".capacity " + std::to_string(t.capacity_bytes) +
                           " bytes in regions of " + std::to_string(t.region_bytes) +
                           " bytes makes " + std::to_string(regions) + " regions, more than " +
                           std::to_string(kMaxNvmeRegions),
                       "a larger region_size (the default is 64MiB)");
    }
  }
  return Status::Ok();
}

// A state checkpoint is saved into the hub (the first tier) whole, beside
// its boundary block, as RuntimeOptions::Validate requires. Of the values
// involved, an override is blamed first (state_blocks, the hub's capacity,
// then the model's size), else runtime.state_blocks where the file sets it.
Status CheckStateBlocks(const ConfigNode& root, const RuntimeOptions& rt) {
  if (rt.state_blocks == 0 || rt.tiers.empty()) return Status::Ok();
  const TierOptions& hub = rt.tiers[0];
  const uint64_t blocks = internal::HostArena::SlotsIn(hub.capacity_bytes, rt.block_bytes);
  if (blocks > rt.state_blocks) return Status::Ok();
  const ConfigNode* runtime = Section(root, "runtime");
  const ConfigNode* state = runtime != nullptr ? runtime->Find("state_blocks") : nullptr;
  const ConfigNode* list = root.Find("tiers");
  const ConfigNode* cap =
      list != nullptr && !list->items.empty() ? list->items[0].Find("capacity") : nullptr;
  const ConfigNode* at = nullptr;
  for (const ConfigNode* n : {state, cap, SizeOverride(Section(root, "model"))}) {
    if (n != nullptr && n->from_override) {
      at = n;
      break;
    }
  }
  if (at == nullptr) at = state != nullptr ? state : &root;
  const uint64_t needed = uint64_t{rt.state_blocks} + 1;
  return NodeError(at->where,
                   "tiers." + hub.name + ".capacity " + std::to_string(hub.capacity_bytes) +
                       " bytes holds " + std::to_string(blocks) + " blocks of the model (" +
                       std::to_string(rt.block_bytes) +
                       " bytes), too few for a state checkpoint of runtime.state_blocks " +
                       std::to_string(rt.state_blocks) + " blocks and its boundary block",
                   "a capacity of at least " + std::to_string(needed) + " blocks (" +
                       std::to_string(needed * rt.block_bytes) + " bytes), or fewer state_blocks");
}

// The prefill cost of the configured model, for the policies.
ModelCost ModelCostOf(const ModelOptions& m) {
  ModelCost c;
  c.layers = m.num_layers;
  // CheckHiddenSize has refused a default width over 32 bits.
  c.hidden = m.hidden_size != 0 ? m.hidden_size : static_cast<uint32_t>(DefaultHiddenSize(m));
  c.kv_bytes_per_token = m.BlockBytes() / m.block_tokens;
  return c;
}

}  // namespace

Status ReadConfig(const ConfigNode& root, KvtierConfig* out) {
  KVTIER_RETURN_IF_ERROR(CheckMap(root, "the configuration", kRootKeys));
  KVTIER_RETURN_IF_ERROR(ReadModel(Section(root, "model"), &out->model));
  KVTIER_RETURN_IF_ERROR(ReadHashing(Section(root, "hashing"), &out->runtime.hash));
  KVTIER_RETURN_IF_ERROR(ReadSections(root, out));
  KVTIER_RETURN_IF_ERROR(CheckPoolSize(root, *out));
  KVTIER_RETURN_IF_ERROR(ReadTiers(root, &out->runtime.tiers));
  out->runtime.block_bytes = out->model.BlockBytes();
  KVTIER_RETURN_IF_ERROR(CheckTierSizes(root, out->runtime));
  KVTIER_RETURN_IF_ERROR(CheckStateBlocks(root, out->runtime));
  // An nvme store is bound to the namespace of the model it caches.
  for (TierOptions& t : out->runtime.tiers) {
    if (t.type == "nvme") t.nvme.store_namespace = ComputeNamespaceId(out->model.Namespace()).value;
  }
  out->runtime.block_tokens = out->model.block_tokens;
  out->runtime.model_cost = ModelCostOf(out->model);
  out->runtime.model_cost.state_bytes =
      uint64_t{out->runtime.state_blocks} * out->runtime.block_bytes;
  // A last net under the field checks: the options' own validation.
  Status s = out->runtime.Validate();
  if (!s.ok()) return Prefixed(root, "runtime", s);
  return Status::Ok();
}

std::vector<std::string> SectionKeyNames() {
  const std::pair<std::string_view, std::span<const std::string_view>> sections[] = {
      {"model", kModelKeys},
      {"hashing", kHashingKeys},
      {"engine", kEngineKeys},
      {"runtime", kRuntimeKeys},
      {"mover", kMoverKeys}};
  std::vector<std::string> names;
  for (const auto& [section, keys] : sections) {
    for (std::string_view k : keys) names.push_back(std::string(section) + "." + std::string(k));
  }
  return names;
}

}  // namespace kvtier::internal
