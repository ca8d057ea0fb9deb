// The C API's engine path on the host stand-in: keys from token ids equal the
// C++ hasher's, saves, lookups and loads round trip bytes exactly, misses are
// per block, layers are reported in order, and calls from several threads
// stay correct.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "capi/c_api_internal.h"
#include "kvtier/block_key.h"
#include "kvtier/config.h"
#include "tests/capi/c_api_test_util.h"

namespace kvtier::testing {
namespace {

KeyHasher CppHasher() {
  Result<KvtierConfig> config = ParseConfig(CapiConfig(), "t.yaml");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return KeyHasher(ComputeNamespaceId(config->model.Namespace()), config->runtime.hash);
}

bool SameKey(const kvtier_key& c, const BlockKey& k) { return c.hi == k.hi && c.lo == k.lo; }

TEST(CApiTest, KeysAreTheCppHashersKeys) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const KeyHasher hasher = CppHasher();
  EXPECT_EQ(kvtier_namespace(rt.get()), hasher.ns().value);
  EXPECT_EQ(kvtier_block_tokens(rt.get()), 16u);
  EXPECT_EQ(kvtier_engine_blocks(rt.get()), 16u);  // engine.pool_blocks
  EXPECT_EQ(kvtier_state_blocks(rt.get()), 0u);    // runtime.state_blocks
  EXPECT_EQ(kvtier_block_bytes(rt.get()),
            8192u);  // 4 layers x K,V x 16 tokens x 2 heads x 16 x 2 B

