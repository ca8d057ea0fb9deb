#include "config/backend_keys.h"

#include <array>
#include <charconv>
#include <vector>

#include "config/config_values.h"

namespace kvtier::internal {
namespace {

constexpr std::string_view kServerForm = "\"host:port\" with a port from 1 to 65535";

Status CheckHostPort(const ConfigNode& node, const std::string& path, std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return NodeError(node.where, path + " is '" + std::string(text) + "', not host:port",
                     kServerForm);
  }
  const std::string_view port_text = text.substr(colon + 1);
  uint32_t port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port == 0 || port > 65535) {
    return NodeError(
        node.where,
        path + " '" + std::string(text) + "' has the bad port '" + std::string(port_text) + "'",
        kServerForm);
  }
  return Status::Ok();
}

}  // namespace

std::span<const BackendKeys> BackendKeyTable() {
  static const std::array<BackendKeys, 4> kTable = {{
      {"host", HostKeys, ReadHostKeys},
      {"nvme", NvmeKeys, ReadNvmeKeys},
      {"redis", RedisKeys, ReadRedisKeys},
      {"remote", RemoteKeys, ReadRemoteKeys},
  }};
  return kTable;
}

Status ReadServers(const ConfigNode& node, const std::string& path, TierOptions* t) {
  const ConfigNode* p = node.Find("servers");
  if (p == nullptr) {
    // An override that turned the tier into this type is the one to blame.
    const ConfigNode* type = node.Find("type");
    return NodeError(type != nullptr && type->from_override ? type->where : node.where,
                     path + " is a " + t->type + " tier without 'servers'",
                     "'servers: [\"host:port\", ...]'");
  }
  std::vector<const ConfigNode*> items;
  KVTIER_RETURN_IF_ERROR(
      ReadStringList(*p, path + ".servers", /*allow_single=*/false, &t->servers, &items));
  if (t->servers.empty()) {
    return NodeError(p->where, path + ".servers is an empty list",
                     "at least one \"host:port\" entry");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(
        CheckHostPort(*items[i], path + ".servers." + std::to_string(i), t->servers[i]));
  }
  if (const ConfigNode* shared = node.Find("shared")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*shared, path + ".shared", &t->shared));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
