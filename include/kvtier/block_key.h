// Namespaces and block keys.
//
// A namespace is the model fingerprint (model id, weights revision, dtype, KV
// layout signature, TP rank/size, block_tokens) reduced to a 64-bit id. A
// BlockKey is a 128-bit chained prefix hash:
//   key[i] = H(namespace, key[i-1], tokens of block i, extra)
// so two sequences share key[i] only if they share every token up to the end of
// block i in the same namespace. Hashing uses an explicit little-endian
// encoding and no seed, so keys are identical across processes and hosts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/export.h"
#include "kvtier/status.h"

namespace kvtier {

struct NamespaceId {
  uint64_t value = 0;
  friend bool operator==(NamespaceId, NamespaceId) = default;
};

// What makes two caches interchangeable. Every field takes part in the id.
struct KVTIER_EXPORT NamespaceSpec {
  std::string model_id;          // e.g. "meta-llama/Llama-3.1-8B"
  std::string weights_revision;  // commit or tag of the weights
  std::string dtype;             // KV dtype: "fp16", "bf16", "fp8"
  std::string layout_signature;  // e.g. "nhd:L32:H8:D128"
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  uint32_t block_tokens = 16;

  Status Validate() const;
};

// Deterministic 64-bit id of a namespace (XXH3-64 over a canonical encoding).
KVTIER_EXPORT NamespaceId ComputeNamespaceId(const NamespaceSpec& spec);

struct BlockKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;
};

// 32 lower-case hex digits, hi first.
KVTIER_EXPORT std::string ToHex(const BlockKey& key);
KVTIER_EXPORT Result<BlockKey> BlockKeyFromHex(std::string_view hex);

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const noexcept {
    return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ULL));
  }
};

enum class HashAlgorithm : uint8_t {
  kXxh3_128 = 1,  // fast, default
  kSha256 = 2,    // for caches shared by tenants who must not forge collisions
};

KVTIER_EXPORT std::string_view HashAlgorithmName(HashAlgorithm algo);
KVTIER_EXPORT Result<HashAlgorithm> ParseHashAlgorithm(std::string_view name);

// Computes chained block keys for one namespace. Immutable; thread-safe.
class KVTIER_EXPORT KeyHasher {
 public:
  KeyHasher(NamespaceId ns, HashAlgorithm algo) : ns_(ns), algo_(algo) {}

  // Key of the block holding `tokens`, whose predecessor is `parent`
  // (nullptr for the first block). `extra` carries anything else that changes
  // the KV (LoRA id, multimodal hashes); it may be empty.
  BlockKey Next(const BlockKey* parent, std::span<const int32_t> tokens,
                std::span<const std::byte> extra = {}) const;

  // Key derived from an engine-supplied block hash (e.g. vLLM's block hash
  // bytes) instead of token ids. Distinct from Next() for the same bytes.
  BlockKey NextFromEngineHash(const BlockKey* parent, std::span<const std::byte> engine_hash) const;

  // Keys of every full block of `tokens` (a trailing partial block gets none),
  // each with `extra` as Next() takes it.
  std::vector<BlockKey> Chain(std::span<const int32_t> tokens, uint32_t block_tokens,
                              std::span<const std::byte> extra = {}) const;

  // Hybrid models: the key under which part `part` of the state checkpoint
  // at the end of block `boundary` is stored (Runtime::SaveState). Distinct
  // from every Next() and NextFromEngineHash() key, and from other parts.
  BlockKey StatePart(const BlockKey& boundary, uint32_t part) const;

  NamespaceId ns() const { return ns_; }
  HashAlgorithm algorithm() const { return algo_; }

 private:
  BlockKey Digest(std::span<const std::byte> input) const;

  NamespaceId ns_;
  HashAlgorithm algo_;
};

}  // namespace kvtier

template <>
struct std::hash<kvtier::BlockKey> : kvtier::BlockKeyHash {};
