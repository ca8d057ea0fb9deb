// The NVMe tier under a failing device: EIO on read and write, ENOSPC, torn
// reads, short reads and writes, I/O past the deadline, and bytes flipped in
// the data file. Every case ends as a per-block error or a miss, never as
// wrong bytes, never as a hang. The injected errors arrive as a real
// device's do: later, on the engine's thread.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "tests/support/block_data.h"
#include "tests/support/nvme_fault_engine.h"
#include "tests/support/time_scale.h"
#include "tests/tiers/nvme_blocks.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::DiskBytes;
using internal::IoCompletion;
using internal::IoOp;
using internal::IoRequest;
using internal::NvmeTier;

constexpr NamespaceId kNs{0x99};
constexpr uint64_t kBytes = 16 * 1024;
constexpr auto kNoHang = std::chrono::seconds(10);

class NvmeFaultTest : public ::testing::Test {
 protected:
  void Open(uint32_t timeout_ms = 2000, uint64_t capacity_blocks = 32,
            uint64_t region_bytes = 256 * 1024) {
    ASSERT_TRUE(dir_.ok());
    TierOptions o = NvmeOptions(dir_.path(), capacity_blocks, kBytes, region_bytes);
    o.nvme.io_timeout_ms = timeout_ms;
    auto t = OpenNvmeWithFaults(o, kBytes, &faults_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tier_ = std::move(t).value();
  }
  void TearDown() override {
    if (tier_) tier_->Shutdown();
  }

  Completion Write(uint64_t first, uint64_t count) {
    data_.clear();
    ops_.clear();
    for (uint64_t i = first; i < first + count; ++i) data_.push_back(BlockBytes(TestKey(i), kBytes));
    for (uint64_t i = 0; i < count; ++i) ops_.push_back({TestKey(first + i), data_[i]});
    Completion c = tier_->Write(kNs, ops_);
    EXPECT_TRUE(c.WaitFor(kNoHang).ok() || c.Poll()) << "write hung";
    return c;
  }

  // Reads block i into `out`; waits, but never forever.
  Completion Read(uint64_t i, std::vector<std::byte>& out) {
    out.assign(kBytes, std::byte{0});
    ReadOp rd{TestKey(i), out};
    Completion c = tier_->Read(kNs, std::span(&rd, 1));
    EXPECT_TRUE(c.WaitFor(kNoHang).ok() || c.Poll()) << "read hung";
    return c;
  }

  bool Contains(uint64_t i) {
    const BlockKey key = TestKey(i);
    return tier_->Contains(kNs, std::span(&key, 1)).result(0).ok();
  }

  std::string OffsetOf(uint64_t i) {
    auto off = tier_->TEST_FileOffset(kNs, TestKey(i));
    return off ? std::to_string(*off) : "none";
  }

  ScratchDir dir_;
  IoFaults faults_;
  std::unique_ptr<NvmeTier> tier_;
  std::vector<std::vector<std::byte>> data_;
  std::vector<WriteOp> ops_;
};

TEST_F(NvmeFaultTest, EioOnReadIsAPerBlockErrorAndTheBlockStays) {
  Open();
  ASSERT_TRUE(Write(0, 4).status().ok());
  faults_.read_errno = EIO;
  std::vector<std::byte> out;
  Completion r = Read(2, out);
  EXPECT_EQ(r.result(0).ToString(),
            "io_error: fault engine read at offset " + OffsetOf(2) + ": Input/output error");
  EXPECT_EQ(r.bytes(0), 0u);
  faults_.read_errno = 0;
  Completion again = Read(2, out);
  ASSERT_TRUE(again.result(0).ok()) << again.result(0).ToString();
  EXPECT_EQ(out, BlockBytes(TestKey(2), kBytes));
  EXPECT_EQ(tier_->Counters().errors, 1u);
}

TEST_F(NvmeFaultTest, EioOnWriteFailsEachBlockAndStoresNothing) {
  Open();
  faults_.write_errno = EIO;
  Completion w = Write(0, 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(w.result(i).code(), StatusCode::kIOError) << w.result(i).ToString();
    EXPECT_NE(w.result(i).message().find("fault engine write at offset"), std::string::npos);
  }
  EXPECT_EQ(tier_->Usage().blocks, 0u);
  EXPECT_EQ(tier_->Usage().used_bytes, 0u);
  faults_.write_errno = 0;
  std::vector<std::byte> out;
  EXPECT_EQ(Read(1, out).result(0).code(), StatusCode::kNotFound);
  ASSERT_TRUE(Write(0, 3).status().ok());
  EXPECT_TRUE(Read(1, out).result(0).ok());
}

TEST_F(NvmeFaultTest, EnospcOnWriteIsResourceExhausted) {
  Open();
  faults_.write_errno = ENOSPC;
  Completion w = Write(0, 2);
  EXPECT_EQ(w.result(0).code(), StatusCode::kResourceExhausted);
  EXPECT_NE(w.result(0).message().find("No space left on device"), std::string::npos)
      << w.result(0).ToString();
  EXPECT_EQ(tier_->Usage().blocks, 0u);
}

TEST_F(NvmeFaultTest, TornReadsAreCorruptionNeverData) {
  Open();
  ASSERT_TRUE(Write(0, 4).status().ok());
  faults_.torn_reads = true;
  // An unaligned buffer takes the bounce path, which copies into the
  // caller's buffer only a block that passed its checks. (An aligned one is
  // read into directly, so a failed read may leave device bytes there.)
  const std::byte kPattern{0x5A};
  std::vector<std::byte> buf(kBytes + 1, kPattern);
  std::span<std::byte> dst = std::span(buf).subspan(1);
  ASSERT_FALSE(internal::IsAligned(dst.data()));
  ReadOp rd{TestKey(1), dst};
  Completion r = tier_->Read(kNs, std::span(&rd, 1));
  ASSERT_TRUE(r.WaitFor(kNoHang).ok() || r.Poll()) << "read hung";
  EXPECT_EQ(r.result(0).ToString(), "corruption: nvme block " + ToHex(TestKey(1)) +
                                        " (region 1, offset 20480): block payload: checksum "
                                        "mismatch for key " + ToHex(TestKey(1)));
  EXPECT_EQ(r.bytes(0), 0u);
  EXPECT_EQ(buf, std::vector<std::byte>(kBytes + 1, kPattern))
      << "the torn bytes reached the caller's buffer";
  faults_.torn_reads = false;
  std::vector<std::byte> out;
  EXPECT_EQ(Read(1, out).result(0).code(), StatusCode::kNotFound) << "a corrupt block is dropped";
  EXPECT_TRUE(Read(0, out).result(0).ok());
  EXPECT_EQ(tier_->Counters().corruptions, 1u);
  EXPECT_EQ(tier_->Stats().corruptions, 1u);
}

// Errno faults complete as a device's errors do: after Submit returned, on
// the engine's thread, never inside Submit on the caller's.
TEST(NvmeFaultEngine, ErrnoFaultsCompleteOnTheEnginesThread) {
  IoFaults faults;
  auto inner = internal::NewUringEngine({});
  ASSERT_TRUE(inner.ok()) << inner.status().ToString();
  auto engine = NewFaultIoEngine(std::move(inner).value(), &faults);
  faults.read_errno = EIO;
  faults.write_errno = ENOSPC;
  faults.fsync_errno = EIO;
  char buf[4096] = {};
  std::mutex mu;
  std::vector<std::string> got(3);
  std::vector<std::thread::id> threads(3);
  std::promise<void> all_done;
  size_t left = 3;
  std::vector<IoRequest> reqs(3);
  const IoOp ops[] = {IoOp::kRead, IoOp::kWrite, IoOp::kFsync};
  for (size_t i = 0; i < 3; ++i) {
    reqs[i].op = ops[i];
    reqs[i].offset = 4096 * i;
    if (ops[i] != IoOp::kFsync) reqs[i].iov.push_back({buf, sizeof(buf)});
    reqs[i].id = i;
    reqs[i].done = [&](const IoCompletion& c) {
      std::lock_guard lock(mu);
      got[c.id] = c.status.ToString() + ", " + std::to_string(c.bytes) + " bytes";
      threads[c.id] = std::this_thread::get_id();
      if (--left == 0) all_done.set_value();
    };
  }
  ASSERT_TRUE(engine->Submit(std::move(reqs)).ok());
  ASSERT_EQ(all_done.get_future().wait_for(kNoHang), std::future_status::ready);
  engine->Shutdown();
  EXPECT_EQ(got[0], "io_error: fault engine read at offset 0: Input/output error, 0 bytes");
  EXPECT_EQ(got[1],
            "resource_exhausted: fault engine write at offset 4096: No space left on device, "
            "0 bytes");
  EXPECT_EQ(got[2], "io_error: fault engine fsync at offset 8192: Input/output error, 0 bytes");
  for (const std::thread::id& t : threads) EXPECT_NE(t, std::this_thread::get_id());
  EXPECT_EQ(faults.injected.load(), 3u);
}

// The device writes half of each block and says so (OK, fewer bytes). The
// block's Put fails; nothing of it is indexed, so it is absent, not torn.
TEST_F(NvmeFaultTest, ShortWriteFailsTheBlockAndLeavesItAbsent) {
  Open();
  faults_.short_writes = true;
  Completion w = Write(0, 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(w.result(i).code(), StatusCode::kIOError) << w.result(i).ToString();
    EXPECT_NE(w.result(i).message().find(": short write: 10240 of 20480 bytes"), std::string::npos)
        << w.result(i).ToString();
    EXPECT_EQ(w.bytes(i), 0u);
  }
  EXPECT_GE(faults_.injected.load(), 3u);
  faults_.short_writes = false;
  EXPECT_EQ(tier_->Usage().blocks, 0u);
  EXPECT_EQ(tier_->Usage().used_bytes, 0u);
  std::vector<std::byte> out;
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(Contains(i)) << i;
    EXPECT_EQ(Read(i, out).result(0).code(), StatusCode::kNotFound) << i;
  }
  ASSERT_TRUE(tier_->Flush().ok());
  EXPECT_EQ(tier_->Counters().errors, 3u);
  ASSERT_TRUE(Write(0, 3).status().ok());
  EXPECT_TRUE(Read(1, out).result(0).ok());
  EXPECT_EQ(out, BlockBytes(TestKey(1), kBytes));
}