  std::vector<int32_t> tokens(3 * 16 + 7);  // three full blocks and a partial one
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 13 + 5);
  const std::vector<BlockKey> expected = hasher.Chain(tokens, 16);
  ASSERT_EQ(expected.size(), 3u);
  std::vector<kvtier_key> keys(4);
  size_t count = 0;
  ASSERT_EQ(
      kvtier_key_chain(rt.get(), nullptr, tokens.data(), tokens.size(), keys.data(), 4, &count),
      KVTIER_OK);
  ASSERT_EQ(count, 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(SameKey(keys[i], expected[i])) << i;

  // Continuing a parent gives the rest of the same chain.
  std::vector<kvtier_key> rest(2);
  ASSERT_EQ(kvtier_key_chain(rt.get(), &keys[0], tokens.data() + 16, 32, rest.data(), 2, &count),
            KVTIER_OK);
  EXPECT_EQ(count, 2u);
  EXPECT_TRUE(SameKey(rest[0], expected[1]));
  EXPECT_TRUE(SameKey(rest[1], expected[2]));

  // Too small an array: the count to size it, the keys that fit, and an error.
  kvtier_key one{};
  EXPECT_EQ(kvtier_key_chain(rt.get(), nullptr, tokens.data(), tokens.size(), &one, 1, &count),
            KVTIER_RESOURCE_EXHAUSTED);
  EXPECT_EQ(count, 3u);
  EXPECT_TRUE(SameKey(one, expected[0]));
  EXPECT_STREQ(kvtier_last_error(), "resource_exhausted: 3 keys do not fit in capacity 1");
  EXPECT_EQ(kvtier_key_chain(rt.get(), nullptr, tokens.data(), tokens.size(), nullptr, 0, &count),
            KVTIER_RESOURCE_EXHAUSTED);
  EXPECT_EQ(count, 3u);
  EXPECT_EQ(kvtier_key_chain(rt.get(), nullptr, tokens.data(), 15, nullptr, 0, &count), KVTIER_OK);
  EXPECT_EQ(count, 0u);

  // An extra (a LoRA adapter's id) changes every key, as the C++ hasher's
  // `extra` does; none gives the plain chain.
  const char lora[] = "adapter-7";
  const auto lora_bytes = std::as_bytes(std::span(lora, sizeof lora - 1));
  const std::vector<BlockKey> with_lora = hasher.Chain(tokens, 16, lora_bytes);
  std::vector<kvtier_key> salted(3);
  ASSERT_EQ(kvtier_key_chain_extra(rt.get(), nullptr, tokens.data(), tokens.size(), lora,
                                   sizeof lora - 1, salted.data(), 3, &count),
            KVTIER_OK);
  ASSERT_EQ(count, 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(SameKey(salted[i], with_lora[i])) << i;
    EXPECT_FALSE(SameKey(salted[i], expected[i])) << i;
  }
  ASSERT_EQ(kvtier_key_chain_extra(rt.get(), &salted[0], tokens.data() + 16, 16, lora,
                                   sizeof lora - 1, rest.data(), 2, &count),
            KVTIER_OK);
  EXPECT_EQ(count, 1u);
  EXPECT_TRUE(SameKey(rest[0], with_lora[1]));
  ASSERT_EQ(kvtier_key_chain_extra(rt.get(), nullptr, tokens.data(), 16, nullptr, 0, salted.data(),
                                   1, &count),
            KVTIER_OK);
  EXPECT_TRUE(SameKey(salted[0], expected[0]));

  const unsigned char engine_hash[] = {1, 2, 3, 4, 5, 6, 7, 8};
  kvtier_key from_hash{};
  ASSERT_EQ(
      kvtier_key_from_engine_hash(rt.get(), &keys[0], engine_hash, sizeof engine_hash, &from_hash),
      KVTIER_OK);
  const BlockKey parent = expected[0];
  EXPECT_TRUE(SameKey(from_hash,
                      hasher.NextFromEngineHash(&parent, std::as_bytes(std::span(engine_hash)))));
}

TEST(CApiTest, EngineHashesMakeTheSameKeysInOneCall) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  // Three 8-byte engine hashes end to end, chained from a parent.
  const uint64_t ids[3] = {11, 22, 33};
  const kvtier_key parent{7, 8};
  std::vector<kvtier_key> one_by_one;
  const kvtier_key* prev = &parent;
  for (uint64_t id : ids) {
    kvtier_key k{};
    ASSERT_EQ(kvtier_key_from_engine_hash(rt.get(), prev, &id, sizeof id, &k), KVTIER_OK);
    one_by_one.push_back(k);
    prev = &one_by_one.back();
  }
  std::vector<kvtier_key> batch(3);
  ASSERT_EQ(kvtier_keys_from_engine_hashes(rt.get(), &parent, ids, sizeof ids[0], 3, batch.data()),
            KVTIER_OK);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(batch[i].hi, one_by_one[i].hi) << i;
    EXPECT_EQ(batch[i].lo, one_by_one[i].lo) << i;
  }
  EXPECT_EQ(kvtier_keys_from_engine_hashes(rt.get(), nullptr, nullptr, 8, 0, nullptr), KVTIER_OK);
  EXPECT_EQ(kvtier_keys_from_engine_hashes(rt.get(), nullptr, ids, 8, 3, nullptr),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: out is NULL");
  EXPECT_EQ(kvtier_keys_from_engine_hashes(rt.get(), nullptr, nullptr, 8, 3, batch.data()),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: hashes is NULL");
}

TEST(CApiTest, SaveLookupLoadRoundTripsEveryByte) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 4, 100);
  // Two saves: the second continues the first through its parent.
  ASSERT_EQ(SaveBlocks(rt.get(), {keys[0], keys[1]}, {0, 1}), KVTIER_OK) << kvtier_last_error();
  ASSERT_EQ(SaveBlocks(rt.get(), {keys[2], keys[3]}, {2, 3}, &keys[1]), KVTIER_OK)
      << kvtier_last_error();

  size_t hits = 0;
  std::vector<uint8_t> tiers(4, 9);
  ASSERT_EQ(kvtier_lookup(rt.get(), keys.data(), 4, nullptr, &hits, tiers.data()), KVTIER_OK);
  EXPECT_EQ(hits, 4u);
  EXPECT_EQ(tiers, std::vector<uint8_t>(4, 0));  // all in the host hub
  // Stored under the very keys the C++ API names (hi and lo not swapped).
  std::vector<int32_t> tokens(4 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = 100 + static_cast<int32_t>(i);
  EXPECT_TRUE(rt->runtime->IsSaved(rt->ns, CppHasher().Chain(tokens, 16)));

  struct Layers {
    std::mutex mu;
    std::vector<uint32_t> seen;
  } layers;
  auto on_layer = [](void* user, uint32_t layer) {
    auto* l = static_cast<Layers*>(user);
    std::lock_guard lock(l->mu);
    l->seen.push_back(layer);
  };
  const std::vector<uint32_t> dst = {8, 9, 10, 11};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(
      kvtier_load(rt.get(), keys.data(), dst.data(), 4, 10'000'000'000, on_layer, &layers, &c),
      KVTIER_OK);
  CompletionPtr load(c);
  ASSERT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK) << kvtier_last_error();
  EXPECT_EQ(kvtier_completion_done(c), 1);
  ASSERT_EQ(kvtier_completion_size(c), 4u);
  for (size_t i = 0; i < 4; ++i) {
    uint64_t bytes = 0;
    EXPECT_EQ(kvtier_completion_result(c, i, &bytes), KVTIER_OK);
    EXPECT_EQ(bytes, 8192u);
  }
  EXPECT_EQ(kvtier_completion_layers_done(c), 4u);
  {
    std::lock_guard lock(layers.mu);
    EXPECT_EQ(layers.seen, (std::vector<uint32_t>{0, 1, 2, 3}));
  }
  for (uint32_t i = 0; i < 4; ++i) {
    std::vector<unsigned char> back(8192);
    ASSERT_EQ(kvtier_host_block_read(rt.get(), dst[i], back.data(), back.size()), KVTIER_OK);
    EXPECT_EQ(back, Pattern(8192, i + 1)) << "block " << i;
  }
}

