// Tests of the option structs' own validation (core/options.cc), which the
// config reader relies on as its last check.
#include "kvtier/options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace kvtier {
namespace {

// The names as error messages list them ("a, b, c").
std::string ListOf(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

std::string Message(const Status& s) { return std::string(s.message()); }

TierOptions HostTier(const std::string& name = "host") {
  TierOptions t;
  t.name = name;
  t.type = "host";
  t.capacity_bytes = 64 * kMiB;
  return t;
}

RuntimeOptions ValidRuntime() {
  RuntimeOptions r;
  r.block_bytes = 256 * kKiB;
  r.tiers.push_back(HostTier());
  return r;
}

TEST(WatermarkOptionsTest, AcceptsOnlyZeroBelowLowBelowHighUpToOne) {
  struct Case {
    double low, high;
    bool ok;
  } cases[] = {
      {0.85, 0.95, true}, {0.1, 1.0, true},  {0.5, 0.5, false},
      {0.9, 0.8, false},  {0.0, 0.5, false}, {-0.1, 0.5, false},
      {0.5, 1.01, false}, {NAN, 0.9, false}, {0.5, NAN, false},
  };
  for (const Case& c : cases) {
    WatermarkOptions w;
    w.low = c.low;
    w.high = c.high;
    Status s = w.Validate();
    EXPECT_EQ(s.ok(), c.ok) << c.low << " " << c.high;
    if (!c.ok) EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  }
  WatermarkOptions w;
  w.low = 0.9;
  w.high = 0.8;
  EXPECT_EQ(Message(w.Validate()),
            "watermarks low 0.9 / high 0.8: low is not below high; expected 0 < low < high <= 1");
}

TEST(TierOptionsTest, ValidatesEveryField) {
  EXPECT_TRUE(HostTier().Validate().ok());
  TierOptions t = HostTier();
  t.name = "";
  EXPECT_EQ(Message(t.Validate()), "tier name is empty; expected a name");
  t = HostTier("Host");
  EXPECT_NE(Message(t.Validate()).find("outside [a-z0-9_-]"), std::string::npos);
  t = HostTier("ok_name-2");
  EXPECT_TRUE(t.Validate().ok());
  t = HostTier();
  t.type = "";
  EXPECT_EQ(Message(t.Validate()), "tier 'host': type is empty; expected a tier type");
  t = HostTier();
  t.capacity_bytes = 0;
  EXPECT_EQ(Message(t.Validate()),
            "tier 'host': capacity is 0; expected a capacity of at least 1 byte");
  t.capacity_bytes = 1024 * kTiB;  // exactly 1 PiB is allowed
  EXPECT_TRUE(t.Validate().ok());
  t.capacity_bytes = 1024 * kTiB + 1;
  EXPECT_NE(Message(t.Validate()).find("is absurd; expected at most 1 PiB"), std::string::npos);
  t = HostTier();
  t.watermarks.low = 0.99;
  EXPECT_NE(Message(t.Validate()).find("tier 'host': watermarks low 0.99"), std::string::npos);
  t = HostTier();
  t.eviction = "mru";
  EXPECT_EQ(Message(t.Validate()), "tier 'host': unknown eviction policy 'mru'; expected one of: " +
                                       ListOf(EvictionPolicyNames()));
  t = HostTier();
  t.admission = {};
  EXPECT_NE(Message(t.Validate()).find("admission list is empty"), std::string::npos);
  t.admission = {"always", "never"};
  EXPECT_EQ(Message(t.Validate()),
            "tier 'host': unknown admission policy 'never'; expected one of: " +
                ListOf(AdmissionPolicyNames()));
  t.admission = {"frequency", "always", "frequency"};
  EXPECT_EQ(Message(t.Validate()),
            "tier 'host': admission policy 'frequency' is listed twice; expected each once");
  t = HostTier("ssd");
  t.type = "nvme";
  EXPECT_NE(Message(t.Validate()).find("nvme tier has no path"), std::string::npos);
  t.path = "/tmp/x";
  EXPECT_TRUE(t.Validate().ok());
}

TEST(ModelOptionsTest, PresetsHaveTheDocumentedGeometry) {
  struct Case {
    const char* name;
    uint32_t layers, heads, head, tokens, elem;
    const char* dtype;
    uint64_t block_bytes;
  } cases[] = {
      {"tiny", 4, 2, 16, 512, 2, "fp16", 256 * kKiB},
      {"small", 2, 1, 16, 512, 2, "fp16", 64 * kKiB},
      {"llama3-8b", 32, 8, 128, 16, 2, "fp16", 2 * kMiB},
      {"qwen2-7b", 28, 4, 128, 16, 2, "bf16", 917504},
  };
  for (const Case& c : cases) {
    ModelOptions m;
    ASSERT_TRUE(ApplyModelPreset(c.name, &m).ok()) << c.name;
    EXPECT_EQ(m.preset, c.name);
    EXPECT_EQ(m.num_layers, c.layers);
    EXPECT_EQ(m.num_kv_heads, c.heads);
    EXPECT_EQ(m.head_size, c.head);
    EXPECT_EQ(m.block_tokens, c.tokens);
    EXPECT_EQ(m.dtype, c.dtype);
    EXPECT_EQ(m.ElementBytes(), c.elem);
    EXPECT_EQ(m.BlockBytes(), c.block_bytes) << c.name;
    EXPECT_TRUE(m.Validate().ok()) << c.name;
  }
  ModelOptions defaults;
  EXPECT_EQ(defaults.BlockBytes(), 256 * kKiB);  // the defaults are the tiny preset
  Status s = ApplyModelPreset("gpt5", &defaults);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s),
            "unknown model preset 'gpt5'; expected one of: tiny, small, llama3-8b, qwen2-7b");
}

