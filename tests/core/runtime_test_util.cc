#include "tests/core/runtime_test_util.h"

#include <cstring>

#include "tests/support/block_data.h"

namespace kvtier::testing {

EngineSetup MakeEngine(uint32_t pool_blocks, KvLayoutKind kind) {
  EngineSetup s;
  s.layout = KvLayout{.kind = kind, .num_layers = 2, .num_blocks = pool_blocks,
                      .block_tokens = 8, .num_kv_heads = 2, .head_size = 32, .elem_bytes = 2};
  auto engine = HostCopyEngine::Create(s.layout);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (engine.ok()) s.engine = std::move(engine).value();
  return s;
}

RuntimeOptions MakeOptions(uint64_t block_bytes, uint64_t hub_blocks, bool mover_thread) {
  RuntimeOptions o;
  o.block_bytes = block_bytes;
  TierOptions hub;
  hub.name = "host";
  hub.type = "host";
  hub.capacity_bytes = hub_blocks * block_bytes;
  hub.mlock = false;
  hub.hugepages = false;
  o.tiers.push_back(hub);
  o.mover.start_thread = mover_thread;
  o.mover.interval_ms = 5;
  o.worker_threads = 3;  // two for saves, one kept for loads
  return o;
}

TierOptions LowerHostTier(std::string name, uint64_t block_bytes, uint64_t blocks) {
  TierOptions t;
  t.name = std::move(name);
  t.type = "host";
  t.capacity_bytes = blocks * block_bytes;
  t.mlock = false;
  t.hugepages = false;
  return t;
}

std::vector<BlockKey> ChainKeys(const std::vector<uint64_t>& ids) {
  KeyHasher h(kTestNs, HashAlgorithm::kXxh3_128);
  std::vector<BlockKey> keys;
  for (uint64_t id : ids) {
    std::byte b[8];
    std::memcpy(b, &id, 8);
    keys.push_back(h.NextFromEngineHash(keys.empty() ? nullptr : &keys.back(), b));
  }
  return keys;
}

void SimEngine::Prefill(const std::vector<BlockKey>& keys, uint32_t first_block) {
  for (size_t i = 0; i < keys.size(); ++i) {
    auto bytes = BlockBytes(keys[i], engine_->layout().BlockBytes());
    ASSERT_TRUE(engine_->WriteBlock(first_block + static_cast<uint32_t>(i), bytes).ok());
  }
}

Completion SimEngine::SaveFrom(const std::vector<BlockKey>& keys, size_t from,
                               uint32_t first_block) {
  std::vector<uint32_t> blocks;
  for (size_t i = from; i < keys.size(); ++i) blocks.push_back(first_block + static_cast<uint32_t>(i));
  std::optional<BlockKey> parent;
  if (from > 0) parent = keys[from - 1];
  Completion c = rt_->Save(kTestNs, parent, std::span(keys).subspan(from), blocks);
  (void)c.Wait();
  return c;
}

Completion SimEngine::Load(const std::vector<BlockKey>& keys, uint32_t first_block,
                           std::chrono::milliseconds timeout) {
  std::vector<uint32_t> blocks;
  for (size_t i = 0; i < keys.size(); ++i) blocks.push_back(first_block + static_cast<uint32_t>(i));
  Completion c = rt_->Load(kTestNs, keys, blocks, timeout);
  (void)c.Wait();
  return c;
}

bool SimEngine::Holds(uint32_t block, const BlockKey& key) {
  std::vector<std::byte> got(engine_->layout().BlockBytes());
  if (!engine_->ReadBlock(block, got).ok()) return false;
  return got == BlockBytes(key, got.size());
}

void SimEngine::Scrub(uint32_t first_block, uint32_t n) {
  std::vector<std::byte> zero(engine_->layout().BlockBytes());
  for (uint32_t b = first_block; b < first_block + n; ++b) ASSERT_TRUE(engine_->WriteBlock(b, zero).ok());
}

}  // namespace kvtier::testing
