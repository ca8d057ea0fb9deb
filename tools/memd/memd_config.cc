#include "tools/memd/memd_config.h"

#include <fstream>
#include <iterator>

#include "config/config_tree.h"
#include "config/config_values.h"

namespace kvtier::memd_tool {

using internal::ConfigNode;

Status LoadMemdConfig(const std::string& path, internal::memd::MemdServerOptions* o,
                      std::string* secret_file) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("cannot read config file '" + path + "'");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  KVTIER_ASSIGN_OR_RETURN(ConfigNode root, internal::ParseYamlTree(text, path));
  if (root.kind == ConfigNode::Kind::kNull) return Status::Ok();
  if (root.kind != ConfigNode::Kind::kMap) {
    return internal::NodeError(root.where, "the document is " + internal::DescribeNode(root),
                               "a map of kvtier-memd settings");
  }
  for (const ConfigNode& n : root.items) {
    const std::string& k = n.key;
    Status s;
    if (k == "listen") {
      s = internal::ReadString(n, k, &o->listen);
    } else if (k == "pool_size") {
      s = internal::ReadByteSize(n, k, &o->pool.pool_bytes);
    } else if (k == "slot_size") {
      s = internal::ReadByteSize(n, k, &o->pool.slot_bytes);
    } else if (k == "secret_file") {
      s = internal::ReadString(n, k, secret_file);
    } else if (k == "transport") {
      s = internal::ReadString(n, k, &o->transport);
    } else if (k == "hugepages") {
      s = internal::ReadBool(n, k, &o->pool.hugepages);
    } else if (k == "max_connections") {
      s = internal::ReadU32(n, k, 1, &o->max_connections);
    } else if (k == "lease_ms") {
      s = internal::ReadU32(n, k, 1, &o->lease_ms);
    } else if (k == "handshake_timeout_ms") {
      s = internal::ReadU32(n, k, 1, &o->handshake_timeout_ms);
    } else if (k == "put_timeout_ms") {
      s = internal::ReadU32(n, k, 1, &o->put_timeout_ms);
    } else if (k == "watermarks" && n.kind == ConfigNode::Kind::kMap) {
      for (const ConfigNode& w : n.items) {
        if (w.key == "high") {
          s = internal::ReadDouble(w, "watermarks.high", &o->pool.high_watermark);
        } else if (w.key == "low") {
          s = internal::ReadDouble(w, "watermarks.low", &o->pool.low_watermark);
        } else {
          s = internal::NodeError(w.key_where, "unknown key 'watermarks." + w.key + "'",
                                  "high or low");
        }
        if (!s.ok()) return s;
      }
    } else {
      s = internal::NodeError(n.key_where, "unknown key '" + k + "'",
                              "listen, pool_size, slot_size, secret_file, transport, hugepages, "
                              "watermarks, max_connections, lease_ms, handshake_timeout_ms or "
                              "put_timeout_ms");
    }
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace kvtier::memd_tool