TEST(ModelOptionsTest, ElementBytesLayoutAndNamespace) {
  ModelOptions m;
  const std::pair<const char*, uint32_t> dtypes[] = {{"fp16", 2}, {"bf16", 2}, {"fp8", 1},
                                                     {"fp32", 4}, {"int4", 0}, {"", 0}};
  for (const auto& [dtype, bytes] : dtypes) {
    m.dtype = dtype;
    EXPECT_EQ(m.ElementBytes(), bytes) << dtype;
  }
  m = ModelOptions();
  m.layout = KvLayoutKind::kVllmHnd;
  KvLayout l = m.Layout(7);
  EXPECT_EQ(l.kind, KvLayoutKind::kVllmHnd);
  EXPECT_EQ(l.num_blocks, 7u);
  EXPECT_EQ(l.num_layers, 4u);
  EXPECT_EQ(l.num_kv_heads, 2u);
  EXPECT_EQ(l.head_size, 16u);
  EXPECT_EQ(l.block_tokens, 512u);
  EXPECT_EQ(l.elem_bytes, 2u);
  m.tp_rank = 1;
  m.tp_size = 2;
  NamespaceSpec ns = m.Namespace();
  EXPECT_EQ(ns.model_id, "kvtier/tiny");
  EXPECT_EQ(ns.weights_revision, "main");
  EXPECT_EQ(ns.dtype, "fp16");
  EXPECT_EQ(ns.layout_signature, m.Layout(1).Signature());
  EXPECT_EQ(ns.tp_rank, 1u);
  EXPECT_EQ(ns.tp_size, 2u);
  EXPECT_EQ(ns.block_tokens, 512u);
}

TEST(ModelOptionsTest, ValidateRejectsBadGeometry) {
  ModelOptions m;
  m.num_layers = 0;
  EXPECT_EQ(Message(m.Validate()), "model layers is 0; expected a value of at least 1");
  m = ModelOptions();
  m.dtype = "int4";
  EXPECT_EQ(Message(m.Validate()),
            "unknown model dtype 'int4'; expected one of: fp16, bf16, fp8, fp32");
  m = ModelOptions();
  m.tp_rank = 2;
  m.tp_size = 2;
  EXPECT_EQ(Message(m.Validate()),
            "model tp_rank 2 is not below tp_size 2; expected 0 <= tp_rank < tp_size");
  m = ModelOptions();
  // 4 * 2 * 512 * 2 * 131072 * 2 = 2 GiB: too large, and the 32-bit fields
  // must not wrap the product around either.
  m.head_size = 131072;
  EXPECT_NE(Message(m.Validate()).find("larger than 1 GiB"), std::string::npos);
  m.head_size = 0xFFFFFFFFu;
  m.block_tokens = 0xFFFFFFFFu;
  m.num_layers = 0xFFFFFFFFu;
  m.num_kv_heads = 0xFFFFFFFFu;
  EXPECT_NE(Message(m.Validate()).find("larger than 1 GiB"), std::string::npos);
  m = ModelOptions();
  m.head_size = 65536;  // exactly 1 GiB
  EXPECT_TRUE(m.Validate().ok());
}

// mla keeps one plane (no separate K and V), so its block is half the size
// of the same geometry in another layout: 1 GiB here, where nhd is 2 GiB.
TEST(ModelOptionsTest, MlaBlockSizeCountsOnePlane) {
  ModelOptions m;
  m.num_layers = 4;
  m.num_kv_heads = 1;
  m.block_tokens = 512;
  m.head_size = 262144;
  m.layout = KvLayoutKind::kMla;
  EXPECT_EQ(m.BlockBytes(), kGiB);
  EXPECT_TRUE(m.Validate().ok()) << Message(m.Validate());
  m.head_size = 262144 + 1;
  EXPECT_NE(Message(m.Validate()).find("larger than 1 GiB"), std::string::npos);
  m.head_size = 262144;
  m.layout = KvLayoutKind::kVllmNhd;
  EXPECT_NE(Message(m.Validate()).find("larger than 1 GiB"), std::string::npos);
}

