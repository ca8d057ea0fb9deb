// The Redis tier against a 3-master Redis Cluster built with
// `redis-cli --cluster create`: conformance, slot routing checked against the
// servers, redirects (ASK and MOVED) during a slot migration, to a master of
// the map or one that joined without slots, and a dead master failing only
// its own keys.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/redis/redis_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/recording_log.h"
#include "tests/support/tier_conformance.h"
#include "tests/support/time_scale.h"
#include "tiers/redis/redis_router.h"
#include "tiers/redis/redis_routing.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{0xC1};
constexpr uint64_t kBlock = 16 * 1024;

RedisCluster* SharedCluster(std::string* why) {
  static std::unique_ptr<RedisCluster> cluster;
  static std::string failure;
  if (!cluster && failure.empty()) {
    failure = RedisUnavailableReason();
    if (failure.empty()) {
      auto c = RedisCluster::Start(3);
      if (c.ok()) {
        cluster = std::move(c).value();
      } else {
        failure = c.status().ToString();
      }
    }
  }
  *why = failure;
  return cluster.get();
}

Result<std::unique_ptr<Tier>> MakeClusterTier(uint64_t capacity_blocks, uint64_t block_bytes) {
  std::string why;
  RedisCluster* cluster = SharedCluster(&why);
  if (cluster == nullptr) return Status::Unavailable(why);
  return MakeRedisTier(
      RedisTierOptionsFor(cluster->endpoints(), capacity_blocks * block_bytes, /*cluster=*/true),
      block_bytes);
}

INSTANTIATE_TEST_SUITE_P(RedisCluster, TierConformanceTest,
                         ::testing::Values(TierMaker{"ThreeMasters", MakeClusterTier}),
                         TierMakerName);

struct Blocks {
  std::vector<std::vector<std::byte>> data;
  std::vector<WriteOp> ops;
  std::vector<std::vector<std::byte>> out;
  std::vector<ReadOp> reads;
};

Blocks MakeBlocks(uint64_t first, size_t n) {
  Blocks b;
  for (size_t i = 0; i < n; ++i) b.data.push_back(BlockBytes(TestKey(first + i), kBlock));
  b.out.assign(n, std::vector<std::byte>(kBlock));
  for (size_t i = 0; i < n; ++i) {
    b.ops.push_back({TestKey(first + i), b.data[i]});
    b.reads.push_back({TestKey(first + i), b.out[i]});
  }
  return b;
}

// Each test that changes the cluster builds its own.
class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
    auto c = RedisCluster::Start(3);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value();
    options_ = RedisTierOptionsFor(cluster_->endpoints(), 1024 * kBlock, /*cluster=*/true);
    options_.redis.op_timeout_ms = 500;
    options_.redis.connect_timeout_ms = 500;
  }
  std::unique_ptr<Tier> Open() {
    auto t = MakeRedisTier(options_, kBlock);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  // Index of the node that owns `key` right now, asked of the servers.
  size_t Owner(const std::string& key) {
    for (size_t i = 0; i < cluster_->size(); ++i) {
      auto r = cluster_->node(i).Command({"GET", key});
      if (r.ok() || r.status().message().substr(0, 5) != "MOVED") return i;
    }
    return cluster_->size();
  }
  std::string Name(uint64_t i) const {
    return internal::RedisBlockKeyName(options_.redis.key_prefix, kNs, TestKey(i));
  }

  // Migrates the slot of every key of a tier with key_prefix "{kvmig}" to
  // `b` while the tier writes and reads: ASK while the slot migrates, MOVED
  // once it has. Every node of the cluster is told the new owner, `b` first.
  void MigrateUnderTheTier(Tier& tier, RedisServer& b);
  // Options for the migration tests: every key in one slot (a hash tag),
  // and timeouts with room for a slot-map refresh and a connect to a node
  // new to the tier on a loaded machine (these tests time nothing).
  void UseMigrationOptions() {
    options_.redis.key_prefix = "{kvmig}";
    const auto ms = static_cast<uint32_t>(Scaled(std::chrono::milliseconds(2000)).count());
    options_.redis.op_timeout_ms = ms;
    options_.redis.connect_timeout_ms = ms;
  }

  std::unique_ptr<RedisCluster> cluster_;
  TierOptions options_;
};

