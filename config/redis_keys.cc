// The YAML keys only a tier of type redis accepts (beyond the common ones in
// tier_reader.cc), read into TierOptions::servers and TierOptions::redis.
// Each value is checked where it is written, with the limits
// RedisTierOptions::Validate applies.
#include <array>

#include "config/backend_keys.h"
#include "config/config_values.h"

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 16> kRedisKeys = {"servers",
                                                         "shared",
                                                         "user",
                                                         "password",
                                                         "db",
                                                         "key_prefix",
                                                         "ttl_s",
                                                         "connect_timeout_ms",
                                                         "op_timeout_ms",
                                                         "connections",
                                                         "cluster",
                                                         "tls",
                                                         "tls_ca_file",
                                                         "tls_cert_file",
                                                         "tls_key_file",
                                                         "tls_server_name"};

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

// user and password: both or neither; empty means the default user / no AUTH.
Status ReadAuth(const ConfigNode& node, const std::string& path, RedisTierOptions* r) {
  const ConfigNode* user = node.Find("user");
  const ConfigNode* password = node.Find("password");
  if (user != nullptr) KVTIER_RETURN_IF_ERROR(ReadOptionalString(*user, path + ".user", &r->user));
  if (password != nullptr) {
    KVTIER_RETURN_IF_ERROR(ReadOptionalString(*password, path + ".password", &r->password));
  }
  if (!r->user.empty() && r->password.empty()) {
    return NodeError(Blame(password, user, node).where,
                     path + ".user '" + r->user + "' has no password", "both user and password");
  }
  return Status::Ok();
}

Status ReadKeyPrefix(const ConfigNode& p, const std::string& path, RedisTierOptions* r) {
  KVTIER_RETURN_IF_ERROR(ReadString(p, path + ".key_prefix", &r->key_prefix));
  for (char c : r->key_prefix) {
    if (c == ' ' || c == '\r' || c == '\n' || c == '\t') {
      return NodeError(p.where, path + ".key_prefix has white space",
                       "a prefix without spaces, such as kvtier");
    }
  }
  return Status::Ok();
}

// tls, and the tls_* keys that only go with it (a certificate with its key).
// An empty tls_* value is the same as none.
Status ReadTls(const ConfigNode& node, const std::string& path, RedisTierOptions* r) {
  const ConfigNode* tls = node.Find("tls");
  if (tls != nullptr) KVTIER_RETURN_IF_ERROR(ReadBool(*tls, path + ".tls", &r->tls));
  const std::pair<const char*, std::string*> files[] = {{"tls_ca_file", &r->tls_ca_file},
                                                        {"tls_cert_file", &r->tls_cert_file},
                                                        {"tls_key_file", &r->tls_key_file},
                                                        {"tls_server_name", &r->tls_server_name}};
  for (const auto& [name, out] : files) {
    const ConfigNode* p = node.Find(name);
    if (p == nullptr) continue;
    KVTIER_RETURN_IF_ERROR(ReadOptionalString(*p, path + "." + name, out));
    if (!r->tls && !out->empty()) {
      return NodeError(p->where, path + "." + name + " is set but tls is off",
                       "tls: true beside it, or no " + std::string(name));
    }
  }
  if (r->tls_cert_file.empty() != r->tls_key_file.empty()) {
    const bool cert = !r->tls_cert_file.empty();
    return NodeError(
        node.Find(cert ? "tls_cert_file" : "tls_key_file")->where,
        path + (cert ? ".tls_cert_file has no tls_key_file" : ".tls_key_file has no tls_cert_file"),
        "both tls_cert_file and tls_key_file, or neither");
  }
  return Status::Ok();
}

}  // namespace

std::span<const std::string_view> RedisKeys() { return kRedisKeys; }

Status ReadRedisKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  RedisTierOptions& r = t->redis;
  KVTIER_RETURN_IF_ERROR(ReadAuth(node, path, &r));
  const ConfigNode* db = node.Find("db");
  if (db != nullptr) KVTIER_RETURN_IF_ERROR(ReadU32(*db, path + ".db", 0, &r.db));
  if (const ConfigNode* p = node.Find("key_prefix")) {
    KVTIER_RETURN_IF_ERROR(ReadKeyPrefix(*p, path, &r));
  }
  KVTIER_RETURN_IF_ERROR(ReadTimeouts(node, path, &r));
  if (const ConfigNode* p = node.Find("connections")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".connections", 1, &r.connections, 64));
  }
  const ConfigNode* cluster = node.Find("cluster");
  if (cluster != nullptr) KVTIER_RETURN_IF_ERROR(ReadBool(*cluster, path + ".cluster", &r.cluster));
  if (r.cluster && r.db != 0) {
    // db is the value to change, unless an override just turned cluster on.
    const ConfigNode& at = cluster != nullptr && cluster->from_override ? *cluster : *db;
    return NodeError(at.where, path + ": redis db is " + std::to_string(r.db) + " with cluster",
                     "db 0 (a cluster has one database)");
  }
  KVTIER_RETURN_IF_ERROR(ReadTls(node, path, &r));
  KVTIER_RETURN_IF_ERROR(ReadServers(node, path, t));
  // A last net under the checks above.
  Status s = r.Validate();
  if (!s.ok()) {
    return Status::InvalidArgument(node.where + ": " + path + ": " + std::string(s.message()));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
