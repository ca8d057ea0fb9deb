#include "config/backend_keys.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>
#include <vector>

#include "config/config_values.h"
#include "io/host_port.h"

namespace kvtier::internal {
namespace {

constexpr std::string_view kServerForm =
    "\"host:port\" or \"[IPv6]:port\" with a port from 1 to 65535";

// The runtime's own parser (SplitHostPort, which the redis and remote tiers
// open their servers with), so that an entry the config accepts is one the
// tier can open.
Result<HostPort> CheckHostPort(const ConfigNode& node, const std::string& path,
                               std::string_view text) {
  Result<HostPort> split = SplitHostPort(text, /*allow_port0=*/false);
  if (split.ok()) return split;
  return NodeError(node.where, path + ": " + std::string(split.status().message()), kServerForm);
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
  // A server listed twice would count twice: its slots in the remote tier's
  // capacity check, its share of the keys in the routing.
  std::vector<std::pair<std::string, uint16_t>> seen;  // lowercase host, port
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string at = path + ".servers." + std::to_string(i);
    KVTIER_ASSIGN_OR_RETURN(HostPort hp, CheckHostPort(*items[i], at, t->servers[i]));
    std::transform(hp.host.begin(), hp.host.end(), hp.host.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto same = std::find(seen.begin(), seen.end(), std::pair(hp.host, hp.port));
    if (same != seen.end()) {
      const auto first = static_cast<size_t>(same - seen.begin());
      return NodeError(items[i]->where,
                       at + ": '" + t->servers[i] + "' is the server of entry " +
                           std::to_string(first) + " ('" + t->servers[first] + "') again",
                       "each server listed once");
    }
    seen.emplace_back(std::move(hp.host), hp.port);
  }
  if (const ConfigNode* shared = node.Find("shared")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*shared, path + ".shared", &t->shared));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
