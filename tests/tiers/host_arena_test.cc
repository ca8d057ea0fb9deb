#include "tiers/host/host_arena.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

namespace kvtier::internal {
namespace {

TEST(HostArena, SlotsAreAlignedDistinctAndReusable) {
  auto arena = HostArena::Create(
      {.capacity_bytes = 10 * 8192, .slot_bytes = 5000, .hugepages = false, .mlock = false},
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

// More blocks than a slot index holds: the message gives the count and the
// limit (it said "too many slots").
TEST(HostArena, MoreBlocksThanSlotIndicesAreRefusedWithTheLimit) {
  auto arena =
      HostArena::Create({.capacity_bytes = uint64_t{1} << 50, .slot_bytes = 4096}, nullptr);
  ASSERT_FALSE(arena.ok());
  EXPECT_EQ(arena.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(arena.status().message(),
            "host arena: capacity of 1125899906842624 bytes is 274877906944 blocks of 4096 "
            "bytes; at most 4294967294 fit one tier");
}

// Free 2 MiB huge pages, or -1 when the kernel has no such pool.
long FreeHugePages2MiB() {
  std::ifstream in("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
  long n = -1;
  return in >> n ? n : -1;
}

// The arena maps 2 MiB huge pages whatever the system's default huge page
// size, and gives every one back when it goes.
TEST(HostArena, HugePagesAreGivenBack) {
  const long before = FreeHugePages2MiB();
  if (before < 2) GTEST_SKIP() << "fewer than two free 2 MiB huge pages are reserved";
  {
    auto arena = HostArena::Create(
        {.capacity_bytes = 4 << 20, .slot_bytes = 1 << 20, .hugepages = true, .mlock = false},
        nullptr);
    ASSERT_TRUE(arena.ok()) << arena.status().ToString();
    if (!(*arena)->huge_pages()) GTEST_SKIP() << "the huge page mapping was refused";
    std::byte* slot = (*arena)->Slot(0).data();
    slot[0] = std::byte{1};  // fault a page in
    EXPECT_LT(FreeHugePages2MiB(), before);
  }
  EXPECT_EQ(FreeHugePages2MiB(), before);
}

}  // namespace
}  // namespace kvtier::internal
