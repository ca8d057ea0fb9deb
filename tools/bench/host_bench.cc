#include "tools/bench/host_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/tier.h"
#include "tools/bench/aligned_buffer.h"

namespace kvtier::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Source, slot and destination buffers of `blocks` blocks each, page-aligned
// (a relative offset between source and destination changes memcpy's speed
// by itself), written once so no page fault lands inside a timed loop.
struct Buffers {
  static Result<std::unique_ptr<Buffers>> Create(uint64_t blocks, uint64_t block_bytes) {
    if (block_bytes != 0 && blocks > UINT64_MAX / block_bytes) {
      return Status::ResourceExhausted("host bench: " + std::to_string(blocks) + " blocks of " +
                                       std::to_string(block_bytes) + " bytes overflow 64 bits");
    }
    const uint64_t n = blocks * block_bytes;
    KVTIER_ASSIGN_OR_RETURN(AlignedBuffer src, AlignedBuffer::Allocate(n));
    KVTIER_ASSIGN_OR_RETURN(AlignedBuffer slots, AlignedBuffer::Allocate(n));
    KVTIER_ASSIGN_OR_RETURN(AlignedBuffer dst, AlignedBuffer::Allocate(n));
    for (size_t i = 0; i < n; ++i) src.data()[i] = static_cast<std::byte>(i * 131 + 7);
    std::memset(slots.data(), 1, n);
    std::memset(dst.data(), 2, n);
    return std::unique_ptr<Buffers>(new Buffers{std::move(src), std::move(slots), std::move(dst)});
  }
  AlignedBuffer src, slots, dst;
};

struct Shape {
  uint64_t block_bytes;
  uint64_t blocks;  // working set
  uint32_t depth;
  uint64_t batches;  // per measurement
};

double MbPerSecond(uint64_t bytes, SteadyClock::duration d) {
  return static_cast<double>(bytes) / 1e6 / std::chrono::duration<double>(d).count();
}

// One batch through the tier: Write depth blocks, then Read them back.
Status TierBatch(Tier& tier, const Shape& s, Buffers& buf, uint64_t first) {
  std::vector<WriteOp> writes(s.depth);
  std::vector<ReadOp> reads(s.depth);
  for (uint32_t i = 0; i < s.depth; ++i) {
    const uint64_t slot = (first + i) % s.blocks;
    const BlockKey key{0, slot};
    writes[i] = {key, buf.src.subspan(slot * s.block_bytes, s.block_bytes), std::nullopt};
    reads[i] = {key, buf.dst.subspan(slot * s.block_bytes, s.block_bytes)};
  }
  const NamespaceId ns{1};
  KVTIER_RETURN_IF_ERROR(tier.Write(ns, writes).Wait().WithContext("host tier write"));
  return tier.Read(ns, reads).Wait().WithContext("host tier read");
}

void MemcpyBatch(const Shape& s, Buffers& buf, uint64_t first) {
  for (uint32_t i = 0; i < s.depth; ++i) {
    const uint64_t off = ((first + i) % s.blocks) * s.block_bytes;
    std::memcpy(buf.slots.data() + off, buf.src.data() + off, s.block_bytes);
  }
  for (uint32_t i = 0; i < s.depth; ++i) {
    const uint64_t off = ((first + i) % s.blocks) * s.block_bytes;
    std::memcpy(buf.dst.data() + off, buf.slots.data() + off, s.block_bytes);
  }
}

Result<double> TimeTier(Tier& tier, const Shape& s, Buffers& buf) {
  const auto start = SteadyClock::now();
  for (uint64_t b = 0; b < s.batches; ++b) {
    KVTIER_RETURN_IF_ERROR(TierBatch(tier, s, buf, b * s.depth));
  }
  return MbPerSecond(s.batches * s.depth * s.block_bytes * 2, SteadyClock::now() - start);
}

double TimeMemcpy(const Shape& s, Buffers& buf) {
  const auto start = SteadyClock::now();
  for (uint64_t b = 0; b < s.batches; ++b) MemcpyBatch(s, buf, b * s.depth);
  return MbPerSecond(s.batches * s.depth * s.block_bytes * 2, SteadyClock::now() - start);
}

Result<HostBenchRow> BenchOneSize(const HostBenchOptions& o, uint64_t block_bytes) {
  Shape s{block_bytes, std::max<uint64_t>(64, o.working_set_bytes / block_bytes), o.queue_depth, 0};
  s.depth = static_cast<uint32_t>(std::min<uint64_t>(s.depth, s.blocks));
  s.batches = std::max<uint64_t>(1, o.total_bytes / (2 * s.depth * block_bytes));

  TierOptions tier_options;
  tier_options.name = "host";
  tier_options.type = "host";
  // One batch of headroom: a replacing write may take its new slot before
  // the old one is released.
  // The arena gives each block a slot rounded up to 4 KiB (HostArena).
  tier_options.capacity_bytes = (s.blocks + s.depth) * ((block_bytes + 4095) / 4096 * 4096);
  tier_options.mlock = false;  // the buffers are pre-faulted; locking adds nothing here
  // The memcpy buffers come from the heap on ordinary pages; the arena gets
  // the same, so the ratio does not compare page kinds.
  tier_options.hugepages = false;
  TierContext context{block_bytes, SystemClock(), StderrLogSink(LogLevel::kWarning), {}};
  // The buffers outlive the tier (declared first).
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Buffers> buffers, Buffers::Create(s.blocks, block_bytes));
  Buffers& buf = *buffers;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Tier> tier, CreateTier(tier_options, context));

  // Warm-up: touch every arena slot and every buffer once, untimed.
  Shape warm = s;
  warm.batches = (s.blocks + s.depth - 1) / s.depth;
  KVTIER_RETURN_IF_ERROR(TimeTier(*tier, warm, buf).status());
  TimeMemcpy(warm, buf);

  HostBenchRow row{block_bytes, s.depth, s.blocks, 0, 0, 0};
  for (uint32_t r = 0; r < o.rounds; ++r) {
    KVTIER_ASSIGN_OR_RETURN(double tier_mb_s, TimeTier(*tier, s, buf));
    row.tier_mb_s = std::max(row.tier_mb_s, tier_mb_s);
    row.memcpy_mb_s = std::max(row.memcpy_mb_s, TimeMemcpy(s, buf));
  }
  row.ratio = row.memcpy_mb_s > 0 ? row.tier_mb_s / row.memcpy_mb_s : 0;
  return row;
}

}  // namespace

Status HostBenchOptions::Validate() const {
  if (block_sizes.empty()) return Status::InvalidArgument("no block sizes given");
  for (uint64_t b : block_sizes) {
    if (b == 0) return Status::InvalidArgument("block sizes must be > 0");
  }
  if (total_bytes == 0) return Status::InvalidArgument("--total must be > 0");
  if (queue_depth == 0) return Status::InvalidArgument("queue depth must be > 0");
  if (rounds == 0) return Status::InvalidArgument("rounds must be > 0");
  return Status::Ok();
}

Result<std::vector<HostBenchRow>> RunHostBench(const HostBenchOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  std::vector<HostBenchRow> rows;
  for (uint64_t block_bytes : options.block_sizes) {
    KVTIER_ASSIGN_OR_RETURN(HostBenchRow row, BenchOneSize(options, block_bytes));
    rows.push_back(row);
  }
  return rows;
}

}  // namespace kvtier::bench
