#include "tools/memd/memd_config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "config/config_tree.h"
#include "config/config_values.h"
#include "core/file_text.h"
#include "kvtier/block_header.h"
#include "tiers/remote/rdma_protocol.h"

namespace kvtier::memd_tool {
namespace {

using internal::ConfigNode;
using internal::NodeError;

// The file is a few lines; anything larger is not a memd config.
constexpr size_t kMaxConfigBytes = 1 << 20;

Result<std::string> ReadConfigText(const std::string& path) {
  std::string text;
  bool opened = false;
  const int err = internal::ReadFileText(path, kMaxConfigBytes, &text, &opened);
  if (err == 0) return text;
  return Status::InvalidArgument(path + ": cannot read config file: " +
                                 (err == EFBIG ? "larger than 1 MiB" : std::strerror(err)));
}

std::string Num(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

Status ReadWatermarks(const ConfigNode& n, internal::memd::MemdPoolOptions* pool) {
  constexpr std::string_view kExpected = "a map of high and/or low, like {high: 0.95, low: 0.85}";
  if (n.kind != ConfigNode::Kind::kMap) {
    // An empty value has no place of its own: point at its key.
    const std::string& where = n.kind == ConfigNode::Kind::kNull ? n.key_where : n.where;
    return NodeError(where, "watermarks is " + internal::DescribeNode(n), kExpected);
  }
  for (const ConfigNode& w : n.items) {
    Status s;
    if (w.key == "high") {
      s = internal::ReadDouble(w, "watermarks.high", &pool->high_watermark);
    } else if (w.key == "low") {
      s = internal::ReadDouble(w, "watermarks.low", &pool->low_watermark);
    } else {
      s = NodeError(w.key_where, "unknown key 'watermarks." + w.key + "'", "high or low");
    }
    if (!s.ok()) return s;
  }
  const double high = pool->high_watermark, low = pool->low_watermark;
  if (!(low > 0 && low < high && high <= 1)) {
    return NodeError(n.where, "watermarks are high " + Num(high) + ", low " + Num(low),
                     "0 < low < high <= 1");
  }
  return Status::Ok();
}

// The values MemdServerOptions::Validate would refuse, refused here with
// the place in the file.
Status CheckValue(const ConfigNode& n, const internal::memd::MemdServerOptions& o) {
  if (n.key == "slot_size" && (o.pool.slot_bytes <= kBlockHeaderBytes ||
                               o.pool.slot_bytes > kMaxBlockPayloadBytes + kBlockHeaderBytes)) {
    return NodeError(n.where, "slot_size is " + std::to_string(o.pool.slot_bytes) + " bytes",
                     "more than the 64-byte block header and at most 1GiB + 64");
  }
  if (n.key == "transport" && o.transport != "tcp" && o.transport != "rdma") {
    return NodeError(n.where, "transport '" + o.transport + "' is unknown", "tcp or rdma");
  }
  return Status::Ok();
}

}  // namespace

Status LoadMemdConfig(const std::string& path, internal::memd::MemdServerOptions* o,
                      std::string* secret_file) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadConfigText(path));
  KVTIER_ASSIGN_OR_RETURN(ConfigNode root, internal::ParseYamlTree(text, path));
  if (root.kind == ConfigNode::Kind::kNull) return Status::Ok();
  if (root.kind != ConfigNode::Kind::kMap) {
    return NodeError(root.where, "the document is " + internal::DescribeNode(root),
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
      s = internal::ReadU32(n, k, 1, &o->max_connections, internal::memd::kMaxConnectionsLimit);
    } else if (k == "lease_ms") {
      s = internal::ReadU32(n, k, 1, &o->lease_ms, internal::memd::kMaxLeaseMs);
    } else if (k == "handshake_timeout_ms") {
      s = internal::ReadU32(n, k, 1, &o->handshake_timeout_ms);
    } else if (k == "put_timeout_ms") {
      s = internal::ReadU32(n, k, 1, &o->put_timeout_ms);
    } else if (k == "reply_timeout_ms") {
      s = internal::ReadU32(n, k, 1, &o->reply_timeout_ms);
    } else if (k == "watermarks") {
      s = ReadWatermarks(n, &o->pool);
    } else {
      s = NodeError(n.key_where, "unknown key '" + k + "'",
                    "listen, pool_size, slot_size, secret_file, transport, hugepages, "
                    "watermarks, max_connections, lease_ms, handshake_timeout_ms, "
                    "put_timeout_ms or reply_timeout_ms");
    }
    if (s.ok()) s = CheckValue(n, *o);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace kvtier::memd_tool
