// The YAML keys only a tier of type redis accepts (beyond the common ones in
// tier_reader.cc), read into TierOptions::redis.
#include <array>

#include "config/backend_keys.h"
#include "config/config_values.h"

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 9> kRedisKeys = {
    "user",          "password",    "db",     "key_prefix", "ttl_s", "connect_timeout_ms",
    "op_timeout_ms", "connections", "cluster"};

Status ReadTimeouts(const ConfigNode& node, const std::string& path, RedisTierOptions* r) {
  if (const ConfigNode* p = node.Find("ttl_s")) {
    KVTIER_RETURN_IF_ERROR(ReadUint(*p, path + ".ttl_s", 0, 10ull * 365 * 86400, &r->ttl_s));
  }
  if (const ConfigNode* p = node.Find("connect_timeout_ms")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".connect_timeout_ms", 1, &r->connect_timeout_ms));
  }
  if (const ConfigNode* p = node.Find("op_timeout_ms")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".op_timeout_ms", 1, &r->op_timeout_ms));
  }
  return Status::Ok();
}

}  // namespace

std::span<const std::string_view> RedisKeys() { return kRedisKeys; }

Status ReadRedisKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  RedisTierOptions& r = t->redis;
  if (const ConfigNode* p = node.Find("user")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, path + ".user", &r.user));
  }
  if (const ConfigNode* p = node.Find("password")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, path + ".password", &r.password));
  }
  if (const ConfigNode* p = node.Find("db")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".db", 0, &r.db));
  }
  if (const ConfigNode* p = node.Find("key_prefix")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, path + ".key_prefix", &r.key_prefix));
  }
  KVTIER_RETURN_IF_ERROR(ReadTimeouts(node, path, &r));
  if (const ConfigNode* p = node.Find("connections")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".connections", 1, &r.connections));
    if (r.connections > 64) {
      return NodeError(p->where, path + ".connections is " + p->text, "1 to 64");
    }
  }
  if (const ConfigNode* p = node.Find("cluster")) {
    KVTIER_RETURN_IF_ERROR(ReadBool(*p, path + ".cluster", &r.cluster));
  }
  Status s = r.Validate();
  if (!s.ok())
    return Status::InvalidArgument(node.where + ": " + path + ": " + std::string(s.message()));
  return Status::Ok();
}

}  // namespace kvtier::internal
