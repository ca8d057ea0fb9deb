// Shared by the NVMe tier tests: scratch directories, tier options, and a
// tier over a fault-injecting engine.
#pragma once

#include <sys/vfs.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "io/io_engine.h"
#include "kvtier/options.h"
#include "kvtier/tier.h"
#include "tests/support/nvme_fault_engine.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {

inline constexpr long kTmpfsMagic = 0x01021994;

// A fresh directory removed with everything in it on destruction. The
// default parent is the build directory: a disk file system, where O_DIRECT
// works (a tmpfs /tmp would silently test the buffered fallback only).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& parent = KVTIER_BINARY_DIR) {
    std::string pattern = parent + "/nvme-test-XXXXXX";
    char* made = mkdtemp(pattern.data());
    if (made != nullptr) path_ = made;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  bool ok() const { return !path_.empty(); }

 private:
  std::string path_;
};

inline bool IsTmpfs(const std::string& path) {
  struct statfs fs{};
  return statfs(path.c_str(), &fs) == 0 && fs.f_type == kTmpfsMagic;
}

inline TierOptions NvmeOptions(const std::string& dir, uint64_t capacity_blocks,
                               uint64_t block_bytes, uint64_t region_bytes = 256 * 1024) {
  TierOptions o;
  o.name = "ssd";
  o.type = "nvme";
  o.capacity_bytes = capacity_blocks * block_bytes;
  o.path = dir + "/data";
  o.region_bytes = region_bytes;
  o.nvme.io_timeout_ms = 2000;
  o.nvme.commit_every_blocks = 8;
  return o;
}

// The tier of `o` over io_uring (queue depth 16, o's I/O timeout) behind
// NewFaultIoEngine; `faults` must outlive the tier. `copies_lost` is the
// context's (TierContext::copies_lost).
inline Result<std::unique_ptr<internal::NvmeTier>> OpenNvmeWithFaults(
    const TierOptions& o, uint64_t block_bytes, IoFaults* faults,
    std::function<void(NamespaceId, std::span<const BlockKey>)> copies_lost = {}) {
  auto inner =
      internal::NewUringEngine({.queue_depth = 16, .timeout_ms = o.nvme.io_timeout_ms});
  if (!inner.ok()) return inner.status();
  TierContext context{block_bytes};
  context.copies_lost = std::move(copies_lost);
  return internal::OpenNvmeTier(o, context, NewFaultIoEngine(std::move(inner).value(), faults));
}

// Collects what a tier reports lost (TierContext::copies_lost), from any thread.
struct LostCopies {
  std::mutex mu;
  std::vector<std::pair<NamespaceId, BlockKey>> keys;
  std::function<void(NamespaceId, std::span<const BlockKey>)> Sink() {
    return [this](NamespaceId ns, std::span<const BlockKey> lost) {
      std::lock_guard lock(mu);
      for (const BlockKey& k : lost) keys.emplace_back(ns, k);
    };
  }
  std::vector<std::pair<NamespaceId, BlockKey>> Taken() {
    std::lock_guard lock(mu);
    return keys;
  }
};

}  // namespace kvtier::testing