TEST_F(RedisClusterTest, SlotsMatchTheServersAndKeysSpreadOverAllMasters) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  for (uint64_t i = 0; i < 50; ++i) {
    const std::string name = Name(i);
    auto slot = cluster_->node(0).Command({"CLUSTER", "KEYSLOT", name});
    ASSERT_TRUE(slot.ok());
    EXPECT_EQ(*slot, std::to_string(internal::RedisHashSlot(name))) << name;
  }
  EXPECT_EQ(*cluster_->node(1).Command({"CLUSTER", "KEYSLOT", "a{tag}b"}),
            std::to_string(internal::RedisHashSlot("a{tag}b")));
  Blocks b = MakeBlocks(0, 60);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  int total = 0;
  for (size_t i = 0; i < cluster_->size(); ++i) {
    const int keys = std::stoi(*cluster_->node(i).Command({"DBSIZE"}));
    EXPECT_GT(keys, 5) << "node " << i;
    total += keys;
  }
  EXPECT_EQ(total, 60);
  ASSERT_TRUE(tier->Read(kNs, b.reads).Wait().ok());
  EXPECT_EQ(b.out, b.data);
  tier->Shutdown();
}

TEST_F(RedisClusterTest, DeadMasterFailsOnlyItsKeysWithinTheDeadline) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(0, 45);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  std::vector<size_t> owner;
  for (uint64_t i = 0; i < 45; ++i) owner.push_back(Owner(Name(i)));
  cluster_->node(1).Kill();
  const auto start = std::chrono::steady_clock::now();
  Completion c = tier->Read(kNs, b.reads);
  ASSERT_NE(c.WaitFor(std::chrono::seconds(3)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, Scaled(std::chrono::milliseconds(1500)));
  size_t dead = 0;
  for (size_t i = 0; i < 45; ++i) {
    if (owner[i] == 1) {
      ++dead;
      EXPECT_EQ(c.result(i).code(), StatusCode::kUnavailable) << c.result(i).ToString();
    } else {
      EXPECT_TRUE(c.result(i).ok()) << i << ": " << c.result(i).ToString();
      EXPECT_EQ(b.out[i], b.data[i]);
    }
  }
  EXPECT_GT(dead, 0u);
  EXPECT_LT(dead, 45u);
  tier->Shutdown();
}

