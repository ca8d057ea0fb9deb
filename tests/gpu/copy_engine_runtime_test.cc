// Per-block copy errors through the runtime: with the stand-in's fault hook
// failing one engine block, Save and Load report that block's error, the
// other blocks end OK with the right bytes, and a lost device fails every
// block still in flight. The same flows run against the CUDA engine in
// cuda_copy_engine_fault_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/copy_engine.h"
#include "kvtier/runtime.h"
#include "tests/core/runtime_test_util.h"
#include "tests/support/block_data.h"

namespace kvtier {
namespace {

using testing::BlockBytes;
using testing::TestKey;

constexpr NamespaceId kNs{0x6b76};

CopyFaultHook FailAt(uint32_t block, uint32_t layer, bool sticky) {
  return [=](uint32_t b, uint32_t l) {
    if (b == block && l == layer) return CopyFault{Status::IOError("injected"), sticky};
    return CopyFault{};
  };
}

class CopyEngineRuntimeTest : public ::testing::TestWithParam<KvLayoutKind> {
 protected:
  void SetUp() override {
    const KvLayout layout{.kind = GetParam(),
                          .num_layers = 2,
                          .num_blocks = 16,
                          .block_tokens = 8,
                          .num_kv_heads = GetParam() == KvLayoutKind::kMla ? 1u : 2u,
                          .head_size = 32,
                          .elem_bytes = 2};
    auto engine = HostCopyEngine::Create(layout);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
    auto rt = Runtime::Open(testing::MakeOptions(layout.BlockBytes(), 32), engine_);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    for (uint64_t i = 0; i < 4; ++i) keys_.push_back(TestKey(i));
  }

  uint64_t Bytes() const { return engine_->layout().BlockBytes(); }
  // Engine blocks first.. hold the contents of keys_.
  void Prefill(uint32_t first) {
    for (size_t i = 0; i < keys_.size(); ++i) {
      ASSERT_TRUE(engine_->WriteBlock(first + i, BlockBytes(keys_[i], Bytes())).ok());
    }
  }
  bool Holds(uint32_t block, const BlockKey& key) {
    std::vector<std::byte> got(Bytes());
    return engine_->ReadBlock(block, got).ok() && got == BlockBytes(key, Bytes());
  }
  Completion Save(uint32_t first) {
    std::vector<uint32_t> blocks;
    for (size_t i = 0; i < keys_.size(); ++i) blocks.push_back(first + i);
    Completion c = rt_->Save(kNs, std::nullopt, keys_, blocks);
    EXPECT_TRUE(c.WaitFor(std::chrono::seconds(10)).ok() || c.Poll());
    return c;
  }
  Completion Load(uint32_t first) {
    std::vector<uint32_t> blocks;
    for (size_t i = 0; i < keys_.size(); ++i) blocks.push_back(first + i);
    Completion c = rt_->Load(kNs, keys_, blocks, std::chrono::seconds(10));
    (void)c.WaitFor(std::chrono::seconds(10));
    EXPECT_TRUE(c.Poll());
    return c;
  }
  static std::string Results(const Completion& c) {
    std::string out;
    for (size_t i = 0; i < c.size(); ++i) out += (i ? " | " : "") + c.result(i).ToString();
    return out;
  }

  std::shared_ptr<HostCopyEngine> engine_;
  std::unique_ptr<Runtime> rt_;
  std::vector<BlockKey> keys_;
};

// The failed block is not stored; the blocks after it in the chain would
// hang off it, so they fail too.
TEST_P(CopyEngineRuntimeTest, SaveFailsTheFaultyBlockAndItsDescendants) {
  Prefill(0);
  engine_->TEST_SetFaultHook(FailAt(2, 1, /*sticky=*/false));
  Completion c = Save(0);
  EXPECT_EQ(Results(c),
            "ok | ok | io_error: save: copy from the engine: host copy engine: save of engine "
            "block 2: injected | cancelled: save: copy from the engine: its parent block was "
            "not copied");
  auto hit = rt_->Lookup(kNs, keys_);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->hit_blocks, 2u);
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.saved_blocks, 2u);
  EXPECT_EQ(st.save_failures, 2u);
  EXPECT_EQ(st.tiers[0].blocks, 2u);
  // The stored blocks load back byte for byte into other engine blocks.
  engine_->TEST_SetFaultHook(nullptr);
  Completion l = Load(8);
  EXPECT_EQ(Results(l), "ok | ok | not_found: load: block " + ToHex(keys_[2]) +
                            " is not stored | not_found: " + "load: block " + ToHex(keys_[3]) +
                            " is not stored");
  EXPECT_TRUE(Holds(8, keys_[0]));
  EXPECT_TRUE(Holds(9, keys_[1]));
}

