// The RDMA verbs owners against a real device. This machine class has none
// (ibv_get_device_list returns 0 devices), so each test skips with the reason.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "io/rdma_verbs.h"
#include "tiers/remote/rdma_device.h"
#include "tiers/remote/rdma_transport.h"

namespace kvtier::internal::rdma {
namespace {

TEST(RdmaVerbsTest, NoDeviceIsReportedWithTheTcpFallback) {
  auto ctx = Context::OpenFirst();
  if (ctx.ok()) GTEST_SKIP() << "an RDMA device is present; this test covers its absence";
  EXPECT_EQ(ctx.status().code(), StatusCode::kNotSupported);
  EXPECT_EQ(ctx.status().message(),
            "transport: rdma needs an RDMA device, and ibv_get_device_list found none; "
            "use transport: tcp");
  // The device the server and the tier open reports the same reason.
  EXPECT_EQ(memd::OpenRdmaDevice().status().ToString(), ctx.status().ToString());
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

// The poller's own logic, over a stand-in for ibv_poll_cq: it polls only while
// work it posted is outstanding, so an idle RDMA process costs no CPU.
TEST(CqPollerTest, PollsOnlyWhileWorkIsOutstanding) {
  std::atomic<int> polls{0};
  std::atomic<uint64_t> posted{0};  // wr_id of the request the "device" will complete
  CqPoller poller(
      [&](int max, ibv_wc* wc) {
        polls.fetch_add(1);
        const uint64_t id = posted.exchange(0);
        if (id == 0 || max < 1) return 0;
        wc[0] = ibv_wc{};
        wc[0].wr_id = id;
        wc[0].status = IBV_WC_SUCCESS;
        wc[0].byte_len = 4096;
        return 1;
      },
      4);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(polls.load(), 0) << "an idle poller must not poll";

  std::promise<std::pair<Status, uint32_t>> done;
  ASSERT_TRUE(poller
                  .Post([&](uint64_t id) { return posted.store(id), 0; },
                        [&](const Status& st, uint32_t bytes) {
                          done.set_value({st, bytes});
                        })
                  .ok());
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto [st, bytes] = f.get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(bytes, 4096u);
  const int after = polls.load();
  EXPECT_GE(after, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(polls.load(), after) << "polling stops once nothing is outstanding";
}

TEST(CqPollerTest, FullQueueIsBusyAndCloseCancelsWhatIsOutstanding) {
  std::atomic<int> cancelled{0};
  {
    CqPoller poller([](int, ibv_wc*) { return 0; }, 1);  // a device that never completes
    auto count = [&](const Status& st, uint32_t) {
      if (st.code() == StatusCode::kCancelled) cancelled.fetch_add(1);
    };
    ASSERT_TRUE(poller.Post([](uint64_t) { return 0; }, count).ok());
    EXPECT_EQ(poller.Post([](uint64_t) { return 0; }, count).code(), StatusCode::kBusy);
    // A refused post gives its entry back.
    CqPoller other([](int, ibv_wc*) { return 0; }, 1);
    EXPECT_EQ(other.Post([](uint64_t) { return ENOMEM; }, count).code(),
              StatusCode::kResourceExhausted);
    EXPECT_TRUE(other.Post([](uint64_t) { return 0; }, count).ok());
  }
  EXPECT_EQ(cancelled.load(), 2);
}

// A queue pair destroyed before its work completed: its requests end
// Cancelled and their CQ entries come back; another owner's stay pending.
TEST(CqPollerTest, ForgettingAnOwnerEndsItsRequestsAndFreesTheirEntries) {
  // Declared before the poller, whose close still calls back into them.
  std::atomic<uint64_t> b_id{0};
  std::atomic<bool> deliver_b{false};
  std::atomic<int> a_cancelled{0}, later{0};
  std::promise<Status> b_done;
  CqPoller poller(
      [&](int max, ibv_wc* wc) {
        if (max < 1 || !deliver_b.load() || b_id.load() == 0) return 0;
        wc[0] = ibv_wc{};
        wc[0].wr_id = b_id.exchange(0);
        wc[0].status = IBV_WC_SUCCESS;
        return 1;
      },
      4);
  const uint64_t a = poller.NewOwner(), b = poller.NewOwner();
  ASSERT_NE(a, b);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(poller
                    .Post([](uint64_t) { return 0; },
                          [&](const Status& st, uint32_t) {
                            if (st.code() == StatusCode::kCancelled) a_cancelled.fetch_add(1);
                          },
                          a)
                    .ok());
  }
  ASSERT_TRUE(poller
                  .Post([&](uint64_t id) { return b_id.store(id), 0; },
                        [&](const Status& st, uint32_t) { b_done.set_value(st); }, b)
                  .ok());
  EXPECT_EQ(poller.Post([](uint64_t) { return 0; }, [](const Status&, uint32_t) {}).code(),
            StatusCode::kBusy);
  poller.Forget(a);
  EXPECT_EQ(a_cancelled.load(), 3);
  // Three entries are free again; the fourth is still b's.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        poller.Post([](uint64_t) { return 0; }, [&](const Status&, uint32_t) { ++later; }).ok());
  }
  EXPECT_EQ(poller.Post([](uint64_t) { return 0; }, [](const Status&, uint32_t) {}).code(),
            StatusCode::kBusy);
  deliver_b.store(true);
  auto f = b_done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(f.get().ok());
}

// The queue-pair transitions built from what the peer sent over the control
// connection; no device needed.
TEST(RdmaVerbsTest, TransitionsCarryThePeersInfo) {
  QueuePairInfo peer;
  peer.qp_num = 0xFF123456;  // only 24 bits are a queue pair number
  peer.lid = 0x21;
  peer.psn = 0x1ABCDEF;
  QpTransition init = InitTransition(1);
  EXPECT_EQ(init.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(init.attr.port_num, 1);
  EXPECT_EQ(init.attr.qp_access_flags,
            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(init.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

  QpTransition rtr = RtrTransition(peer, 1);
  EXPECT_EQ(rtr.attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(rtr.attr.dest_qp_num, 0x123456u);
  EXPECT_EQ(rtr.attr.rq_psn, 0xABCDEFu);
  EXPECT_EQ(rtr.attr.ah_attr.dlid, 0x21);
  EXPECT_EQ(rtr.attr.ah_attr.port_num, 1);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 0);  // zero GID: InfiniBand, LID routed
  EXPECT_EQ(rtr.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  peer.gid[0] = 0xFE;
  peer.gid[15] = 0x01;
  rtr = RtrTransition(peer, 2);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 1);  // RoCE: a global route header
  EXPECT_EQ(rtr.attr.ah_attr.grh.dgid.raw[0], 0xFE);
  EXPECT_EQ(rtr.attr.ah_attr.grh.dgid.raw[15], 0x01);
  EXPECT_EQ(rtr.attr.ah_attr.grh.hop_limit, 1);

  QpTransition rts = RtsTransition(0x7000001);
  EXPECT_EQ(rts.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(rts.attr.sq_psn, 0x000001u);
  EXPECT_EQ(rts.mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

TEST(RdmaVerbsTest, WireEndpointsConvertBothWays) {
  memd::QpEndpoint e;
  e.qp_num = 0x123456;
  e.lid = 9;
  e.gid[3] = std::byte{0x44};
  e.psn = 0xFEDCBA;
  QueuePairInfo info = memd::ToQueuePairInfo(e);
  EXPECT_EQ(info.qp_num, 0x123456u);
  EXPECT_EQ(info.lid, 9);
  EXPECT_EQ(info.gid[3], 0x44);
  EXPECT_EQ(info.psn, 0xFEDCBAu);
  memd::QpEndpoint back = memd::ToQpEndpoint(info);
  EXPECT_EQ(back.qp_num, e.qp_num);
  EXPECT_EQ(back.lid, e.lid);
  EXPECT_EQ(back.gid, e.gid);
  EXPECT_EQ(back.psn, e.psn);
  info.qp_num = 0xAB000001;
  EXPECT_EQ(memd::ToQpEndpoint(info).qp_num, 1u);
}

}  // namespace
}  // namespace kvtier::internal::rdma