void RedisClusterTest::MigrateUnderTheTier(Tier& tier, RedisServer& b) {
  const uint16_t slot = internal::RedisHashSlot("kvmig");
  Blocks first = MakeBlocks(0, 3);
  ASSERT_TRUE(tier.Write(kNs, first.ops).Wait().ok());
  const size_t src = Owner(Name(0));
  ASSERT_LT(src, cluster_->size());
  RedisServer& a = cluster_->node(src);
  ASSERT_NE(&a, &b);
  const std::string a_id = *a.Command({"CLUSTER", "MYID"});
  const std::string b_id = *b.Command({"CLUSTER", "MYID"});
  const std::string s = std::to_string(slot);
  auto importing = b.Command({"CLUSTER", "SETSLOT", s, "IMPORTING", a_id});
  ASSERT_TRUE(importing.ok()) << importing.status().ToString();
  auto migrating = a.Command({"CLUSTER", "SETSLOT", s, "MIGRATING", b_id});
  ASSERT_TRUE(migrating.ok()) << migrating.status().ToString();

  // New keys are not on the source: it answers ASK, the tier follows.
  Blocks second = MakeBlocks(10, 3);
  Completion w = tier.Write(kNs, second.ops);
  ASSERT_TRUE(w.Wait().ok()) << w.status().ToString();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(w.result(i).ok()) << w.result(i).ToString();
  EXPECT_EQ(*b.Command({"DBSIZE"}), "3");
  ASSERT_TRUE(tier.Read(kNs, first.reads).Wait().ok());
  Completion r2 = tier.Read(kNs, second.reads);
  ASSERT_TRUE(r2.Wait().ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(r2.result(i).ok()) << r2.result(i).ToString();
  EXPECT_EQ(second.out, second.data);

  // Finish the migration: every key moves, the slot changes owner, and the
  // source answers MOVED for keys the tier still routes to it.
  std::vector<std::string> migrate = {"MIGRATE", "127.0.0.1", std::to_string(b.port()), "", "0",
                                      "5000",    "KEYS"};
  for (uint64_t i = 0; i < 3; ++i) migrate.push_back(Name(i));
  ASSERT_TRUE(a.Command(migrate).ok());
  ASSERT_TRUE(b.Command({"CLUSTER", "SETSLOT", s, "NODE", b_id}).ok());
  for (size_t i = 0; i < cluster_->size(); ++i) {
    RedisServer& n = cluster_->node(i);
    if (&n != &b) ASSERT_TRUE(n.Command({"CLUSTER", "SETSLOT", s, "NODE", b_id}).ok());
  }
  first.out.assign(3, std::vector<std::byte>(kBlock));
  for (size_t i = 0; i < 3; ++i) first.reads[i].dst = first.out[i];
  Completion r = tier.Read(kNs, first.reads);
  ASSERT_TRUE(r.Wait().ok()) << r.status().ToString();
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(r.result(i).ok()) << r.result(i).ToString();
  EXPECT_EQ(first.out, first.data);
  EXPECT_EQ(*a.Command({"DBSIZE"}), "0");
  EXPECT_EQ(*b.Command({"DBSIZE"}), "6");
}

TEST_F(RedisClusterTest, FollowsAskAndMovedDuringASlotMigration) {
  UseMigrationOptions();
  auto tier = Open();
  ASSERT_TRUE(tier);
  const size_t src = Owner(Name(0));
  ASSERT_LT(src, cluster_->size());
  MigrateUnderTheTier(*tier, cluster_->node((src + 1) % cluster_->size()));
  tier->Shutdown();
}

TEST_F(RedisClusterTest, FollowsRedirectsToAMasterAddedWithoutSlots) {
  UseMigrationOptions();
  auto tier = Open();
  ASSERT_TRUE(tier);
  // A fourth master joins after the tier read the slot map; it serves no
  // slot until the migration ends, so CLUSTER SLOTS does not name it while
  // the source sends ASK to it.
  // It answers CLUSTERDOWN for the slot until it knows the slot's owner:
  // AddMaster waits for that (RedisCluster::WaitUntilJoined).
  auto added = cluster_->AddMaster();
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  RedisServer& d = **added;
  MigrateUnderTheTier(*tier, d);
  tier->Shutdown();
}

// A user the cluster does not let run CLUSTER NODES still routes by the
// slot map; the refusal is logged once, not at every refresh.
TEST_F(RedisClusterTest, UserDeniedClusterNodesRoutesBySlotsAndSaysSoOnce) {
  for (size_t i = 0; i < cluster_->size(); ++i) {
    ASSERT_TRUE(
        cluster_->node(i)
            .Command({"ACL", "SETUSER", "kvslots", "on", ">pw", "~*", "+@all", "-cluster|nodes"})
            .ok());
  }
  options_.redis.user = "kvslots";
  options_.redis.password = "pw";
  auto log = std::make_shared<RecordingLog>(LogLevel::kWarning, "CLUSTER NODES");
  auto router = internal::RedisRouter::Open(options_, log);
  ASSERT_TRUE(router.ok()) << router.status().ToString();
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(120));  // past the refresh interval
    (*router)->RefreshSlots();
  }
  ASSERT_EQ(log->lines().size(), 1u);
  EXPECT_NE(log->lines()[0].find("NOPERM"), std::string::npos) << log->lines()[0];
  EXPECT_NE((*router)->Route(Name(0)), nullptr);
  auto target = (*router)->RedirectTarget({"127.0.0.1", 1});
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  EXPECT_EQ(*target, nullptr);
  (*router)->Shutdown();
  auto tier = Open();
  ASSERT_TRUE(tier);
  Blocks b = MakeBlocks(0, 20);
  ASSERT_TRUE(tier->Write(kNs, b.ops).Wait().ok());
  ASSERT_TRUE(tier->Read(kNs, b.reads).Wait().ok());
  EXPECT_EQ(b.out, b.data);
  tier->Shutdown();
}

TEST_F(RedisClusterTest, NonClusterServerWithClusterOptionIsAClearError) {
  auto plain = RedisServer::Start();
  ASSERT_TRUE(plain.ok());
  options_.servers = {(*plain)->endpoint()};
  auto t = MakeRedisTier(options_, kBlock);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("set cluster: false"), std::string_view::npos)
      << t.status().ToString();
}

}  // namespace
}  // namespace kvtier::testing