TEST_P(CopyEngineRuntimeTest, LoadFailsOnlyTheFaultyBlock) {
  Prefill(0);
  ASSERT_TRUE(Save(0).status().ok());
  engine_->TEST_SetFaultHook(FailAt(10, 1, /*sticky=*/false));
  Completion c = Load(8);
  EXPECT_EQ(Results(c),
            "ok | ok | io_error: load: copy into the engine: host copy engine: load of engine "
            "block 10 layer 1: injected | ok");
  EXPECT_EQ(c.layers_done(), 2u);
  EXPECT_TRUE(Holds(8, keys_[0]));
  EXPECT_TRUE(Holds(9, keys_[1]));
  EXPECT_FALSE(Holds(10, keys_[2]));
  EXPECT_TRUE(Holds(11, keys_[3]));
  RuntimeStats st = rt_->Stats();
  EXPECT_EQ(st.loaded_blocks, 3u);
  EXPECT_EQ(st.load_failures, 1u);
  // The block is still stored: a retry without the fault loads it.
  engine_->TEST_SetFaultHook(nullptr);
  EXPECT_TRUE(Load(8).status().ok());
  EXPECT_TRUE(Holds(10, keys_[2]));
}

TEST_P(CopyEngineRuntimeTest, LostDeviceFailsEveryBlockInFlight) {
  Prefill(0);
  ASSERT_TRUE(Save(0).status().ok());
  engine_->TEST_SetFaultHook(FailAt(9, 0, /*sticky=*/true));
  Completion c = Load(8);
  std::string want;
  for (uint32_t b = 8; b < 12; ++b) {
    want += std::string(b > 8 ? " | " : "") +
            "io_error: load: copy into the engine: host copy engine: load of engine block " +
            std::to_string(b) + " layer 0: injected";
  }
  EXPECT_EQ(Results(c), want);
  EXPECT_EQ(c.layers_done(), 0u);
  EXPECT_EQ(rt_->Stats().load_failures, 4u);
  // Saves fail too while the device is lost; nothing new is stored.
  keys_ = {TestKey(10), TestKey(11), TestKey(12), TestKey(13)};
  Prefill(4);
  Completion s = Save(4);
  EXPECT_EQ(s.ok_count(), 0u);
  EXPECT_EQ(s.result(0).ToString(),
            "io_error: save: copy from the engine: host copy engine: save of engine block 4: "
            "injected");
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 4u);
}

// Two saves of one prefix overlap: B names keys_[0] while A is still
// copying it, then A's copy fails. B waits for A's copy to end instead of
// taking keys_[0] for stored, then copies it from its own engine block: B
// ends OK with both blocks stored, and they load back.
TEST_P(CopyEngineRuntimeTest, AFailedCopyUnderAnOverlappingSaveIsRedoneByIt) {
  Prefill(0);
  std::mutex mu;
  std::condition_variable cv;
  bool a_copying = false, b_saved = false;
  engine_->TEST_SetFaultHook([&](uint32_t block, uint32_t) {
    if (block != 0) return CopyFault{};
    std::unique_lock lock(mu);
    if (b_saved) return CopyFault{};  // B's own copy of block 0
    a_copying = true;
    cv.notify_all();
    // A's copy fails once B has been handed over (and, given a moment, is
    // waiting for this copy).
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return b_saved; });
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return CopyFault{Status::IOError("injected"), false};
  });
  const std::vector<BlockKey> a_keys(keys_.begin(), keys_.begin() + 1);
  const std::vector<BlockKey> b_keys(keys_.begin(), keys_.begin() + 2);
  const std::vector<uint32_t> a_blocks{0}, b_blocks{0, 1};
  Completion a = rt_->Save(kNs, std::nullopt, a_keys, a_blocks);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return a_copying; }));
  }
  Completion b = rt_->Save(kNs, std::nullopt, b_keys, b_blocks);
  {
    std::lock_guard lock(mu);
    b_saved = true;
  }
  cv.notify_all();
  ASSERT_TRUE(a.WaitFor(std::chrono::seconds(10)).ok() || a.Poll());
  ASSERT_TRUE(b.WaitFor(std::chrono::seconds(10)).ok()) << Results(b);
  EXPECT_EQ(a.result(0).code(), StatusCode::kIOError) << Results(a);
  EXPECT_EQ(Results(b), "ok | ok");
  EXPECT_EQ(rt_->Lookup(kNs, b_keys)->hit_blocks, 2u);
  EXPECT_EQ(rt_->Stats().tiers[0].blocks, 2u);
  engine_->TEST_SetFaultHook(nullptr);
  Completion l = rt_->Load(kNs, b_keys, std::vector<uint32_t>{8, 9}, std::chrono::seconds(10));
  ASSERT_TRUE(l.WaitFor(std::chrono::seconds(10)).ok()) << Results(l);
  EXPECT_TRUE(Holds(8, keys_[0]));
  EXPECT_TRUE(Holds(9, keys_[1]));
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, CopyEngineRuntimeTest, ::testing::ValuesIn(kAllKvLayoutKinds),
                         [](const auto& info) {
                           return std::string(KvLayoutKindName(info.param));
                         });

}  // namespace
}  // namespace kvtier
