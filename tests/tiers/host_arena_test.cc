#include "tiers/host/host_arena.h"

#include <gtest/gtest.h>

#include <set>

namespace kvtier::internal {
namespace {

TEST(HostArena, SlotsAreAlignedDistinctAndReusable) {
  auto arena = HostArena::Create({.capacity_bytes = 10 * 8192, .slot_bytes = 5000,
                                  .hugepages = false, .mlock = false},
                                 nullptr);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  HostArena& a = **arena;
  EXPECT_EQ(a.slot_count(), 10u);  // 5000 rounds up to an 8192-byte stride
  std::set<uint32_t> seen;
  for (int i = 0; i < 10; ++i) {
    auto s = a.Allocate();
    ASSERT_TRUE(s.has_value());
    EXPECT_TRUE(seen.insert(*s).second);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.Slot(*s).data()) % 4096, 0u);
    EXPECT_EQ(a.Slot(*s).size(), 5000u);
  }
  EXPECT_FALSE(a.Allocate().has_value());
  EXPECT_EQ(a.used_slots(), 10u);
  a.Free(3);
  EXPECT_EQ(a.Allocate(), std::optional<uint32_t>(3));
}

TEST(HostArena, CapacityBelowOneBlockIsRefused) {
  auto arena = HostArena::Create({.capacity_bytes = 4096, .slot_bytes = 8192}, nullptr);
  ASSERT_FALSE(arena.ok());
  EXPECT_EQ(arena.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(arena.status().message().find("holds no block"), std::string_view::npos);
}

}  // namespace
}  // namespace kvtier::internal
