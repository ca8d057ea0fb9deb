// Uses the installed kvtier package through its public headers only: derives
// a namespace id and a chain of block keys, round-trips a key through hex and a
// block header through its wire format, and checks that corruption is caught.
// Prints what it computed; exits 1 on the first mismatch.
#include <array>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kvtier/block_header.h"
#include "kvtier/block_key.h"
#include "kvtier/build_config.h"
#include "kvtier/status.h"

namespace {

int failures = 0;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "MISMATCH: %s\n", what);
    ++failures;
  }
}

kvtier::NamespaceSpec ExampleSpec() {
  kvtier::NamespaceSpec spec;
  spec.model_id = "example/model-7b";
  spec.weights_revision = "rev1";
  spec.dtype = "bf16";
  spec.layout_signature = "nhd:L32:H8:D128";
  spec.block_tokens = 16;
  return spec;
}

// Returns the keys of three 16-token blocks after checking Chain() against
// Next() and the hex round trip.
std::vector<kvtier::BlockKey> DeriveKeys(kvtier::NamespaceId ns) {
  std::vector<int32_t> tokens(48);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(1000 + 7 * i);

  const kvtier::KeyHasher hasher(ns, kvtier::HashAlgorithm::kXxh3_128);
  std::vector<kvtier::BlockKey> keys = hasher.Chain(tokens, 16);
  Check(keys.size() == 3, "Chain() returns one key per full block");
  if (keys.size() != 3) return keys;

  const std::span<const int32_t> all(tokens);
  const kvtier::BlockKey first = hasher.Next(nullptr, all.subspan(0, 16));
  const kvtier::BlockKey second = hasher.Next(&first, all.subspan(16, 16));
  Check(first == keys[0] && second == keys[1], "Chain() equals chained Next()");
  Check(!(keys[0] == keys[1]), "different blocks have different keys");

  const kvtier::KeyHasher other_ns(kvtier::NamespaceId{ns.value + 1},
                                   kvtier::HashAlgorithm::kXxh3_128);
  Check(!(other_ns.Next(nullptr, all.subspan(0, 16)) == first),
        "another namespace gives another key");

  for (const kvtier::BlockKey& key : keys) {
    const std::string hex = kvtier::ToHex(key);
    kvtier::Result<kvtier::BlockKey> parsed = kvtier::BlockKeyFromHex(hex);
    Check(hex.size() == 32 && parsed.ok() && *parsed == key, "hex round trip");
  }
  kvtier::Result<kvtier::BlockKey> bad = kvtier::BlockKeyFromHex("not-a-key");
  Check(!bad.ok() && bad.status().code() == kvtier::StatusCode::kInvalidArgument,
        "malformed hex is InvalidArgument");
  return keys;
}

void CheckHeader(kvtier::NamespaceId ns, const kvtier::BlockKey& key) {
  std::vector<std::byte> payload(4096);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 31 + 5);

  const kvtier::BlockHeader header = kvtier::MakeBlockHeader(ns, key, payload);
  std::array<std::byte, kvtier::kBlockHeaderBytes> wire{};
  kvtier::EncodeBlockHeader(header, wire);

  kvtier::Result<kvtier::BlockHeader> decoded = kvtier::DecodeBlockHeader(wire);
  Check(decoded.ok(), "DecodeBlockHeader accepts what EncodeBlockHeader wrote");
  if (!decoded.ok()) return;
  Check(decoded->ns == ns && decoded->key == key && decoded->payload_bytes == payload.size() &&
            decoded->payload_checksum == header.payload_checksum,
        "decoded header fields");
  Check(kvtier::VerifyBlock(*decoded, ns, key, payload).ok(), "VerifyBlock on intact payload");
  std::printf("header %zu bytes, payload %" PRIu64 " bytes, checksum %016" PRIx64 "\n",
              wire.size(), decoded->payload_bytes, decoded->payload_checksum);

  payload[100] ^= std::byte{1};
  const kvtier::Status flipped = kvtier::VerifyBlock(*decoded, ns, key, payload);
  Check(flipped.code() == kvtier::StatusCode::kCorruption, "flipped payload bit is Corruption");
  std::printf("flipped payload: %s\n", flipped.ToString().c_str());

  wire[20] ^= std::byte{0x80};
  kvtier::Result<kvtier::BlockHeader> torn = kvtier::DecodeBlockHeader(wire);
  Check(!torn.ok() && torn.status().code() == kvtier::StatusCode::kCorruption,
        "flipped header bit is Corruption");
}

}  // namespace

int main() {
  std::printf("kvtier %s\n", KVTIER_VERSION_STRING);
  const kvtier::NamespaceSpec spec = ExampleSpec();
  Check(spec.Validate().ok(), "NamespaceSpec::Validate accepts a complete spec");
  const kvtier::Status no_model = kvtier::NamespaceSpec{}.Validate();
  Check(no_model.code() == kvtier::StatusCode::kInvalidArgument,
        "NamespaceSpec::Validate rejects an empty model id");
  const kvtier::NamespaceId ns = kvtier::ComputeNamespaceId(spec);
  Check(ns == kvtier::ComputeNamespaceId(spec), "namespace id is deterministic");
  std::printf("namespace %016" PRIx64 "\n", ns.value);

  const std::vector<kvtier::BlockKey> keys = DeriveKeys(ns);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::printf("key[%zu] %s\n", i, kvtier::ToHex(keys[i]).c_str());
  }
  if (!keys.empty()) CheckHeader(ns, keys.back());

  if (failures != 0) {
    std::fprintf(stderr, "FAILED: %d check(s)\n", failures);
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
