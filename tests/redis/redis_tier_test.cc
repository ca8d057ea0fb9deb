// The Redis tier against real redis-server processes: the conformance suite
// (one server, and two servers with rendezvous hashing), the stored format,
// corruption, namespaces and credentials.
#include <gtest/gtest.h>

#include "kvtier/block_header.h"
#include "tests/redis/redis_test_util.h"
#include "tests/support/block_data.h"
#include "tests/support/tier_conformance.h"
#include "tiers/redis/redis_routing.h"

namespace kvtier::testing {
namespace {

constexpr NamespaceId kNs{0x1234};
constexpr uint64_t kBlock = 64 * 1024;

Result<std::unique_ptr<Tier>> MakeSingle(uint64_t capacity_blocks, uint64_t block_bytes) {
  std::string why;
  RedisServer* server = SharedRedis(&why);
  if (server == nullptr) return Status::Unavailable(why);
  return MakeRedisTier(RedisTierOptionsFor({server->endpoint()}, capacity_blocks * block_bytes),
                       block_bytes);
}

Result<std::unique_ptr<Tier>> MakeTwoServers(uint64_t capacity_blocks, uint64_t block_bytes) {
  static std::unique_ptr<RedisServer> second;
  if (!second) {
    auto s = RedisServer::Start();
    if (!s.ok()) return s.status();
    second = std::move(s).value();
  }
  std::string why;
  RedisServer* server = SharedRedis(&why);
  if (server == nullptr) return Status::Unavailable(why);
  return MakeRedisTier(
      RedisTierOptionsFor({server->endpoint(), second->endpoint()}, capacity_blocks * block_bytes),
      block_bytes);
}

INSTANTIATE_TEST_SUITE_P(Redis, TierConformanceTest,
                         ::testing::Values(TierMaker{"SingleServer", MakeSingle},
                                           TierMaker{"TwoServers", MakeTwoServers}),
                         TierMakerName);

class RedisTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
    std::string why;
    server_ = SharedRedis(&why);
    ASSERT_NE(server_, nullptr) << why;
    options_ = RedisTierOptionsFor({server_->endpoint()}, 64 * kBlock);
  }

  std::unique_ptr<Tier> Open() {
    auto t = MakeRedisTier(options_, kBlock);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  std::string KeyName(uint64_t i, NamespaceId ns = kNs) const {
    return internal::RedisBlockKeyName(options_.redis.key_prefix, ns, TestKey(i));
  }

  Status WriteOne(Tier& tier, uint64_t i, uint64_t bytes = kBlock) {
    std::vector<std::byte> data = BlockBytes(TestKey(i), bytes);
    WriteOp op{TestKey(i), data};
    return tier.Write(kNs, std::span(&op, 1)).Wait();
  }

  Status ReadOne(Tier& tier, uint64_t i, NamespaceId ns = kNs) {
    std::vector<std::byte> out(kBlock);
    ReadOp op{TestKey(i), out};
    Status st = tier.Read(ns, std::span(&op, 1)).Wait();
    if (st.ok() && out != BlockBytes(TestKey(i), kBlock)) return Status::Internal("wrong bytes");
    return st;
  }

  RedisServer* server_ = nullptr;
  TierOptions options_;
};

TEST_F(RedisTierTest, StoresOneKeyPerBlockAsHeaderPlusPayload) {
  options_.redis.ttl_s = 300;
  auto tier = Open();
  ASSERT_TRUE(tier);
  ASSERT_TRUE(WriteOne(*tier, 7).ok());
  const std::string key = KeyName(7);
  EXPECT_EQ(key, options_.redis.key_prefix + ":0000000000001234:" + ToHex(TestKey(7)));
  EXPECT_EQ(*server_->Command({"STRLEN", key}), std::to_string(kBlockHeaderBytes + kBlock));
  auto value = server_->Command({"GET", key});
  ASSERT_TRUE(value.ok());
  auto bytes = std::as_bytes(std::span(*value));
  auto header = DecodeBlockHeader(bytes.first(kBlockHeaderBytes));
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->ns, kNs);
  EXPECT_EQ(header->key, TestKey(7));
  EXPECT_EQ(header->payload_bytes, kBlock);
  std::vector<std::byte> payload(bytes.begin() + kBlockHeaderBytes, bytes.end());
  EXPECT_EQ(payload, BlockBytes(TestKey(7), kBlock));
  auto ttl = server_->Command({"TTL", key});
  ASSERT_TRUE(ttl.ok());
  EXPECT_GT(std::stoi(*ttl), 290);
  EXPECT_LE(std::stoi(*ttl), 300);
  EXPECT_EQ(*server_->Command({"KEYS", options_.redis.key_prefix + ":*"}), key);
  tier->Shutdown();
}

