#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "kvtier/build_config.h"
#include "kvtier/tier.h"

namespace kvtier {
namespace {

TierOptions Opts(std::string type) {
  TierOptions o;
  o.name = "t";
  o.type = std::move(type);
  o.capacity_bytes = 1 << 20;
  o.path = "/tmp/x";
  o.mlock = false;
  return o;
}

TEST(TierRegistry, BuildsHostAndRefusesUnknownTypes) {
  auto host = CreateTier(Opts("host"), TierContext{4096});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ((*host)->type(), "host");
  (*host)->Shutdown();

  auto bogus = CreateTier(Opts("floppy"), TierContext{4096});
  ASSERT_FALSE(bogus.ok());
  EXPECT_EQ(bogus.status().code(), StatusCode::kInvalidArgument);
}

TEST(TierRegistry, BackendsNotInThisBuildSayNotSupported) {
  // Which backends exist depends on the build; each absent one must answer
  // NotSupported naming what it needs, never a crash or a wrong type. A
  // built one is reached: given options it cannot open (no server, a file
  // in a directory that does not exist), it says what is wrong with them.
  struct Case {
    const char* type;
    bool built;
    const char* needs;  // what the refusal names
  };
  const Case cases[] = {
      {"nvme", KVTIER_HAVE_URING && KVTIER_HAVE_ROCKSDB, "KVTIER_WITH_URING"},
      {"redis", KVTIER_HAVE_REDIS == 1, "KVTIER_WITH_REDIS"},
      {"remote", KVTIER_HAVE_REMOTE == 1, "Boost.Asio"},
  };
  for (const Case& c : cases) {
    TierOptions o = Opts(c.type);
    o.path = "/nonexistent-kvtier-dir/store";
    o.remote.secret = "s3cret";  // else the options are refused before the backend
    auto t = CreateTier(o, TierContext{4096});
    ASSERT_FALSE(t.ok()) << c.type;
    if (c.built) {
      EXPECT_NE(t.status().code(), StatusCode::kNotSupported) << t.status().ToString();
      continue;
    }
    EXPECT_EQ(t.status().code(), StatusCode::kNotSupported) << t.status().ToString();
    EXPECT_NE(t.status().message().find(c.needs), std::string_view::npos);
  }
}

TEST(TierRegistry, ZeroBlockSizeIsRefused) {
  auto t = CreateTier(Opts("host"), TierContext{0});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

// A backend that finishes a batch and only then returns (the host tier
// finishes under its own lock): Shutdown waits for the return too, or the
// tier could be destroyed under the backend's unlock.
class FinishesEarlyTier final : public Tier {
 public:
  FinishesEarlyTier() : Tier("early", "test", TierCapabilities{}) {}
  ~FinishesEarlyTier() override { Shutdown(); }
  std::promise<void> finished;
  std::promise<void> let_return;
  std::atomic<bool> returned{false};
  TierUsage Usage() const override { return {}; }

 protected:
  void DoRead(NamespaceId, std::span<const ReadOp> ops, CompletionSource done) override {
    for (size_t i = 0; i < ops.size(); ++i) done.Set(i, Status::NotFound("none"));
    done.Finish();
    finished.set_value();
    let_return.get_future().wait();
    returned = true;
  }
  void DoWrite(NamespaceId, std::span<const WriteOp>, CompletionSource) override {}
  void DoRemove(NamespaceId, std::span<const BlockKey>, CompletionSource) override {}
  void DoContains(NamespaceId, std::span<const BlockKey>, CompletionSource) override {}
};

TEST(TierBase, ShutdownWaitsForTheBackendCallToReturn) {
  FinishesEarlyTier tier;
  std::vector<std::byte> buf(16);
  ReadOp op{BlockKey{1, 2}, buf};
  std::thread reader([&] { (void)tier.Read(NamespaceId{1}, std::span(&op, 1)); });
  tier.finished.get_future().wait();
  std::atomic<bool> shut{false};
  std::thread closer([&] {
    tier.Shutdown();
    shut = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(shut.load()) << "Shutdown returned while the backend's call was still running";
  tier.let_return.set_value();
  closer.join();
  EXPECT_TRUE(tier.returned.load());
  reader.join();
}

// A backend whose DoShutdown blocks until released.
class SlowShutdownTier final : public Tier {
 public:
  SlowShutdownTier() : Tier("slow", "test", TierCapabilities{}) {}
  ~SlowShutdownTier() override { Shutdown(); }
  std::promise<void> entered;
  std::promise<void> let_return;
  std::atomic<bool> returned{false};
  TierUsage Usage() const override { return {}; }

 protected:
  void DoShutdown() override {
    entered.set_value();
    let_return.get_future().wait();
    returned = true;
  }
  void DoRead(NamespaceId, std::span<const ReadOp>, CompletionSource) override {}
  void DoWrite(NamespaceId, std::span<const WriteOp>, CompletionSource) override {}
  void DoRemove(NamespaceId, std::span<const BlockKey>, CompletionSource) override {}
  void DoContains(NamespaceId, std::span<const BlockKey>, CompletionSource) override {}
};

TEST(TierBase, ASecondShutdownWaitsForTheFirstToFinish) {
  SlowShutdownTier tier;
  std::thread first([&] { tier.Shutdown(); });
  tier.entered.get_future().wait();
  std::atomic<bool> second_done{false};
  bool backend_returned_first = false;
  std::thread second([&] {
    tier.Shutdown();
    backend_returned_first = tier.returned.load();
    second_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(second_done.load())
      << "a second Shutdown returned while the first was still in DoShutdown";
  tier.let_return.set_value();
  second.join();
  first.join();
  EXPECT_TRUE(backend_returned_first);
}

}  // namespace
}  // namespace kvtier
