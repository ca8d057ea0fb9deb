// The YAML keys only a tier of type host accepts (beyond the common ones in
// tier_reader.cc), read into TierOptions.
#include <array>

#include "config/backend_keys.h"
#include "config/config_values.h"

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 2> kHostKeys = {"hugepages", "mlock"};

}  // namespace

std::span<const std::string_view> HostKeys() { return kHostKeys; }

Status ReadHostKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  if (const ConfigNode* p = node.Find("hugepages")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*p, path + ".hugepages", &t->hugepages));
  }
  if (const ConfigNode* p = node.Find("mlock")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*p, path + ".mlock", &t->mlock));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
