// The YAML keys only a tier of type nvme accepts (beyond the common ones in
// tier_reader.cc), read into TierOptions::nvme.
#include "config/backend_keys.h"

namespace kvtier::internal {

std::span<const std::string_view> NvmeKeys() { return {}; }

Status ReadNvmeKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  return Status::Ok();
}

}  // namespace kvtier::internal