TEST(CApiTest, UnsavedKeysAreMissesOfTheirOwnBlocks) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 3, 7);
  ASSERT_EQ(SaveBlocks(rt.get(), {keys[0]}, {0}), KVTIER_OK);
  size_t hits = 9;
  ASSERT_EQ(kvtier_lookup(rt.get(), keys.data(), 3, nullptr, &hits, nullptr), KVTIER_OK);
  EXPECT_EQ(hits, 1u);

  const std::vector<uint32_t> dst = {4, 5, 6};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_load(rt.get(), keys.data(), dst.data(), 3, -1, nullptr, nullptr, &c), KVTIER_OK);
  CompletionPtr load(c);
  EXPECT_EQ(kvtier_completion_wait(c, 5'000'000'000), KVTIER_NOT_FOUND);
  uint64_t bytes = 1;
  EXPECT_EQ(kvtier_completion_result(c, 0, &bytes), KVTIER_OK);
  EXPECT_EQ(bytes, 8192u);
  EXPECT_EQ(kvtier_completion_result(c, 1, &bytes), KVTIER_NOT_FOUND);
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(kvtier_completion_result(c, 2, nullptr), KVTIER_NOT_FOUND);
  std::vector<unsigned char> back(8192);
  ASSERT_EQ(kvtier_host_block_read(rt.get(), 4, back.data(), back.size()), KVTIER_OK);
  EXPECT_EQ(back, Pattern(8192, 1));
}

TEST(CApiTest, ACopyFaultFailsItsBlockAlone) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 3, 60);
  ASSERT_EQ(SaveBlocks(rt.get(), keys, {0, 1, 2}), KVTIER_OK);
  rt->host->TEST_SetFaultHook([](uint32_t engine_block, uint32_t layer) {
    return CopyFault{engine_block == 9 && layer == 1 ? Status::IOError("injected") : Status()};
  });
  const uint32_t dst[] = {8, 9, 10};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_load(rt.get(), keys.data(), dst, 3, -1, nullptr, nullptr, &c), KVTIER_OK);
  CompletionPtr load(c);
  EXPECT_EQ(kvtier_completion_wait(c, -1), KVTIER_IO_ERROR);
  EXPECT_EQ(kvtier_completion_result(c, 0, nullptr), KVTIER_OK);
  EXPECT_EQ(kvtier_completion_result(c, 1, nullptr), KVTIER_IO_ERROR);
  EXPECT_NE(std::string(kvtier_last_error()).find("injected"), std::string::npos)
      << kvtier_last_error();
  EXPECT_EQ(kvtier_completion_result(c, 2, nullptr), KVTIER_OK);
  rt->host->TEST_SetFaultHook(nullptr);
  std::vector<unsigned char> back(8192);
  for (uint32_t i : {0u, 2u}) {
    ASSERT_EQ(kvtier_host_block_read(rt.get(), dst[i], back.data(), back.size()), KVTIER_OK);
    EXPECT_EQ(back, Pattern(8192, i + 1)) << "block " << i;
  }
}