TEST_F(RedisTierTest, GarbageOrTruncatedValuesAreCorruptionNeverData) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(WriteOne(*tier, i).ok());
  auto good = server_->Command({"GET", KeyName(0)});
  ASSERT_TRUE(good.ok());
  // 1: garbage; 2: truncated by one byte; 3: a payload byte flipped;
  // 4: block 0's value stored under block 4's key; 0 stays intact.
  ASSERT_TRUE(server_->Command({"SET", KeyName(1), "not a block"}).ok());
  ASSERT_TRUE(server_->Command({"SET", KeyName(2), good->substr(0, good->size() - 1)}).ok());
  ASSERT_TRUE(server_->Command({"SETRANGE", KeyName(3), "1000", "X"}).ok());
  ASSERT_TRUE(server_->Command({"SET", KeyName(4), *good}).ok());

  std::vector<std::vector<std::byte>> out(5, std::vector<std::byte>(kBlock, std::byte{0x5A}));
  std::vector<ReadOp> reads;
  for (uint64_t i = 0; i < 5; ++i) reads.push_back({TestKey(i), out[i]});
  Completion r = tier->Read(kNs, reads);
  (void)r.Wait();
  EXPECT_TRUE(r.result(0).ok()) << r.result(0).ToString();
  EXPECT_EQ(out[0], BlockBytes(TestKey(0), kBlock));
  for (uint64_t i = 1; i < 5; ++i) {
    EXPECT_EQ(r.result(i).code(), StatusCode::kCorruption) << i << ": " << r.result(i).ToString();
    EXPECT_EQ(r.bytes(i), 0u);
  }
  EXPECT_NE(r.result(1).message().find("shorter than a block header"), std::string_view::npos);
  EXPECT_NE(r.result(2).message().find("the value holds 65535"), std::string_view::npos)
      << r.result(2).ToString();
  // The pipeline stays in step after rejected values.
  EXPECT_TRUE(ReadOne(*tier, 0).ok());
  // Counting happens as batches finish, on the I/O threads: Shutdown waits
  // for it.
  tier->Shutdown();
  EXPECT_EQ(tier->Counters().corruptions, 4u);
  EXPECT_EQ(tier->Counters().read_hits, 2u);
  EXPECT_EQ(tier->Counters().read_blocks, 6u);
}

// Another block's value written over this block's key is Corruption even
// when it is larger than the read buffer (checked before its size), so the
// runtime forgets the copy instead of keeping a hit every load fails.
TEST_F(RedisTierTest, AnotherBlocksLargerValueIsCorruption) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  ASSERT_TRUE(WriteOne(*tier, 5).ok());
  ASSERT_TRUE(WriteOne(*tier, 7, 2 * kBlock).ok());
  auto larger = server_->Command({"GET", KeyName(7)});
  ASSERT_TRUE(larger.ok());
  ASSERT_TRUE(server_->Command({"SET", KeyName(5), *larger}).ok());
  Status st = ReadOne(*tier, 5);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("block header: key"), std::string_view::npos) << st.ToString();
  EXPECT_TRUE(ReadOne(*tier, 0).code() == StatusCode::kNotFound) << "the pipeline is in step";
  tier->Shutdown();
}

TEST_F(RedisTierTest, AKeyOfAnotherTypeIsCorruption) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  ASSERT_TRUE(server_->Command({"RPUSH", KeyName(3), "x"}).ok());
  Status st = ReadOne(*tier, 3);
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("WRONGTYPE"), std::string_view::npos) << st.ToString();
  EXPECT_TRUE(WriteOne(*tier, 3).ok()) << "SET replaces a key of any type";
  EXPECT_TRUE(ReadOne(*tier, 3).ok());
  tier->Shutdown();
}

