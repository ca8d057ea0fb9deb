// The RDMA verbs owners against a real device. This machine class has none
// (ibv_get_device_list returns 0 devices), so each test skips with the reason.
#include <gtest/gtest.h>

#include <vector>

#include "io/rdma_verbs.h"
#include "tiers/remote/memd_server.h"

namespace kvtier::internal::rdma {
namespace {

TEST(RdmaVerbsTest, NoDeviceIsReportedWithTheTcpFallback) {
  auto ctx = Context::OpenFirst();
  if (ctx.ok()) GTEST_SKIP() << "an RDMA device is present; this test covers its absence";
  EXPECT_EQ(ctx.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(ctx.status().message(),
            "transport: rdma needs an RDMA device, and ibv_get_device_list found none; "
            "use transport: tcp");
  EXPECT_EQ(memd::ProbeRdmaTransport().ToString(), ctx.status().ToString());
}

TEST(RdmaVerbsTest, OwnersRegisterAndLoopBackAQueuePair) {
  auto ctx = Context::OpenFirst();
  if (!ctx.ok()) GTEST_SKIP() << "no RDMA device: " << ctx.status().message();
  auto pd = ProtectionDomain::Create(*ctx);
  ASSERT_TRUE(pd.ok()) << pd.status().ToString();
  std::vector<std::byte> buf(1 << 20);
  auto mr = MemoryRegion::Register(
      *pd, buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(mr.ok()) << mr.status().ToString();
  EXPECT_EQ(mr->addr(), reinterpret_cast<uint64_t>(buf.data()));
  auto cq = CompletionQueue::Create(*ctx, 64);
  ASSERT_TRUE(cq.ok()) << cq.status().ToString();
  auto qp = QueuePair::Create(*pd, *cq, 32);
  ASSERT_TRUE(qp.ok()) << qp.status().ToString();
  auto info = qp->LocalInfo(1);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->qp_num, qp->get()->qp_num);
}

TEST(RdmaVerbsTest, FromIbvMapsErrnoToCodes) {
  EXPECT_EQ(FromIbv(ENOMEM, "ibv_reg_mr").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(FromIbv(ENODEV, "x").code(), StatusCode::kNotSupported);
  EXPECT_EQ(FromIbv(EAGAIN, "x").code(), StatusCode::kBusy);
  EXPECT_TRUE(FromIbv(0, "x").ok());
}

}  // namespace
}  // namespace kvtier::internal::rdma