// The device reads half of the block and says so. That is an I/O error,
// like EIO: no bytes reach the caller, and the block, whose copy on disk is
// fine, is neither counted corrupt nor dropped.
TEST_F(NvmeFaultTest, ShortReadIsAnIoErrorAndTheBlockStays) {
  Open();
  ASSERT_TRUE(Write(0, 4).status().ok());
  faults_.short_reads = true;
  const std::byte kPattern{0x5A};
  // Unaligned: read through a bounce buffer, one request of 20 KiB.
  std::vector<std::byte> buf(kBytes + 1, kPattern);
  ReadOp rd{TestKey(1), std::span(buf).subspan(1)};
  Completion r = tier_->Read(kNs, std::span(&rd, 1));
  ASSERT_TRUE(r.WaitFor(kNoHang).ok() || r.Poll()) << "read hung";
  EXPECT_EQ(r.result(0).ToString(),
            "io_error: nvme read at offset " + OffsetOf(1) + ": short read: 10240 of 20480 bytes");
  EXPECT_EQ(r.bytes(0), 0u);
  EXPECT_EQ(buf, std::vector<std::byte>(kBytes + 1, kPattern));
  // Aligned: the payload is read straight into the caller's buffer.
  internal::AlignedBuffer direct(kBytes);
  ReadOp rd2{TestKey(2), direct.span()};
  Completion r2 = tier_->Read(kNs, std::span(&rd2, 1));
  ASSERT_TRUE(r2.WaitFor(kNoHang).ok() || r2.Poll()) << "read hung";
  EXPECT_EQ(r2.result(0).code(), StatusCode::kIOError) << r2.result(0).ToString();
  EXPECT_NE(r2.result(0).message().find(": short read: "), std::string::npos)
      << r2.result(0).ToString();
  faults_.short_reads = false;
  EXPECT_EQ(tier_->Counters().corruptions, 0u);
  std::vector<std::byte> out;
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(Contains(i)) << i;
    ASSERT_TRUE(Read(i, out).result(0).ok()) << "block " << i << " was dropped";
    EXPECT_EQ(out, BlockBytes(TestKey(i), kBytes));
  }
}

