// The YAML keys only a tier of type nvme accepts (beyond the common ones in
// tier_reader.cc), read into TierOptions::path, region_bytes and nvme. Each
// value is checked where it is written, with the limits
// NvmeTierOptions::Validate and the store apply.
#include <array>

#include "config/backend_keys.h"
#include "config/config_values.h"
#include "tiers/nvme/nvme_format.h"

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 12> kNvmeKeys = {
    "path",          "region_size", "io_timeout_ms", "queue_depth",         "max_queued",
    "index_path",    "on_mismatch", "reclaim",       "commit_every_blocks", "commit_interval_ms",
    "reinsert_hits", "direct_io"};
constexpr uint64_t kMaxQueueDepth = 4096;
// The store's limits: whole 4 KiB pages (kNvmeAlign), offsets within 31 bits.
constexpr uint64_t kMaxRegionBytes = 2 * kGiB;

Status ReadU32Key(const ConfigNode& node, const std::string& path, std::string_view key,
                  uint32_t* out) {
  if (const ConfigNode* p = node.Find(std::string(key))) {
    return ReadU32(*p, path + "." + std::string(key), 1, out);
  }
  return Status::Ok();
}

// A string key whose value must be one of `names`; the message keeps the
// wording of NvmeTierOptions::Validate.
Status ReadChoiceKey(const ConfigNode& node, const std::string& path, std::string_view key,
                     std::span<const std::string_view> names, std::string* out) {
  const ConfigNode* p = node.Find(std::string(key));
  if (p == nullptr) return Status::Ok();
  KVTIER_RETURN_IF_ERROR(ReadString(*p, path + "." + std::string(key), out));
  for (std::string_view n : names) {
    if (n == *out) return Status::Ok();
  }
  return NodeError(p->where, path + ": nvme." + std::string(key) + " is '" + *out + "'",
                   "one of: " + JoinNames(names));
}

Status ReadPlacement(const ConfigNode& node, const std::string& path, TierOptions* t) {
  if (const ConfigNode* p = node.Find("path")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, path + ".path", &t->path));
  } else {
    // An override that turned the tier into nvme is the one to blame.
    const ConfigNode* type = node.Find("type");
    return NodeError(type != nullptr && type->from_override ? type->where : node.where,
                     path + " is an nvme tier without a 'path'", "'path: <file or block device>'");
  }
  if (const ConfigNode* p = node.Find("region_size")) {
    KVTIER_RETURN_IF_ERROR(ReadByteSize(*p, path + ".region_size", &t->region_bytes));
    if (t->region_bytes == 0 || t->region_bytes % kNvmeAlign != 0 ||
        t->region_bytes > kMaxRegionBytes) {
      return NodeError(p->where, path + ".region_size is " + p->text,
                       "a multiple of 4KiB from 4KiB to 2GiB, such as 64MiB");
    }
  }
  if (const ConfigNode* p = node.Find("index_path")) {
    KVTIER_RETURN_IF_ERROR(ReadOptionalString(*p, path + ".index_path", &t->nvme.index_path));
  }
  return Status::Ok();
}

}  // namespace

std::span<const std::string_view> NvmeKeys() { return kNvmeKeys; }

Status ReadNvmeKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  NvmeTierOptions& n = t->nvme;
  KVTIER_RETURN_IF_ERROR(ReadPlacement(node, path, t));
  KVTIER_RETURN_IF_ERROR(ReadU32Key(node, path, "io_timeout_ms", &n.io_timeout_ms));
  if (const ConfigNode* p = node.Find("queue_depth")) {
    uint64_t depth = 0;
    KVTIER_RETURN_IF_ERROR(ReadUint(*p, path + ".queue_depth", 1, kMaxQueueDepth, &depth));
    n.queue_depth = static_cast<uint32_t>(depth);
  }
  KVTIER_RETURN_IF_ERROR(ReadU32Key(node, path, "max_queued", &n.max_queued));
  KVTIER_RETURN_IF_ERROR(ReadU32Key(node, path, "commit_every_blocks", &n.commit_every_blocks));
  KVTIER_RETURN_IF_ERROR(ReadU32Key(node, path, "commit_interval_ms", &n.commit_interval_ms));
  if (const ConfigNode* p = node.Find("reinsert_hits")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".reinsert_hits", 0, &n.reinsert_hits));
  }
  constexpr std::array<std::string_view, 2> kMismatch = {"refuse", "wipe"};
  constexpr std::array<std::string_view, 2> kReclaim = {"fifo", "greedy"};
  KVTIER_RETURN_IF_ERROR(ReadChoiceKey(node, path, "on_mismatch", kMismatch, &n.on_mismatch));
  KVTIER_RETURN_IF_ERROR(ReadChoiceKey(node, path, "reclaim", kReclaim, &n.reclaim));
  if (const ConfigNode* p = node.Find("direct_io")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*p, path + ".direct_io", &n.direct_io));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