TEST(RuntimeOptionsTest, ValidateChecksTheTierList) {
  EXPECT_TRUE(ValidRuntime().Validate().ok());
  RuntimeOptions r = ValidRuntime();
  r.block_bytes = 0;
  EXPECT_NE(Message(r.Validate()).find("block_bytes is 0"), std::string::npos);
  r = ValidRuntime();
  r.tiers.clear();
  EXPECT_EQ(Message(r.Validate()), "no tiers; expected at least one tier");
  r = ValidRuntime();
  r.tiers[0].type = "redis";
  EXPECT_EQ(Message(r.Validate()),
            "first tier 'host' has type 'redis'; expected the first tier to be a host tier");
  r = ValidRuntime();
  r.tiers.push_back(HostTier("host"));
  EXPECT_EQ(Message(r.Validate()), "duplicate tier name 'host'; expected unique tier names");
  r = ValidRuntime();
  for (size_t i = 1; i < kMaxTiers; ++i) r.tiers.push_back(HostTier("t" + std::to_string(i)));
  EXPECT_TRUE(r.Validate().ok());
  r.tiers.push_back(HostTier("one-too-many"));
  EXPECT_EQ(Message(r.Validate()), "9 tiers; expected at most 8");
  r = ValidRuntime();
  r.tiers.push_back(HostTier("second"));
  r.tiers[1].capacity_bytes = 0;
  EXPECT_NE(Message(r.Validate()).find("tier 'second': capacity is 0"), std::string::npos);
  r = ValidRuntime();
  r.worker_threads = 0;
  EXPECT_EQ(Message(r.Validate()), "worker_threads is 0; expected at least 1");
  r = ValidRuntime();
  r.max_queued_requests = 0;
  EXPECT_EQ(Message(r.Validate()), "max_queued_requests is 0; expected at least 1");
}

// A host tier holds a block in a slot rounded up to 4 KiB: blocks of 512
// bytes in 2 KiB are none, and 8 KiB hold two, whatever 512 divides.
TEST(RuntimeOptionsTest, HostCapacityCountsSlotsOf4KiB) {
  RuntimeOptions r = ValidRuntime();
  r.block_bytes = 512;
  r.tiers[0].capacity_bytes = 2048;
  EXPECT_EQ(Message(r.Validate()),
            "tier 'host': capacity 2048 bytes is below one block of 4096 bytes; expected a "
            "capacity of at least one block");
  r.tiers[0].capacity_bytes = 8192;
  EXPECT_TRUE(r.Validate().ok()) << r.Validate().ToString();
  r.state_blocks = 2;  // 16 blocks of 512 bytes, but two slots
  EXPECT_NE(Message(r.Validate()).find("tier 'host': holds 2 blocks, too few for a state"),
            std::string::npos)
      << Message(r.Validate());
  r.state_blocks = 1;
  EXPECT_TRUE(r.Validate().ok()) << r.Validate().ToString();
}

// Two lower tiers writing one store would remove each other's blocks.
TEST(RuntimeOptionsTest, TwoTiersCannotShareAStore) {
  auto lower = [](const std::string& name, const std::string& type) {
    TierOptions t = HostTier(name);
    t.type = type;
    if (type == "nvme") t.path = "/data/kv";
    if (type != "nvme") t.servers = {"Cache-1:6379"};
    t.remote.secret = "s3cret";
    return t;
  };
  RuntimeOptions r = ValidRuntime();
  r.tiers.push_back(lower("a", "redis"));
  r.tiers.push_back(lower("b", "redis"));
  r.tiers.back().servers = {"other:6379", "cache-1:6379"};
  EXPECT_EQ(Message(r.Validate()),
            "tier 'b' stores in redis cache-1:6379 db 0 under prefix 'kvtier', as tier 'a' does; "
            "expected each tier its own store (one would remove the other's blocks)");
  r.tiers.back().redis.key_prefix = "kvtier2";  // another key space of one server
  EXPECT_TRUE(r.Validate().ok()) << r.Validate().ToString();
  r.tiers.back().redis.key_prefix = "kvtier";
  r.tiers.back().redis.db = 1;
  EXPECT_TRUE(r.Validate().ok()) << r.Validate().ToString();

  r = ValidRuntime();
  r.tiers.push_back(lower("a", "nvme"));
  r.tiers.push_back(lower("b", "nvme"));
  r.tiers.back().path = "/data/./kv";
  EXPECT_NE(Message(r.Validate()).find("tier 'b' stores in the nvme file /data/kv, as tier 'a'"),
            std::string::npos);
  r.tiers.back().path = "/data/kv2";
  r.tiers.back().nvme.index_path = "/data/kv.index";  // tier a's index, by default
  EXPECT_NE(
      Message(r.Validate()).find("tier 'b' stores in the nvme index /data/kv.index, as tier 'a'"),
      std::string::npos);
  r.tiers.back().nvme.index_path.clear();
  EXPECT_TRUE(r.Validate().ok()) << r.Validate().ToString();

  r = ValidRuntime();
  r.tiers.push_back(lower("a", "remote"));
  r.tiers.push_back(lower("b", "remote"));
  EXPECT_NE(Message(r.Validate()).find("tier 'b' stores in kvtier-memd cache-1:6379, as tier 'a'"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtier
