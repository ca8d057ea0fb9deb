// The NVMe tier under a failing device: EIO on read and write, ENOSPC, torn
// reads, I/O past the deadline, and bytes flipped in the data file. Every
// case ends as a per-block error or a miss, never as wrong bytes, never as
// a hang.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>

#include "tests/support/block_data.h"
#include "tests/support/nvme_fault_engine.h"
#include "tests/support/time_scale.h"
#include "tests/tiers/nvme_test_util.h"
#include "tiers/nvme/nvme_format.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

using internal::NvmeTier;

constexpr NamespaceId kNs{0x99};
constexpr uint64_t kBytes = 16 * 1024;
constexpr auto kNoHang = std::chrono::seconds(10);

class NvmeFaultTest : public ::testing::Test {
 protected:
  void Open(uint32_t timeout_ms = 2000) {
    ASSERT_TRUE(dir_.ok());
    TierOptions o = NvmeOptions(dir_.path(), 32, kBytes);
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
