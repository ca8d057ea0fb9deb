#include "config/backend_keys.h"

#include <array>

namespace kvtier::internal {

std::span<const BackendKeys> BackendKeyTable() {
  static const std::array<BackendKeys, 3> kTable = {{
      {"nvme", NvmeKeys, ReadNvmeKeys},
      {"redis", RedisKeys, ReadRedisKeys},
      {"remote", RemoteKeys, ReadRemoteKeys},
  }};
  return kTable;
}

}  // namespace kvtier::internal
