// GateTier and GatedRuntimeTest: a runtime over a host tier whose reads can
// be made to miss and whose writes and removes can be held at a gate, for
// tests that interleave the runtime's threads step by step.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <vector>

#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {

// Forwards to a host tier, except that reads can be made to miss (the tier
// lost the blocks), and a write or a remove can be held at a gate until
// released (one of each: the gate closes for the next one only).
class GateTier final : public Tier {
 public:
  explicit GateTier(std::unique_ptr<Tier> inner)
      : Tier(inner->name(), inner->type(), inner->capabilities()), inner_(std::move(inner)) {}
  ~GateTier() override { Shutdown(); }

  TierUsage Usage() const override { return inner_->Usage(); }

  std::atomic<bool> reads_miss{false};
  std::atomic<bool> gate_writes{false};
  std::promise<void> write_held;  // set when a write reaches the closed gate
  std::promise<void> open_gate;   // set by the test to let it through
  std::atomic<bool> gate_removes{false};
  std::promise<void> remove_held;  // set when a remove reaches the closed gate
  std::promise<void> open_remove_gate;

 protected:
  void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) override {
    if (reads_miss) {
      for (size_t i = 0; i < ops.size(); ++i) done.Set(i, Status::NotFound("lost"));
      done.Finish();
      return;
    }
    Forward(inner_->Read(ns, ops), std::move(done));
  }
  void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) override {
    if (gate_writes.exchange(false)) {
      write_held.set_value();
      open_gate.get_future().wait();
    }
    Forward(inner_->Write(ns, ops), std::move(done));
  }
  void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    if (gate_removes.exchange(false)) {
      remove_held.set_value();
      open_remove_gate.get_future().wait();
    }
    Forward(inner_->Remove(ns, keys), std::move(done));
  }
  void DoContains(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    Forward(inner_->Contains(ns, keys), std::move(done));
  }

 private:
  static void Forward(const Completion& c, CompletionSource done) {
    (void)c.Wait();
    for (size_t i = 0; i < c.size(); ++i) done.Set(i, c.result(i), c.bytes(i));
    done.Finish();
  }
  std::unique_ptr<Tier> inner_;
};

// A tier factory that wraps the tier named "gate" in a GateTier and points
// *gate at it; the rest are built as usual. `gate` must outlive the runtime.
inline TierFactory GateTierFactory(GateTier** gate) {
  return [gate](const TierOptions& t, const TierContext& c) -> Result<std::unique_ptr<Tier>> {
    auto inner = CreateTier(t, c);
    if (!inner.ok() || t.name != "gate") return inner;
    auto g = std::make_unique<GateTier>(std::move(inner).value());
    *gate = g.get();
    return std::unique_ptr<Tier>(std::move(g));
  };
}

// A runtime whose tier named "gate" is wrapped in a GateTier, with chain
// K1..K4 saved and one mover pass run.
class GatedRuntimeTest : public ::testing::Test {
 protected:
  // Opens with `o` and checks the tier of each of K1..K4 after the pass.
  void OpenAndDemote(RuntimeOptions o, const std::vector<uint8_t>& tiers) {
    o.tier_factory = GateTierFactory(&gate_);
    auto rt = Runtime::Open(o, setup_.engine);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    sim_ = std::make_unique<SimEngine>(rt_.get(), setup_.engine.get());
    keys_ = ChainKeys({1, 2, 3, 4});
    sim_->Prefill(keys_, 0);
    ASSERT_TRUE(sim_->SaveFrom(keys_, 0, 0).status().ok());
    ASSERT_TRUE(rt_->TEST_RunMoverOnce().ok());
    ASSERT_EQ(rt_->Lookup(kTestNs, keys_)->tier, tiers);
  }

  EngineSetup setup_ = MakeEngine(64);
  GateTier* gate_ = nullptr;
  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<SimEngine> sim_;
  std::vector<BlockKey> keys_;
};

// Hub of 4 blocks over a 32-block gate tier; chain K saved, K1 kept in the
// hub and K2..K4 written below (low mark 1 of 4, leaves first).
class HubOverGateTest : public GatedRuntimeTest {
 protected:
  void SetUp() override {
    const uint64_t bb = setup_.layout.BlockBytes();
    RuntimeOptions o = MakeOptions(bb, 4);
    o.worker_threads = 3;  // two for saves, one kept for loads
    o.tiers[0].watermarks = {.high = 0.75, .low = 0.25};
    o.tiers.push_back(LowerHostTier("gate", bb, 32));
    ASSERT_NO_FATAL_FAILURE(OpenAndDemote(std::move(o), {0, 1, 1, 1}));
  }
};

}  // namespace kvtier::testing
