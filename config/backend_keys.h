// Per-backend tier keys. A tier map may hold the common keys (tier_reader.cc)
// plus the keys of its own type; each backend lists and reads its keys in
// config/<type>_keys.cc, so adding a backend key touches only that file. A
// key of another type is an error naming both types, never ignored.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "config/config_tree.h"
#include "kvtier/options.h"
#include "kvtier/status.h"

namespace kvtier::internal {

struct BackendKeys {
  std::string_view type;
  std::span<const std::string_view> (*keys)();
  // Reads the type's own keys from `node` (a tier map at dotted `path`).
  Status (*read)(const ConfigNode& node, const std::string& path, TierOptions* t);
};

// host, nvme, redis, remote. A type with no entry has no keys of its own.
std::span<const BackendKeys> BackendKeyTable();

std::span<const std::string_view> HostKeys();
Status ReadHostKeys(const ConfigNode& node, const std::string& path, TierOptions* t);
std::span<const std::string_view> NvmeKeys();
Status ReadNvmeKeys(const ConfigNode& node, const std::string& path, TierOptions* t);
std::span<const std::string_view> RedisKeys();
Status ReadRedisKeys(const ConfigNode& node, const std::string& path, TierOptions* t);
std::span<const std::string_view> RemoteKeys();
Status ReadRemoteKeys(const ConfigNode& node, const std::string& path, TierOptions* t);

// `servers` of a redis or remote tier: required, a non-empty list of
// "host:port" entries with a port from 1 to 65535, each checked where it is
// written. Host names are not resolved here. Also reads `shared` (a bool),
// which both types accept.
Status ReadServers(const ConfigNode& node, const std::string& path, TierOptions* t);

}  // namespace kvtier::internal