TEST_F(RedisTierTest, AnotherNamespaceNeverMatches) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  ASSERT_TRUE(WriteOne(*tier, 1).ok());
  EXPECT_EQ(ReadOne(*tier, 1, NamespaceId{0x9999}).code(), StatusCode::kNotFound);
  BlockKey key = TestKey(1);
  Completion c = tier->Contains(NamespaceId{0x9999}, std::span(&key, 1));
  EXPECT_EQ(c.Wait().code(), StatusCode::kNotFound);
  // Even a value copied under the other namespace's key name is refused.
  auto value = server_->Command({"GET", KeyName(1)});
  ASSERT_TRUE(value.ok());
  ASSERT_TRUE(server_->Command({"SET", KeyName(1, NamespaceId{0x9999}), *value}).ok());
  EXPECT_EQ(ReadOne(*tier, 1, NamespaceId{0x9999}).code(), StatusCode::kCorruption);
  EXPECT_TRUE(ReadOne(*tier, 1).ok());
  tier->Shutdown();
}

TEST_F(RedisTierTest, RemoveDeletesTheKeyAndReturnsCapacity) {
  options_.capacity_bytes = 3 * kBlock;
  auto tier = Open();
  ASSERT_TRUE(tier);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(WriteOne(*tier, i).ok());
  EXPECT_EQ(WriteOne(*tier, 3).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->Usage().used_bytes, 3 * kBlock);
  BlockKey key = TestKey(1);
  ASSERT_TRUE(tier->Remove(kNs, std::span(&key, 1)).Wait().ok());
  EXPECT_EQ(*server_->Command({"EXISTS", KeyName(1)}), "0");
  EXPECT_EQ(tier->Usage().used_bytes, 2 * kBlock);
  EXPECT_EQ(tier->Usage().blocks, 2u);
  EXPECT_TRUE(WriteOne(*tier, 3).ok());
  tier->Shutdown();
}

TEST_F(RedisTierTest, TwoServersSplitKeysByRendezvousHashing) {
  auto second = RedisServer::Start();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  options_.servers = {server_->endpoint(), (*second)->endpoint()};
  auto tier = Open();
  ASSERT_TRUE(tier);
  const std::vector<uint64_t> ids = {internal::RendezvousServerId(options_.servers[0]),
                                     internal::RendezvousServerId(options_.servers[1])};
  int on_second = 0;
  for (uint64_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(WriteOne(*tier, i, 1024).ok());
    const size_t pick = internal::RendezvousPick(KeyName(i), ids);
    RedisServer& holder = pick == 0 ? *server_ : **second;
    RedisServer& other = pick == 0 ? **second : *server_;
    EXPECT_EQ(*holder.Command({"EXISTS", KeyName(i)}), "1") << i;
    EXPECT_EQ(*other.Command({"EXISTS", KeyName(i)}), "0") << i;
    on_second += pick == 1 ? 1 : 0;
  }
  EXPECT_GT(on_second, 8);
  EXPECT_LT(on_second, 32);
  tier->Shutdown();
}

class RedisAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = RedisUnavailableReason(); !why.empty()) GTEST_SKIP() << why;
    auto s = RedisServer::Start(RedisServerOptions{.password = "s3cret"});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  std::unique_ptr<RedisServer> server_;
};

TEST_F(RedisAuthTest, WrongOrMissingPasswordFailsAtOpen) {
  TierOptions o = RedisTierOptionsFor({server_->endpoint()}, 16 * kBlock);
  o.redis.password = "wrong";
  auto bad = MakeRedisTier(o, kBlock);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "tier 'redis': AUTH to redis " + server_->endpoint() +
                ": WRONGPASS invalid username-password pair or user is disabled. (check the "
                "redis user and password)");

  o.redis.password.clear();
  auto none = MakeRedisTier(o, kBlock);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("NOAUTH"), std::string_view::npos)
      << none.status().ToString();

  o.redis.password = "s3cret";
  auto good = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  std::vector<std::byte> data = BlockBytes(TestKey(1), kBlock);
  WriteOp op{TestKey(1), data};
  EXPECT_TRUE((*good)->Write(kNs, std::span(&op, 1)).Wait().ok());
  (*good)->Shutdown();
}

TEST_F(RedisAuthTest, AclUserAndPassword) {
  ASSERT_TRUE(server_->Command({"ACL", "SETUSER", "kv", "on", ">pw", "~*", "+@all"}).ok());
  TierOptions o = RedisTierOptionsFor({server_->endpoint()}, 16 * kBlock);
  o.redis.user = "kv";
  o.redis.password = "pw";
  auto good = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  (*good)->Shutdown();
  o.redis.user = "nobody";
  auto bad = MakeRedisTier(o, kBlock);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("WRONGPASS"), std::string_view::npos);
}

