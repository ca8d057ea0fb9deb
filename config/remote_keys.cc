// The YAML keys only a tier of type remote accepts (beyond the common ones in
// tier_reader.cc), read into TierOptions::remote.
#include "config/backend_keys.h"

namespace kvtier::internal {

std::span<const std::string_view> RemoteKeys() { return {}; }

Status ReadRemoteKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  return Status::Ok();
}

}  // namespace kvtier::internal