// Reclaim's write of the moved blocks comes back short: the reclaim fails and
// moves nothing, rather than pointing the index at blocks half written.
TEST_F(NvmeFaultTest, ShortWriteOfTheMovedBlocksKeepsThemInTheVictim) {
  // Three blocks (20 KiB on disk each) to a region, 16 blocks of capacity.
  Open(2000, /*capacity_blocks=*/16, /*region_bytes=*/64 * 1024);
  auto rewrite0 = [&](uint64_t version) {
    std::vector<std::byte> data = BlockBytes(TestKey(0), kBytes, version);
    WriteOp w{TestKey(0), data};
    Completion c = tier_->Write(kNvmeNs, std::span(&w, 1));
    if (!c.WaitFor(kNoHang).ok() && !c.Poll()) return Status::Internal("hung");
    return c.result(0);
  };
  // As in nvme_reclaim_fault_test.cc: the next write reclaims the oldest
  // region, whose live blocks 1 and 2 go out as one 40 KiB write.
  WriteBlocks(*tier_, 0, 16, kBytes);
  for (uint64_t v = 1; v <= 5; ++v) ASSERT_TRUE(rewrite0(v).ok());
  ASSERT_EQ(tier_->Stats().reclaims, 0u);
  faults_.min_bytes = DiskBytes(kBytes) + 1;  // the moved blocks, not one block's write
  faults_.short_writes = true;
  Status st = rewrite0(6);
  faults_.short_writes = false;
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.ToString();
  EXPECT_NE(st.message().find("short write: 20480 of 40960 bytes"), std::string::npos)
      << st.ToString();
  EXPECT_EQ(tier_->Stats().reclaims, 0u);
  EXPECT_TRUE(ReadAndCheck(*tier_, 0, kBytes, 5).ok());
  for (uint64_t i = 1; i < 16; ++i) {
    Status r = ReadAndCheck(*tier_, i, kBytes);
    EXPECT_TRUE(r.ok()) << "block " << i << ": " << r.ToString();
  }
  EXPECT_EQ(tier_->Stats().corruptions, 0u);
  EXPECT_TRUE(rewrite0(6).ok());
  EXPECT_EQ(tier_->Stats().reclaims, 1u);
  for (uint64_t i = 1; i < 16; ++i) EXPECT_TRUE(ReadAndCheck(*tier_, i, kBytes).ok()) << i;
}

