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
Status CheckHostPort(const ConfigNode& node, const std::string& path, std::string_view text) {
  Result<HostPort> split = SplitHostPort(text, /*allow_port0=*/false);
  if (split.ok()) return Status::Ok();
  return NodeError(node.where, path + ": " + std::string(split.status().message()), kServerForm);
}

// A server listed twice would count twice: its slots in the remote tier's
// capacity check, its share of the keys in the routing.
Status CheckNoRepeats(const std::vector<const ConfigNode*>& items, const std::string& path,
                      const std::vector<std::string>& servers) {
  std::vector<std::pair<std::string, uint16_t>> seen;
  for (size_t i = 0; i < servers.size(); ++i) {
    Result<HostPort> hp = SplitHostPort(servers[i], /*allow_port0=*/false);
    if (!hp.ok()) continue;  // refused by CheckHostPort already
    std::string host = hp->host;
    std::transform(host.begin(), host.end(), host.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    auto same = std::find(seen.begin(), seen.end(), std::pair(host, hp->port));
    if (same != seen.end()) {
      const auto first = static_cast<size_t>(same - seen.begin());
      return NodeError(items[i]->where,
                       path + ".servers." + std::to_string(i) + ": '" + servers[i] +
                           "' is the server of entry " + std::to_string(first) + " ('" +
                           servers[first] + "') again",
                       "each server listed once");
    }
    seen.emplace_back(std::move(host), hp->port);
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
  KVTIER_RETURN_IF_ERROR(CheckNoRepeats(items, path, t->servers));
  if (const ConfigNode* shared = node.Find("shared")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*shared, path + ".shared", &t->shared));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
