#include <gtest/gtest.h>

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
  // NotSupported naming the CMake switch, never a crash or a wrong type.
  struct Case {
    const char* type;
    bool built;
    const char* switch_name;
  };
  const Case cases[] = {
      {"nvme", KVTIER_HAVE_URING && KVTIER_HAVE_ROCKSDB, "KVTIER_WITH_URING"},
      {"redis", KVTIER_HAVE_REDIS == 1, "KVTIER_WITH_REDIS"},
  };
  for (const Case& c : cases) {
    if (c.built) continue;
    auto t = CreateTier(Opts(c.type), TierContext{4096});
    ASSERT_FALSE(t.ok()) << c.type;
    EXPECT_EQ(t.status().code(), StatusCode::kNotSupported) << t.status().ToString();
    EXPECT_NE(t.status().message().find(c.switch_name), std::string_view::npos);
  }
}

TEST(TierRegistry, ZeroBlockSizeIsRefused) {
  auto t = CreateTier(Opts("host"), TierContext{0});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
