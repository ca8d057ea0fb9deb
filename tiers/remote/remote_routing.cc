#include "tiers/remote/remote_routing.h"

namespace kvtier::internal::memd {
namespace {

// splitmix64 finaliser: every input bit affects every output bit, which is
// all rendezvous scoring needs.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t ServerId(std::string_view endpoint) {
  uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a, then mixed
  for (char c : endpoint) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  return Mix(h);
}

size_t PickServer(NamespaceId ns, const BlockKey& key, std::span<const uint64_t> server_ids) {
  const uint64_t k = Mix(key.hi ^ Mix(key.lo ^ Mix(ns.value)));
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < server_ids.size(); ++i) {
    const uint64_t score = Mix(k ^ server_ids[i]);
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

}  // namespace kvtier::internal::memd
