#include "tiers/redis/redis_routing.h"

#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

namespace kvtier::internal {

std::string RedisBlockKeyName(std::string_view prefix, NamespaceId ns, const BlockKey& key) {
  char ns_hex[17];
  std::snprintf(ns_hex, sizeof ns_hex, "%016llx", static_cast<unsigned long long>(ns.value));
  std::string name;
  name.reserve(prefix.size() + 50);
  name.append(prefix);
  name += ':';
  name.append(ns_hex, 16);
  name += ':';
  name += ToHex(key);
  return name;
}

uint16_t RedisCrc16(std::string_view data) {
  uint16_t crc = 0;
  for (char c : data) {
    crc ^= static_cast<uint16_t>(static_cast<uint8_t>(c)) << 8;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

uint16_t RedisHashSlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return RedisCrc16(key) % kRedisClusterSlots;
}

uint64_t RendezvousServerId(std::string_view endpoint) {
  return XXH3_64bits(endpoint.data(), endpoint.size());
}

size_t RendezvousPick(std::string_view key, std::span<const uint64_t> server_ids) {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < server_ids.size(); ++i) {
    const uint64_t score = XXH3_64bits_withSeed(key.data(), key.size(), server_ids[i]);
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

Result<std::vector<SlotRange>> ParseClusterSlots(const RespValue& reply,
                                                 std::string_view fallback_host) {
  using Kind = RespHead::Kind;
  auto bad = [](const std::string& what) {
    return Status::Corruption("CLUSTER SLOTS reply: " + what);
  };
  if (reply.kind != Kind::kArray) return bad("not an array");
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < reply.items.size(); ++i) {
    const RespValue& r = reply.items[i];
    if (r.kind != Kind::kArray || r.items.size() < 3 || r.items[0].kind != Kind::kInteger ||
        r.items[1].kind != Kind::kInteger) {
      return bad("range " + std::to_string(i) + " is malformed");
    }
    const RespValue& m = r.items[2];
    // A null host: the node's endpoint is "unknown" to the cluster (Redis 7
    // cluster-preferred-endpoint-type unknown-endpoint); reach it as the
    // node that answered.
    if (m.kind != Kind::kArray || m.items.size() < 2 ||
        (m.items[0].kind != Kind::kBulk && m.items[0].kind != Kind::kNil) ||
        m.items[1].kind != Kind::kInteger) {
      return bad("master of range " + std::to_string(i) + " is malformed");
    }
    const int64_t first = r.items[0].integer;
    const int64_t last = r.items[1].integer;
    const int64_t port = m.items[1].integer;
    if (first < 0 || last < first || last >= kRedisClusterSlots || port <= 0 || port > 65535) {
      return bad("range " + std::to_string(i) + " is out of bounds");
    }
    SlotRange range;
    range.first = static_cast<uint16_t>(first);
    range.last = static_cast<uint16_t>(last);
    if (m.items[0].kind == Kind::kBulk) range.master.host = m.items[0].text;
    if (range.master.host.empty()) range.master.host = std::string(fallback_host);
    range.master.port = static_cast<uint16_t>(port);
    ranges.push_back(std::move(range));
  }
  return ranges;
}

namespace {

// Splits `text` at every `sep`, empty fields included.
std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t at = text.find(sep);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return out;
    text.remove_prefix(at + 1);
  }
}

}  // namespace

Result<std::vector<RedisEndpoint>> ParseClusterNodesMasters(std::string_view text,
                                                            std::string_view fallback_host) {
  std::vector<RedisEndpoint> masters;
  size_t line_no = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    auto bad = [&](const std::string& what) {
      return Status::Corruption("CLUSTER NODES reply: line " + std::to_string(line_no) + " " +
                                what);
    };
    const std::vector<std::string_view> fields = Split(line, ' ');
    if (fields.size() < 8) return bad("has fewer than 8 fields");
    bool master = false, usable = true;
    for (std::string_view flag : Split(fields[2], ',')) {
      if (flag == "master") master = true;
      if (flag == "fail" || flag == "handshake" || flag == "noaddr") usable = false;
    }
    // Others may have no address yet (":0@0" with noaddr).
    if (!master || !usable) continue;
    // ip:port@cport, then ",hostname" (and, in newer servers, more
    // ",name=value" fields).
    const std::vector<std::string_view> addr = Split(fields[1], ',');
    const std::string_view ip_port = addr[0].substr(0, addr[0].find('@'));
    const size_t colon = ip_port.rfind(':');
    if (colon == std::string_view::npos) return bad("has no ip:port");
    auto port = ParseRedisEndpoint("-" + std::string(ip_port.substr(colon)));
    if (!port.ok()) return bad("has a bad port");
    std::string ip(ip_port.substr(0, colon));
    masters.push_back({ip.empty() ? std::string(fallback_host) : ip, port->port});
    if (addr.size() > 1 && !addr[1].empty() && addr[1].find('=') == std::string_view::npos) {
      masters.push_back({std::string(addr[1]), port->port});
    }
  }
  return masters;
}

bool ParseRedirect(std::string_view error, RedisEndpoint* target, bool* asking) {
  std::string_view rest;
  if (error.substr(0, 6) == "MOVED ") {
    *asking = false;
    rest = error.substr(6);
  } else if (error.substr(0, 4) == "ASK ") {
    *asking = true;
    rest = error.substr(4);
  } else {
    return false;
  }
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos) return false;
  std::string_view where = rest.substr(space + 1);
  // Exactly ":<port>" (no host) means the host of the node that answered;
  // a target such as "::ffff:10.0.0.5:7001" has an IPv6 host.
  const bool no_host = !where.empty() && where[0] == ':' && where.rfind(':') == 0;
  auto endpoint = ParseRedisEndpoint(no_host ? "-" + std::string(where) : std::string(where));
  if (!endpoint.ok()) return false;
  *target = std::move(endpoint).value();
  if (no_host) target->host.clear();
  return true;
}

OutputBufferLimit ParseNormalOutputBufferLimit(std::string_view text) {
  // "normal 0 0 0 replica 268435456 67108864 60 pubsub 33554432 8388608 60":
  // a class name, then hard bytes, soft bytes and soft seconds.
  std::vector<std::string_view> words;
  while (!text.empty()) {
    const size_t start = text.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const size_t end = std::min(text.find(' '), text.size());
    words.push_back(text.substr(0, end));
    text.remove_prefix(end);
  }
  OutputBufferLimit out;
  for (size_t i = 0; i + 3 < words.size(); i += 4) {
    if (words[i] != "normal") continue;
    auto number = [](std::string_view w) {
      uint64_t v = 0;
      const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
      return ec == std::errc() && end == w.data() + w.size() ? v : 0;
    };
    out.hard_bytes = number(words[i + 1]);
    out.soft_bytes = number(words[i + 2]);
  }
  return out;
}

}  // namespace kvtier::internal
