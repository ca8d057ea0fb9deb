// A small MemdPool for server-side unit tests: plain pages, no prefaulting
// and no eviction before every slot is taken, so a test decides exactly
// which slots are used.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "tiers/remote/memd_pool.h"

namespace kvtier::internal::memd {

inline std::unique_ptr<MemdPool> SmallPool(uint64_t slots, uint64_t slot_bytes) {
  MemdPoolOptions o;
  o.pool_bytes = slots * slot_bytes;
  o.slot_bytes = slot_bytes;
  o.hugepages = false;
  o.prefault = false;
  o.high_watermark = 1.0;
  o.low_watermark = 0.99;
  auto p = MemdPool::Create(o, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(p).value() : nullptr;
}

}  // namespace kvtier::internal::memd
