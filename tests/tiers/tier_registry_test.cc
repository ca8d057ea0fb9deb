#include <gtest/gtest.h>

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
  for (const char* type : {"nvme", "redis", "remote"}) {
    auto t = CreateTier(Opts(type), TierContext{4096});
    ASSERT_FALSE(t.ok()) << type;
    EXPECT_EQ(t.status().code(), StatusCode::kNotSupported) << t.status().ToString();
  }
}

TEST(TierRegistry, ZeroBlockSizeIsRefused) {
  auto t = CreateTier(Opts("host"), TierContext{0});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
