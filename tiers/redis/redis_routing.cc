#include "tiers/redis/redis_routing.h"

#include <hiredis/hiredis.h>
#include <xxhash.h>

#include <cstdio>

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

Result<std::vector<SlotRange>> ParseClusterSlots(const redisReply* reply,
                                                 std::string_view fallback_host) {
  auto bad = [](const std::string& what) {
    return Status::Corruption("CLUSTER SLOTS reply: " + what);
  };
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) return bad("not an array");
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* r = reply->element[i];
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
      return bad("range " + std::to_string(i) + " is malformed");
    }
    const redisReply* m = r->element[2];
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
        m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER) {
      return bad("master of range " + std::to_string(i) + " is malformed");
    }
    const long long first = r->element[0]->integer;
    const long long last = r->element[1]->integer;
    const long long port = m->element[1]->integer;
    if (first < 0 || last < first || last >= kRedisClusterSlots || port <= 0 || port > 65535) {
      return bad("range " + std::to_string(i) + " is out of bounds");
    }
    SlotRange range;
    range.first = static_cast<uint16_t>(first);
    range.last = static_cast<uint16_t>(last);
    range.master.host = std::string(m->element[0]->str, m->element[0]->len);
    if (range.master.host.empty()) range.master.host = std::string(fallback_host);
    range.master.port = static_cast<uint16_t>(port);
    ranges.push_back(std::move(range));
  }
  return ranges;
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
  auto endpoint = ParseRedisEndpoint(rest.substr(space + 1));
  if (!endpoint.ok()) return false;
  *target = std::move(endpoint).value();
  return true;
}

}  // namespace kvtier::internal
