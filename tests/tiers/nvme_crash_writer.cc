// Child process of the NVMe crash test: opens the tier in the directory given
// as argv[1] and writes blocks of round argv[2] as fast as it can. After each
// Flush() it prints "committed N" (blocks 0..N-1 are durable and indexed).
// When the tier is full it prints "full N" and waits to be killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/block_data.h"
#include "tests/tiers/nvme_crash_common.h"
#include "tiers/nvme/nvme_tier.h"

using namespace kvtier;
using namespace kvtier::testing;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: nvme_crash_writer DIR ROUND\n");
    return 2;
  }
  const uint64_t round = std::strtoull(argv[2], nullptr, 10);
  auto tier = internal::OpenNvmeTier(CrashOptions(argv[1]), TierContext{kCrashBlockBytes});
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  uint64_t next = 0;
  for (;;) {
    std::vector<std::vector<std::byte>> data;
    std::vector<WriteOp> ops;
    for (uint64_t i = next; i < next + kCrashBatch; ++i) {
      data.push_back(BlockBytes(CrashKey(round, i), kCrashBlockBytes, round));
    }
    for (uint64_t i = 0; i < kCrashBatch; ++i) ops.push_back({CrashKey(round, next + i), data[i]});
    Completion c = (*tier)->Write(kCrashNs, ops);
    if (!c.Wait().ok()) break;
    next += kCrashBatch;
    if (next % kCrashFlushEvery == 0) {
      if (!(*tier)->Flush().ok()) break;
      std::printf("committed %llu\n", static_cast<unsigned long long>(next));
      std::fflush(stdout);
    }
  }
  std::printf("full %llu\n", static_cast<unsigned long long>(next));
  std::fflush(stdout);
  for (;;) pause();
}
