// The YAML keys only a tier of type redis accepts (beyond the common ones in
// tier_reader.cc), read into TierOptions::redis.
#include "config/backend_keys.h"

namespace kvtier::internal {

std::span<const std::string_view> RedisKeys() { return {}; }

Status ReadRedisKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  return Status::Ok();
}

}  // namespace kvtier::internal