TEST(CApiTest, AnOnLayerThatFailsEndsItsLoadInternal) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 2, 70);
  ASSERT_EQ(SaveBlocks(rt.get(), keys, {0, 1}), KVTIER_OK);
  // Outside an on_layer there is nothing to fail.
  EXPECT_EQ(kvtier_layer_failed("late"), KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(),
               "invalid_argument: kvtier_layer_failed: no on_layer is running on this thread");
  struct Seen {
    std::vector<uint32_t> layers;
    int code = -1;
  } seen;
  kvtier_layer_fn failing = [](void* user, uint32_t layer) {
    auto* s = static_cast<Seen*>(user);
    s->layers.push_back(layer);
    s->code = kvtier_layer_failed(layer == 1 ? "attention kernel failed" : nullptr);
  };
  const uint32_t dst[] = {8, 9};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_load(rt.get(), keys.data(), dst, 2, -1, failing, &seen, &c), KVTIER_OK);
  CompletionPtr load(c);
  EXPECT_EQ(kvtier_completion_wait(c, -1), KVTIER_INTERNAL);
  // The first layer's failure is the one reported, and no later layer runs.
  EXPECT_EQ(seen.layers, std::vector<uint32_t>{0});
  EXPECT_EQ(seen.code, KVTIER_OK);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(kvtier_completion_result(c, i, nullptr), KVTIER_INTERNAL);
    EXPECT_STREQ(kvtier_last_error(),
                 "internal: load: copy into the engine: on_layer failed: no reason given");
  }
  // A callback that reports nothing loads every layer, and the blocks round trip.
  seen = Seen{};
  kvtier_layer_fn counting = [](void* user, uint32_t layer) {
    static_cast<Seen*>(user)->layers.push_back(layer);
  };
  ASSERT_EQ(kvtier_load(rt.get(), keys.data(), dst, 2, -1, counting, &seen, &c), KVTIER_OK);
  CompletionPtr again(c);
  EXPECT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK);
  EXPECT_EQ(seen.layers, (std::vector<uint32_t>{0, 1, 2, 3}));
  std::vector<unsigned char> back(8192);
  ASSERT_EQ(kvtier_host_block_read(rt.get(), 9, back.data(), back.size()), KVTIER_OK);
  EXPECT_EQ(back, Pattern(8192, 2));
}

TEST(CApiTest, HintsAreCheckedAndPassedOn) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 2, 40);
  kvtier_hints hints{};
  hints.session_id = 5;
  hints.request_id = 77;
  hints.expected_reuse = 3.0f;  // ignored: has_expected_reuse is 0
  size_t hits = 9;
  EXPECT_EQ(kvtier_lookup(rt.get(), keys.data(), 2, &hints, &hits, nullptr), KVTIER_OK);
  EXPECT_EQ(hits, 0u);
  hints.has_expected_reuse = 1;
  EXPECT_EQ(kvtier_lookup(rt.get(), keys.data(), 2, &hints, &hits, nullptr),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(),
               "invalid_argument: hints.expected_reuse must be in [0, 1], got 3.000000");
  const uint32_t blocks[] = {0, 1};
  kvtier_completion* c = nullptr;
  EXPECT_EQ(kvtier_save(rt.get(), nullptr, keys.data(), blocks, 2, &hints, &c),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  hints.expected_reuse = 0.5f;
  hints.bypass_admission = 1;
  ASSERT_EQ(kvtier_save(rt.get(), nullptr, keys.data(), blocks, 2, &hints, &c), KVTIER_OK);
  CompletionPtr save(c);
  EXPECT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK);
  EXPECT_EQ(kvtier_lookup(rt.get(), keys.data(), 2, &hints, &hits, nullptr), KVTIER_OK);
  EXPECT_EQ(hits, 2u);
}

