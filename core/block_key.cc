#include "kvtier/block_key.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <array>
#include <charconv>

#include "core/byte_writer.h"

namespace kvtier {
namespace {

// Domain tags keep token-derived, engine-hash-derived and state-part keys apart.
constexpr uint8_t kTagTokens = 'T';
constexpr uint8_t kTagEngineHash = 'E';
constexpr uint8_t kTagNamespace = 'N';
constexpr uint8_t kTagStatePart = 'S';

void PutParent(internal::ByteWriter& w, NamespaceId ns, const BlockKey* parent) {
  w.U64(ns.value);
  w.U8(parent != nullptr ? 1 : 0);
  w.U64(parent ? parent->hi : 0);
  w.U64(parent ? parent->lo : 0);
}

}  // namespace

Status NamespaceSpec::Validate() const {
  if (model_id.empty()) return Status::InvalidArgument("namespace: model_id is empty");
  if (dtype.empty()) return Status::InvalidArgument("namespace: dtype is empty");
  if (tp_size == 0) return Status::InvalidArgument("namespace: tp_size must be >= 1");
  if (tp_rank >= tp_size) return Status::InvalidArgument("namespace: tp_rank must be < tp_size");
  if (block_tokens == 0) return Status::InvalidArgument("namespace: block_tokens must be >= 1");
  return Status::Ok();
}

NamespaceId ComputeNamespaceId(const NamespaceSpec& spec) {
  internal::ByteWriter w;
  w.U8(kTagNamespace);
  w.Str(spec.model_id);
  w.Str(spec.weights_revision);
  w.Str(spec.dtype);
  w.Str(spec.layout_signature);
  w.U32(spec.tp_rank);
  w.U32(spec.tp_size);
  w.U32(spec.block_tokens);
  auto d = w.data();
  return NamespaceId{XXH3_64bits(d.data(), d.size())};
}

std::string ToHex(const BlockKey& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(key.hi >> (4 * i)) & 0xF];
    out[31 - i] = kDigits[(key.lo >> (4 * i)) & 0xF];
  }
  return out;
}

Result<BlockKey> BlockKeyFromHex(std::string_view hex) {
  if (hex.size() != 32) {
    return Status::InvalidArgument("block key hex must be 32 digits, got " +
                                   std::to_string(hex.size()));
  }
  BlockKey k;
  auto parse = [](std::string_view s, uint64_t& v) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
    return ec == std::errc() && p == s.data() + s.size();
  };
  if (!parse(hex.substr(0, 16), k.hi) || !parse(hex.substr(16), k.lo)) {
    return Status::InvalidArgument("block key hex has a non-hex digit: " + std::string(hex));
  }
  return k;
}

std::string_view HashAlgorithmName(HashAlgorithm algo) {
  return algo == HashAlgorithm::kSha256 ? "sha256" : "xxh3_128";
}

Result<HashAlgorithm> ParseHashAlgorithm(std::string_view name) {
  if (name == "xxh3_128" || name == "xxh3") return HashAlgorithm::kXxh3_128;
  if (name == "sha256") return HashAlgorithm::kSha256;
  return Status::InvalidArgument("unknown hash algorithm '" + std::string(name) +
                                 "' (expected xxh3_128 or sha256)");
}

BlockKey KeyHasher::Digest(std::span<const std::byte> input) const {
  if (algo_ == HashAlgorithm::kSha256) {
    std::array<unsigned char, 32> md{};
    unsigned int len = 0;
    EVP_Digest(input.data(), input.size(), md.data(), &len, EVP_sha256(), nullptr);
    auto* p = reinterpret_cast<const std::byte*>(md.data());
    return BlockKey{internal::LoadLe(p, 8), internal::LoadLe(p + 8, 8)};
  }
  XXH128_hash_t h = XXH3_128bits(input.data(), input.size());
  return BlockKey{h.high64, h.low64};
}

BlockKey KeyHasher::Next(const BlockKey* parent, std::span<const int32_t> tokens,
                         std::span<const std::byte> extra) const {
  internal::ByteWriter w;
  w.Reserve(64 + tokens.size() * 4 + extra.size());
  w.U8(kTagTokens);
  PutParent(w, ns_, parent);
  w.U64(tokens.size());
  for (int32_t t : tokens) w.U32(static_cast<uint32_t>(t));
  w.Bytes(extra);
  return Digest(w.data());
}

BlockKey KeyHasher::NextFromEngineHash(const BlockKey* parent,
                                       std::span<const std::byte> engine_hash) const {
  internal::ByteWriter w;
  w.U8(kTagEngineHash);
  PutParent(w, ns_, parent);
  w.Bytes(engine_hash);
  return Digest(w.data());
}

BlockKey KeyHasher::StatePart(const BlockKey& boundary, uint32_t part) const {
  internal::ByteWriter w;
  w.U8(kTagStatePart);
  PutParent(w, ns_, &boundary);
  w.U32(part);
  return Digest(w.data());
}

std::vector<BlockKey> KeyHasher::Chain(std::span<const int32_t> tokens, uint32_t block_tokens,
                                       std::span<const std::byte> extra) const {
  std::vector<BlockKey> keys;
  if (block_tokens == 0) return keys;
  keys.reserve(tokens.size() / block_tokens);
  for (size_t off = 0; off + block_tokens <= tokens.size(); off += block_tokens) {
    const BlockKey* parent = keys.empty() ? nullptr : &keys.back();
    keys.push_back(Next(parent, tokens.subspan(off, block_tokens), extra));
  }
  return keys;
}

}  // namespace kvtier