TEST_F(NvmeFaultTest, StalledReadEndsAtTheDeadline) {
  Open(/*timeout_ms=*/200);
  ASSERT_TRUE(Write(0, 2).status().ok());
  faults_.stall_reads = true;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::byte> out;
  Completion r = Read(0, out);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.result(0).ToString(),
            "deadline_exceeded: io_uring read at offset 18446744073709551615: no completion "
            "within 200 ms");
  EXPECT_GE(took, std::chrono::milliseconds(190));
  EXPECT_LT(took, Scaled(std::chrono::seconds(3)));
  faults_.stall_reads = false;
  EXPECT_TRUE(Read(0, out).result(0).ok()) << "the block survives a slow device";
  EXPECT_EQ(out, BlockBytes(TestKey(0), kBytes));
}

TEST_F(NvmeFaultTest, StalledWriteEndsAtTheDeadline) {
  Open(/*timeout_ms=*/200);
  faults_.stall_writes = true;
  Completion w = Write(0, 2);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(w.result(i).code(), StatusCode::kDeadlineExceeded) << w.result(i).ToString();
  }
  faults_.stall_writes = false;
  std::vector<std::byte> out;
  EXPECT_EQ(Read(0, out).result(0).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->Usage().blocks, 0u);
}

TEST_F(NvmeFaultTest, FlippedBytesOnDiskAreCaught) {
  Open();
  ASSERT_TRUE(Write(0, 4).status().ok());
  ASSERT_TRUE(tier_->Flush().ok());
  int fd = open((dir_.path() + "/data").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto flip = [&](uint64_t offset) {
    unsigned char b = 0;
    ASSERT_EQ(pread(fd, &b, 1, static_cast<off_t>(offset)), 1);
    b ^= 0x5A;
    ASSERT_EQ(pwrite(fd, &b, 1, static_cast<off_t>(offset)), 1);
  };
  flip(*tier_->TEST_FileOffset(kNs, TestKey(1)) + 4096 + 1000);  // payload byte
  flip(*tier_->TEST_FileOffset(kNs, TestKey(2)) + 20);           // header byte (key)
  ASSERT_EQ(fsync(fd), 0);
  close(fd);
  std::vector<std::byte> out;
  Completion r1 = Read(1, out);
  EXPECT_EQ(r1.result(0).code(), StatusCode::kCorruption);
  EXPECT_NE(r1.result(0).message().find("block payload: checksum mismatch"), std::string::npos)
      << r1.result(0).ToString();
  Completion r2 = Read(2, out);
  EXPECT_EQ(r2.result(0).code(), StatusCode::kCorruption);
  EXPECT_NE(r2.result(0).message().find("header checksum mismatch"), std::string::npos)
      << r2.result(0).ToString();
  EXPECT_TRUE(Read(0, out).result(0).ok());
  EXPECT_EQ(out, BlockBytes(TestKey(0), kBytes));
  EXPECT_TRUE(Read(3, out).result(0).ok());
  EXPECT_EQ(Read(1, out).result(0).code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->Counters().corruptions, 2u);
}

}  // namespace
}  // namespace kvtier::testing
