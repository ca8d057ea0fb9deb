// The YAML keys only a tier of type remote accepts (beyond the common ones in
// tier_reader.cc), read into TierOptions::servers and TierOptions::remote.
// Each value is checked where it is written, with the limits
// RemoteTierOptions::Validate applies.
#include <array>

#include "config/backend_keys.h"
#include "config/config_values.h"

namespace kvtier::internal {
namespace {

constexpr std::array<std::string_view, 9> kRemoteKeys = {
    "servers", "shared", "transport", "secret_file", "connections", "op_timeout_ms",
    "connect_timeout_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms"};

Status ReadTimes(const ConfigNode& node, const std::string& path, RemoteTierOptions* r) {
  const std::pair<const char*, uint32_t*> fields[] = {
      {"op_timeout_ms", &r->op_timeout_ms},
      {"connect_timeout_ms", &r->connect_timeout_ms},
      {"reconnect_backoff_ms", &r->reconnect_backoff_ms},
      {"reconnect_backoff_max_ms", &r->reconnect_backoff_max_ms}};
  for (const auto& [name, out] : fields) {
    if (const ConfigNode* p = node.Find(name)) {
      KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + "." + name, 1, out));
    }
  }
  if (r->reconnect_backoff_max_ms < r->reconnect_backoff_ms) {
    const ConfigNode& at =
        Blame(node.Find("reconnect_backoff_max_ms"), node.Find("reconnect_backoff_ms"), node);
    return NodeError(
        at.where,
        path + ".reconnect_backoff_max_ms " + std::to_string(r->reconnect_backoff_max_ms) +
            " is below reconnect_backoff_ms " + std::to_string(r->reconnect_backoff_ms),
        "reconnect_backoff_max_ms >= reconnect_backoff_ms");
  }
  return Status::Ok();
}

}  // namespace

std::span<const std::string_view> RemoteKeys() { return kRemoteKeys; }

Status ReadRemoteKeys(const ConfigNode& node, const std::string& path, TierOptions* t) {
  RemoteTierOptions& r = t->remote;
  if (const ConfigNode* p = node.Find("transport")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, path + ".transport", &r.transport));
    if (r.transport != "tcp" && r.transport != "rdma") {
      return NodeError(p->where, path + ".transport is '" + r.transport + "'", "tcp or rdma");
    }
  }
  if (const ConfigNode* p = node.Find("secret_file")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, path + ".secret_file", &r.secret_file));
  } else if (r.secret.empty()) {
    const ConfigNode* type = node.Find("type");
    return NodeError(type != nullptr && type->from_override ? type->where : node.where,
                     path + " is a remote tier without 'secret_file'",
                     "'secret_file: <file holding the kvtier-memd shared secret>'");
  }
  if (const ConfigNode* p = node.Find("connections")) {
    KVTIER_RETURN_IF_ERROR(ReadU32(*p, path + ".connections", 1, &r.connections));
    if (r.connections > 16) {
      return NodeError(p->where, path + ".connections is " + p->text, "1 to 16");
    }
  }
  KVTIER_RETURN_IF_ERROR(ReadTimes(node, path, &r));
  KVTIER_RETURN_IF_ERROR(ReadServers(node, path, t));
  // A last net under the checks above.
  Status s = r.Validate();
  if (!s.ok()) {
    return Status::InvalidArgument(node.where + ": " + path + ": " + std::string(s.message()));
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
