// A small simulated engine around a Runtime: a host-memory KV pool, a key
// chain per "request", and helpers to prefill, save, load and verify blocks.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kvtier/copy_engine.h"
#include "kvtier/runtime.h"
#include "kvtier/tier.h"

namespace kvtier::testing {

inline constexpr NamespaceId kTestNs{0xC0FFEE};

struct EngineSetup {
  KvLayout layout;                   // 4096-byte blocks
  std::shared_ptr<HostCopyEngine> engine;
};

EngineSetup MakeEngine(uint32_t pool_blocks = 64, KvLayoutKind kind = KvLayoutKind::kVllmNhd);

// Options for a runtime whose hub holds `hub_blocks` blocks; the mover
// thread is off (tests call TEST_RunMoverOnce) unless `mover_thread`.
RuntimeOptions MakeOptions(uint64_t block_bytes, uint64_t hub_blocks, bool mover_thread = false);
TierOptions LowerHostTier(std::string name, uint64_t block_bytes, uint64_t blocks);

// Keys of a request whose blocks carry the given ids (prefix-chained).
std::vector<BlockKey> ChainKeys(const std::vector<uint64_t>& ids);

class SimEngine {
 public:
  explicit SimEngine(Runtime* rt, HostCopyEngine* engine) : rt_(rt), engine_(engine) {}
  // Writes each key's content into engine blocks [first, first + n).
  void Prefill(const std::vector<BlockKey>& keys, uint32_t first_block);
  // Saves keys[from..] (blocks first_block + i), parent keys[from-1]; waits.
  Completion SaveFrom(const std::vector<BlockKey>& keys, size_t from, uint32_t first_block);
  // Loads keys into blocks first_block.. and waits.
  Completion Load(const std::vector<BlockKey>& keys, uint32_t first_block,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // True when engine block `block` holds exactly the content of `key`.
  bool Holds(uint32_t block, const BlockKey& key);
  // Zeroes the engine pool between steps.
  void Scrub(uint32_t first_block, uint32_t n);

 private:
  Runtime* rt_;
  HostCopyEngine* engine_;
};

}  // namespace kvtier::testing
