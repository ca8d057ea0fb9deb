#include "tools/inspect/redis_tally.h"

#include <charconv>
#include <optional>
#include <span>

#include "kvtier/block_header.h"

namespace kvtier::inspect {
namespace {

bool IsHex(std::string_view s) {
  return s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// "<16 hex>:<32 hex>" after "<prefix>:", as the Redis tier names a block.
std::optional<internal::NsKey> ParseBlockName(std::string_view name, std::string_view prefix) {
  if (name.size() != prefix.size() + 1 + 16 + 1 + 32 || name.substr(0, prefix.size()) != prefix ||
      name[prefix.size()] != ':') {
    return std::nullopt;
  }
  std::string_view tail = name.substr(prefix.size() + 1);
  if (tail[16] != ':' || !IsHex(tail.substr(0, 16)) || !IsHex(tail.substr(17))) {
    return std::nullopt;
  }
  uint64_t ns = 0;
  std::from_chars(tail.data(), tail.data() + 16, ns, 16);
  auto key = BlockKeyFromHex(tail.substr(17));
  if (!key.ok()) return std::nullopt;
  return internal::NsKey{NamespaceId{ns}, *key};
}

// Bytes of `blocks` from `measured` over `sampled`: exact when all were.
uint64_t Scale(uint64_t measured, uint64_t sampled, uint64_t blocks) {
  if (sampled == 0) return 0;
  if (sampled == blocks) return measured;
  return static_cast<uint64_t>(static_cast<double>(measured) / static_cast<double>(sampled) *
                                   static_cast<double>(blocks) +
                               0.5);
}

}  // namespace

bool RedisTally::AddKey(std::string_view name) {
  std::optional<internal::NsKey> id = ParseBlockName(name, prefix_);
  if (!id) {
    ++other_keys_;
    return false;
  }
  if (!seen_.insert(*id).second) {
    ++repeats_;
    return false;
  }
  ++namespaces_[std::string(name.substr(prefix_.size() + 1, 16))].blocks;
  ++blocks_;
  if (sample_ != 0 && chosen_ >= sample_) return false;
  ++chosen_;
  return true;
}

void RedisTally::AddMeasured(std::string_view name, uint64_t strlen, std::string_view head) {
  const std::string ns(name.substr(prefix_.size() + 1, 16));
  RedisNsCount& n = namespaces_[ns];
  if (strlen == 0 || head.empty()) {  // no block is empty: the key is gone
    ++vanished_;
    --n.blocks;
    --blocks_;
    if (n.blocks == 0) namespaces_.erase(ns);
    return;
  }
  ++n.sampled;
  ++sampled_;
  n.value_bytes += strlen;
  value_bytes_ += strlen;
  // Bad as the tier finds it on a read: not this block's (namespace and
  // key), or a value whose length is not the header's.
  auto h = DecodeBlockHeader(std::as_bytes(std::span(head.data(), head.size())));
  const std::optional<internal::NsKey> id = ParseBlockName(name, prefix_);
  if (!h.ok() || !id || !VerifyBlockOwner(*h, id->ns, id->key).ok() ||
      strlen - kBlockHeaderBytes != h->payload_bytes) {
    ++bad_headers_;
    return;
  }
  n.payload_bytes += h->payload_bytes;
  payload_bytes_ += h->payload_bytes;
}

RedisEstimate RedisTally::Estimate() const {
  RedisEstimate e;
  e.estimated = sampled_ != blocks_;
  e.value_bytes = Scale(value_bytes_, sampled_, blocks_);
  e.payload_bytes = Scale(payload_bytes_, sampled_, blocks_);
  for (const auto& [id, n] : namespaces_) {
    RedisNsEstimate r{id, n.blocks, n.sampled, 0, 0, n.sampled != n.blocks};
    // A namespace the sample missed gets the mean block of the whole sample.
    const bool own = n.sampled > 0;
    r.value_bytes =
        own ? Scale(n.value_bytes, n.sampled, n.blocks) : Scale(value_bytes_, sampled_, n.blocks);
    r.payload_bytes = own ? Scale(n.payload_bytes, n.sampled, n.blocks)
                          : Scale(payload_bytes_, sampled_, n.blocks);
    e.namespaces.push_back(std::move(r));
  }
  return e;
}

}  // namespace kvtier::inspect