TEST(CApiTest, CompletionsOutliveTheirRuntime) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 2, 900);
  const uint32_t blocks[] = {0, 1};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_save(rt.get(), nullptr, keys.data(), blocks, 2, nullptr, &c), KVTIER_OK);
  CompletionPtr save(c);
  rt.reset();  // closes: finishes the queued save first
  EXPECT_EQ(kvtier_completion_done(c), 1);
  EXPECT_EQ(kvtier_completion_wait(c, 0), KVTIER_OK);
  EXPECT_EQ(kvtier_completion_result(c, 1, nullptr), KVTIER_OK);
}

TEST(CApiTest, DoneCallbacksRunOnceEvenAfterTheHandleIsFreed) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  std::atomic<int> calls{0};
  auto count = [](void* user) { static_cast<std::atomic<int>*>(user)->fetch_add(1); };
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 2, 300);
  const uint32_t blocks[] = {0, 1};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_save(rt.get(), nullptr, keys.data(), blocks, 2, nullptr, &c), KVTIER_OK);
  CompletionPtr save(c);
  ASSERT_EQ(kvtier_completion_on_done(c, count, &calls), KVTIER_OK);
  ASSERT_EQ(kvtier_completion_on_done(c, count, &calls), KVTIER_OK);
  ASSERT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK);
  EXPECT_EQ(calls.load(), 2);  // both ran before the wait returned
  ASSERT_EQ(kvtier_completion_on_done(c, count, &calls), KVTIER_OK);
  EXPECT_EQ(calls.load(), 3);  // done already: ran before the call returned
  EXPECT_EQ(kvtier_completion_on_done(c, nullptr, &calls), KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: fn is NULL");

  const std::vector<kvtier_key> more = ChainOf(rt.get(), 2, 400);
  ASSERT_EQ(kvtier_save(rt.get(), nullptr, more.data(), blocks, 2, nullptr, &c), KVTIER_OK);
  ASSERT_EQ(kvtier_completion_on_done(c, count, &calls), KVTIER_OK);
  kvtier_completion_free(c);
  rt.reset();  // closing finishes the save, whose handle is gone
  EXPECT_EQ(calls.load(), 4);
}

// Four threads each save and load their own chains through one runtime.
TEST(CApiTest, CallsFromManyThreadsRoundTrip) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  constexpr int kThreads = 4;
  constexpr int kRounds = 10;
  std::vector<int> good(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint32_t src[] = {uint32_t(2 * t), uint32_t(2 * t + 1)};
      const uint32_t dst[] = {uint32_t(8 + 2 * t), uint32_t(9 + 2 * t)};
      for (int r = 0; r < kRounds; ++r) {
        const std::vector<kvtier_key> keys = ChainOf(rt.get(), 2, 10'000 * (t * kRounds + r + 1));
        std::vector<unsigned char> bytes[2];
        for (int i = 0; i < 2; ++i) {
          bytes[i] = Pattern(8192, (t * kRounds + r) * 2 + i + 1);
          if (kvtier_host_block_write(rt.get(), src[i], bytes[i].data(), 8192) != KVTIER_OK) return;
        }
        kvtier_completion* c = nullptr;
        if (kvtier_save(rt.get(), nullptr, keys.data(), src, 2, nullptr, &c) != KVTIER_OK) return;
        const int saved = kvtier_completion_wait(c, -1);
        kvtier_completion_free(c);
        if (saved != KVTIER_OK) return;
        if (kvtier_load(rt.get(), keys.data(), dst, 2, -1, nullptr, nullptr, &c) != KVTIER_OK) {
          return;
        }
        const int loaded = kvtier_completion_wait(c, -1);
        kvtier_completion_free(c);
        if (loaded != KVTIER_OK) return;
        std::vector<unsigned char> back(8192);
        for (int i = 0; i < 2; ++i) {
          if (kvtier_host_block_read(rt.get(), dst[i], back.data(), 8192) != KVTIER_OK) return;
          if (back != bytes[i]) return;
        }
        ++good[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(good, std::vector<int>(kThreads, kRounds));
}

}  // namespace
}  // namespace kvtier::testing
