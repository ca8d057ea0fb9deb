// redis: the blocks a Redis tier stored, walked with SCAN MATCH
// "<prefix>:*" (never KEYS, which blocks the server). Every key is counted;
// the values of the first --sample keys (all by default) are measured with
// STRLEN and their 64-byte headers read with GETRANGE. Built when the Redis
// tier is.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kvtier/block_header.h"
#include "tiers/redis/redis_connection.h"
#include "tools/inspect/inspect.h"
#include "tools/inspect/json_text.h"
#include "tools/inspect/redis_tally.h"
#include "tools/inspect/redis_url.h"
#include "tools/inspect/table.h"

namespace kvtier::inspect {
namespace {

using internal::FromRedisContext;
using internal::FromRedisReply;
using internal::RedisReplyPtr;
using nlohmann::json;

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextFree>;

Result<RedisReplyPtr> Command(redisContext* c, std::string_view op, const char* fmt, auto... args) {
  RedisReplyPtr r(static_cast<redisReply*>(redisCommand(c, fmt, args...)));
  if (!r) return FromRedisContext(c, op);
  KVTIER_RETURN_IF_ERROR(FromRedisReply(r.get(), op));
  return r;
}

Result<ContextPtr> Connect(const RedisUrl& u, uint32_t timeout_ms) {
  const timeval tv{static_cast<time_t>(timeout_ms / 1000),
                   static_cast<suseconds_t>(timeout_ms % 1000 * 1000)};
  ContextPtr c(redisConnectWithTimeout(u.host.c_str(), u.port, tv));
  const std::string where = RedisUrlEndpoint(u);
  if (!c || c->err) return FromRedisContext(c.get(), "connect to " + where);
  if (redisSetTimeout(c.get(), tv) != REDIS_OK) return FromRedisContext(c.get(), "timeout");
  if (!u.password.empty()) {
    auto r = u.user.empty() ? Command(c.get(), "AUTH to " + where, "AUTH %s", u.password.c_str())
                            : Command(c.get(), "AUTH to " + where, "AUTH %s %s", u.user.c_str(),
                                      u.password.c_str());
    if (!r.ok()) return r.status();
  }
  if (u.db != 0) {
    auto r = Command(c.get(), "SELECT " + std::to_string(u.db), "SELECT %u", u.db);
    if (!r.ok()) return r.status();
  }
  return c;
}

// SCAN's MATCH is a glob: the prefix's own glob characters are escaped.
std::string MatchPattern(const std::string& prefix) {
  std::string p;
  for (char ch : prefix) {
    if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\') p += '\\';
    p += ch;
  }
  return p + ":*";
}

// Measures `keys` (chosen by the tally) in one pipeline.
Status Sample(redisContext* c, const std::vector<std::string>& keys, RedisTally& tally) {
  for (const std::string& key : keys) {
    redisAppendCommand(c, "STRLEN %b", key.data(), key.size());
    redisAppendCommand(c, "GETRANGE %b 0 %d", key.data(), key.size(),
                       static_cast<int>(kBlockHeaderBytes) - 1);
  }
  for (const std::string& key : keys) {
    RedisReplyPtr len, head;
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) return FromRedisContext(c, "STRLEN " + key);
    len.reset(static_cast<redisReply*>(raw));
    if (redisGetReply(c, &raw) != REDIS_OK) return FromRedisContext(c, "GETRANGE " + key);
    head.reset(static_cast<redisReply*>(raw));
    KVTIER_RETURN_IF_ERROR(FromRedisReply(len.get(), "STRLEN " + key));
    KVTIER_RETURN_IF_ERROR(FromRedisReply(head.get(), "GETRANGE " + key));
    if (len->type != REDIS_REPLY_INTEGER || head->type != REDIS_REPLY_STRING) {
      return Status::Corruption("STRLEN/GETRANGE " + key + ": unexpected reply type");
    }
    tally.AddMeasured(key, static_cast<uint64_t>(std::max<long long>(len->integer, 0)),
                      std::string_view(head->str, head->len));
  }
  return Status::Ok();
}

struct Scan {
  RedisTally tally;
  uint64_t scan_calls = 0;
};

Result<Scan> Walk(redisContext* c, const RedisFlags& f) {
  Scan scan{RedisTally(f.prefix, f.sample)};
  const std::string pattern = MatchPattern(f.prefix);
  std::string cursor = "0";
  do {
    KVTIER_ASSIGN_OR_RETURN(RedisReplyPtr r,
                            Command(c, "SCAN", "SCAN %s MATCH %b COUNT %d", cursor.c_str(),
                                    pattern.data(), pattern.size(), 1000));
    ++scan.scan_calls;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      return Status::Corruption("SCAN: unexpected reply shape");
    }
    cursor.assign(r->element[0]->str, r->element[0]->len);
    std::vector<std::string> measure;
    const redisReply* keys = r->element[1];
    for (size_t i = 0; i < keys->elements; ++i) {
      std::string name(keys->element[i]->str, keys->element[i]->len);
      if (scan.tally.AddKey(name)) measure.push_back(std::move(name));
    }
    if (!measure.empty()) KVTIER_RETURN_IF_ERROR(Sample(c, measure, scan.tally));
  } while (cursor != "0");
  return scan;
}

