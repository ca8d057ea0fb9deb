// The YAML keys only a tier of type nvme accepts (beyond the common ones in
// tier_reader.cc: path, region_size), read into TierOptions::nvme.
#include <array>

#include "config/backend_keys.h"
#include "config/config_values.h"

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 9> kNvmeKeys = {
    "io_timeout_ms", "queue_depth", "max_queued",          "index_path",   "on_mismatch",
    "reclaim",       "direct_io",   "commit_every_blocks", "reinsert_hits"};

Status ReadU32Key(const ConfigNode& node, const std::string& path, std::string_view key,
                  uint32_t* out) {
  if (const ConfigNode* p = node.Find(std::string(key))) {
    return ReadU32(*p, path + "." + std::string(key), 1, out);
  }
  return Status::Ok();
}

Status ReadStringKey(const ConfigNode& node, const std::string& path, std::string_view key,
                     std::string* out) {
  if (const ConfigNode* p = node.Find(std::string(key))) {
    return ReadString(*p, path + "." + std::string(key), out);
  }
  return Status::Ok();
}

}  // namespace

std::span<const std::string_view> NvmeKeys() { return kNvmeKeys; }

Status ReadNvmeKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  NvmeTierOptions& n = t->nvme;
  KVTIER_RETURN_IF_ERROR(ReadU32Key(node, path, "io_timeout_ms", &n.io_timeout_ms));
  KVTIER_RETURN_IF_ERROR(ReadU32Key(node, path, "queue_depth", &n.queue_depth));
  KVTIER_RETURN_IF_ERROR(ReadU32Key(node, path, "max_queued", &n.max_queued));
  KVTIER_RETURN_IF_ERROR(ReadU32Key(node, path, "commit_every_blocks", &n.commit_every_blocks));
  if (const ConfigNode* p = node.Find("reinsert_hits")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".reinsert_hits", 0, &n.reinsert_hits));
  }
  KVTIER_RETURN_IF_ERROR(ReadStringKey(node, path, "index_path", &n.index_path));
  KVTIER_RETURN_IF_ERROR(ReadStringKey(node, path, "on_mismatch", &n.on_mismatch));
  KVTIER_RETURN_IF_ERROR(ReadStringKey(node, path, "reclaim", &n.reclaim));
  if (const ConfigNode* p = node.Find("direct_io")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*p, path + ".direct_io", &n.direct_io));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