// One block written through `t` reads back byte for byte.
void ExpectRoundTrip(Tier& t) {
  std::vector<std::byte> data = BlockBytes(TestKey(1), kBlock);
  WriteOp op{TestKey(1), data};
  ASSERT_TRUE(t.Write(kNs, std::span(&op, 1)).Wait().ok());
  std::vector<std::byte> back(kBlock);
  ReadOp r{TestKey(1), back};
  EXPECT_TRUE(t.Read(kNs, std::span(&r, 1)).Wait().ok());
  EXPECT_EQ(back, data);
}

// With ttl_s set, reads are GETEX, a write command: a user allowed GET but
// not GETEX is refused at open, naming the fix, not on every read later.
TEST_F(RedisAuthTest, TtlWithAUserWhoMayNotRunGetexIsRefusedAtOpen) {
  ASSERT_TRUE(
      server_->Command({"ACL", "SETUSER", "ro", "on", ">pw", "~*", "+@all", "-getex"}).ok());
  TierOptions o = RedisTierOptionsFor({server_->endpoint()}, 16 * kBlock);
  o.redis.user = "ro";
  o.redis.password = "pw";
  o.redis.ttl_s = 60;
  auto bad = MakeRedisTier(o, kBlock);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("user 'ro' may not run GETEX"), std::string_view::npos)
      << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("or set ttl_s: 0"), std::string_view::npos);
  // Without ttl_s reads are GETs: the same user works.
  o.redis.ttl_s = 0;
  auto good = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectRoundTrip(**good));
  (*good)->Shutdown();
}

// The commands the documentation lists are enough: a user allowed exactly
// those opens and round-trips; one without PING is refused, told so.
TEST_F(RedisAuthTest, AUserAllowedTheListedCommandsOnlyWorks) {
  ASSERT_TRUE(server_
                  ->Command({"ACL", "SETUSER", "least", "on", ">pw", "~*", "+ping", "+get", "+set",
                             "+exists", "+del"})
                  .ok());
  ASSERT_TRUE(server_
                  ->Command({"ACL", "SETUSER", "noping", "on", ">pw", "~*", "+get", "+set",
                             "+exists", "+del"})
                  .ok());
  TierOptions o = RedisTierOptionsFor({server_->endpoint()}, 16 * kBlock);
  o.redis.password = "pw";
  o.redis.ttl_s = 0;
  o.redis.user = "least";
  auto good = MakeRedisTier(o, kBlock);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectRoundTrip(**good));
  (*good)->Shutdown();
  o.redis.user = "noping";
  auto bad = MakeRedisTier(o, kBlock);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("the tier needs PING, and GET, SET, EXISTS and DEL"),
            std::string_view::npos)
      << bad.status().ToString();
}

// An ACL that keeps the user off the keys under key_prefix, or off a command
// the tier runs, fails the open naming the rule to add, with or without
// ttl_s: else every write fails and nothing says why.
TEST_F(RedisAuthTest, AUserKeptOffThePrefixOrACommandIsRefusedAtOpen) {
  ASSERT_TRUE(
      server_->Command({"ACL", "SETUSER", "elsewhere", "on", ">pw", "~cache:*", "+@all"}).ok());
  ASSERT_TRUE(
      server_->Command({"ACL", "SETUSER", "nodel", "on", ">pw", "~*", "+@all", "-del"}).ok());
  TierOptions o = RedisTierOptionsFor({server_->endpoint()}, 16 * kBlock);
  o.redis.password = "pw";
  o.redis.ttl_s = 0;
  o.redis.user = "elsewhere";
  auto keys = MakeRedisTier(o, kBlock);
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().code(), StatusCode::kInvalidArgument);
  const std::string rule =
      "user 'elsewhere' may not use the keys under key_prefix '" + o.redis.key_prefix + "'";
  EXPECT_NE(keys.status().message().find(rule), std::string_view::npos) << keys.status().ToString();
  EXPECT_NE(keys.status().message().find("ACL SETUSER elsewhere ~" + o.redis.key_prefix + ":*"),
            std::string_view::npos)
      << keys.status().ToString();
  o.redis.user = "nodel";
  auto del = MakeRedisTier(o, kBlock);
  ASSERT_FALSE(del.ok());
  EXPECT_NE(del.status().message().find("user 'nodel' may not run DEL, which the tier uses"),
            std::string_view::npos)
      << del.status().ToString();
  EXPECT_NE(del.status().message().find("(ACL SETUSER nodel +del)"), std::string_view::npos);
  // The probes changed nothing on the server.
  auto size = server_->Command({"DBSIZE"});
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, "0");
}

}  // namespace
}  // namespace kvtier::testing