void Print(const Scan& s, const RedisFlags& f, const Output& o) {
  const RedisTally& t = s.tally;
  const RedisEstimate e = t.Estimate();
  json ns = json::array();
  Table table({"namespace", "blocks", "sampled", "value bytes", "payload bytes"});
  for (const RedisNsEstimate& n : e.namespaces) {
    ns.push_back({{"id", n.id},
                  {"blocks", n.blocks},
                  {"sampled", n.sampled},
                  {"estimated", n.estimated},
                  {"value_bytes", n.value_bytes},
                  {"payload_bytes", n.payload_bytes}});
    const char* mark = n.estimated ? " (est.)" : "";
    table.Row({n.id, std::to_string(n.blocks), std::to_string(n.sampled),
               std::to_string(n.value_bytes) + mark, std::to_string(n.payload_bytes) + mark});
  }
  if (o.json) {
    o.out << JsonText({{"url", RedactRedisUrl(f.url)},
                       {"prefix", f.prefix},
                       {"blocks", t.blocks()},
                       {"sampled", t.sampled()},
                       {"estimated", e.estimated},
                       {"value_bytes", e.value_bytes},
                       {"payload_bytes", e.payload_bytes},
                       {"other_keys", t.other_keys()},
                       {"bad_headers", t.bad_headers()},
                       {"vanished_keys", t.vanished()},
                       {"repeated_keys", t.repeats()},
                       {"scan_calls", s.scan_calls},
                       {"namespaces", ns}},
                      2)
          << "\n";
    return;
  }
  o.out << "prefix " << f.prefix << ": " << t.blocks() << " blocks, " << e.value_bytes
        << " value bytes, " << e.payload_bytes << " payload bytes"
        << (e.estimated ? " (estimated from a sample)" : "") << "\n"
        << "sampled " << t.sampled() << ", bad headers " << t.bad_headers() << ", other keys "
        << t.other_keys() << ", vanished while read " << t.vanished() << "\n\n"
        << table.Render();
}

}  // namespace

int RunRedis(const RedisFlags& f, const Output& o) {
  auto url = ParseRedisUrl(f.url);
  if (!url.ok()) {
    o.err << "kvtier-inspect redis: " << url.status().ToString() << "\n";
    return kExitUsage;
  }
  auto c = Connect(*url, f.timeout_ms);
  // SCAN walks the keys of the one server it is sent to: on a cluster node
  // that is a share of the tier, and its totals would look like the whole.
  if (c.ok()) {
    auto info = Command(c->get(), "INFO cluster", "INFO cluster");
    if (info.ok() && (*info)->type == REDIS_REPLY_STRING &&
        std::string_view((*info)->str, (*info)->len).find("cluster_enabled:1") !=
            std::string_view::npos) {
      o.err << "kvtier-inspect redis: " << RedactRedisUrl(f.url)
            << " is a Redis Cluster node, whose SCAN sees only its own keys; run kvtier-inspect "
               "redis against each master (CLUSTER NODES lists them) and add the figures\n";
      return kExitUsage;
    }
  }
  Result<Scan> scan = c.ok() ? Walk(c->get(), f) : Result<Scan>(c.status());
  if (!scan.ok()) {
    o.err << "kvtier-inspect redis: " << scan.status().ToString() << "\n";
    return kExitBad;
  }
  Print(*scan, f, o);
  return scan->tally.bad_headers() == 0 ? kExitOk : kExitBad;
}

}  // namespace kvtier::inspect
