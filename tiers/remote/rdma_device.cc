// OpenRdmaDevice for builds with libibverbs: one device context, protection
// domain and completion queue with its poller thread, shared by every queue
// pair of the process's server or client.
#include "tiers/remote/rdma_device.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "tiers/remote/rdma_transport.h"

namespace kvtier::internal::memd {
namespace {

constexpr uint8_t kPort = 1;
// Every queue pair shares one completion queue; the poller refuses a post
// (Busy) before the queue could overflow.
constexpr int kCqDepth = 16384;
constexpr uint32_t kSendQueueDepth = 1024;
// How long a closing queue pair waits for its flushed completions.
constexpr auto kFlushWait = std::chrono::seconds(1);
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

class VerbsMemory final : public RdmaMemory {
 public:
  VerbsMemory(rdma::MemoryRegion mr, std::span<std::byte> bytes)
      : mr_(std::move(mr)), bytes_(bytes) {}
  std::span<std::byte> bytes() const override { return bytes_; }
  uint32_t lkey() const override { return mr_.lkey(); }
  RdmaRegion region() const override { return {mr_.addr(), bytes_.size(), mr_.rkey()}; }

 private:
  rdma::MemoryRegion mr_;
  std::span<std::byte> bytes_;
};

class VerbsQp final : public RdmaQp {
 public:
  VerbsQp(rdma::QueuePair qp, rdma::CqPoller& poller, QpEndpoint local)
      : qp_(std::move(qp)), poller_(poller), owner_(poller.NewOwner()), local_(local) {}
  ~VerbsQp() override;
  QpEndpoint local() const override { return local_; }
  Status Connect(const QpEndpoint& remote) override {
    return qp_.Connect(ToQueuePairInfo(remote), kPort, local_.psn);
  }
  Status PostWrite(std::span<const LocalPiece> pieces, uint64_t addr, uint32_t rkey,
                   RdmaDone done) override {
    return Post(IBV_WR_RDMA_WRITE, pieces, addr, rkey, std::move(done));
  }
  Status PostRead(std::span<const LocalPiece> pieces, uint64_t addr, uint32_t rkey,
                  RdmaDone done) override {
    return Post(IBV_WR_RDMA_READ, pieces, addr, rkey, std::move(done));
  }

 private:
  Status Post(ibv_wr_opcode op, std::span<const LocalPiece> pieces, uint64_t addr, uint32_t rkey,
              RdmaDone done);

  rdma::QueuePair qp_;
  rdma::CqPoller& poller_;
  const uint64_t owner_;  // tags this queue pair's requests in the poller
  const QpEndpoint local_;
  // Posted work whose completion has not been polled; shared with the
  // completion callbacks, which may outlive this object.
  std::shared_ptr<std::atomic<int>> in_flight_ = std::make_shared<std::atomic<int>>(0);
};

// Destroying a queue pair with work outstanding would leave that work's
// completion-queue entries reserved forever: move it to the error state
// first, so the device flushes every outstanding request as a completion
// (IBV_WC_WR_FLUSH_ERR, seen by the poller), and wait for them. Whatever the
// flush did not deliver in time (or a refused state change) the poller
// forgets once the queue pair is gone.
VerbsQp::~VerbsQp() {
  if (in_flight_->load(std::memory_order_acquire) == 0) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE) == 0) {
    const auto until = std::chrono::steady_clock::now() + kFlushWait;
    while (in_flight_->load(std::memory_order_acquire) > 0 &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
  }
  if (in_flight_->load(std::memory_order_acquire) == 0) return;
  { rdma::QueuePair gone = std::move(qp_); }  // ibv_destroy_qp: no more DMA for it
  poller_.Forget(owner_);
}

Status VerbsQp::Post(ibv_wr_opcode op, std::span<const LocalPiece> pieces, uint64_t addr,
                     uint32_t rkey, RdmaDone done) {
  if (pieces.empty() || pieces.size() > 2) {
    return Status::InvalidArgument("an RDMA operation takes one or two local pieces");
  }
  ibv_sge sge[2]{};
  for (size_t i = 0; i < pieces.size(); ++i) {
    sge[i].addr = reinterpret_cast<uint64_t>(pieces[i].addr);
    sge[i].length = pieces[i].bytes;
    sge[i].lkey = pieces[i].lkey;
  }
  // The send queue holds kSendQueueDepth requests: a full one is Busy, like
  // a full completion queue, and the caller posts again after a completion.
  if (in_flight_->load(std::memory_order_acquire) >= static_cast<int>(kSendQueueDepth)) {
    return Status::Busy("RDMA send queue is full");
  }
  ibv_qp* qp = qp_.get();
  in_flight_->fetch_add(1, std::memory_order_acq_rel);
  Status st = poller_.Post(
      [&](uint64_t wr_id) {
        ibv_send_wr wr{};
        ibv_send_wr* bad = nullptr;
        wr.wr_id = wr_id;
        wr.sg_list = sge;
        wr.num_sge = static_cast<int>(pieces.size());
        wr.opcode = op;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = addr;
        wr.wr.rdma.rkey = rkey;
        return ibv_post_send(qp, &wr, &bad);
      },
      [done = std::move(done), n = in_flight_](const Status& s, uint32_t) {
        n->fetch_sub(1, std::memory_order_acq_rel);
        done(s);
      },
      owner_);
  if (!st.ok()) in_flight_->fetch_sub(1, std::memory_order_acq_rel);
  return st;
}

class VerbsDevice final : public RdmaDevice {
 public:
  VerbsDevice(rdma::Context ctx, rdma::ProtectionDomain pd, rdma::CompletionQueue cq)
      : ctx_(std::move(ctx)), pd_(std::move(pd)), cq_(std::move(cq)), poller_(cq_) {}
  Result<std::unique_ptr<RdmaMemory>> Register(std::span<std::byte> bytes) override {
    KVTIER_ASSIGN_OR_RETURN(rdma::MemoryRegion mr,
                            rdma::MemoryRegion::Register(pd_, bytes, kAccess));
    return std::unique_ptr<RdmaMemory>(new VerbsMemory(std::move(mr), bytes));
  }
  Result<std::unique_ptr<RdmaQp>> CreateQp() override;

 private:
  // Teardown order: the poller stops before the queue it polls is destroyed.
  rdma::Context ctx_;
  rdma::ProtectionDomain pd_;
  rdma::CompletionQueue cq_;
  rdma::CqPoller poller_;
  std::mt19937 psn_{std::random_device{}()};
};

Result<std::unique_ptr<RdmaQp>> VerbsDevice::CreateQp() {
  KVTIER_ASSIGN_OR_RETURN(rdma::QueuePair qp, rdma::QueuePair::Create(pd_, cq_, kSendQueueDepth));
  KVTIER_ASSIGN_OR_RETURN(rdma::QueuePairInfo info, qp.LocalInfo(kPort));
  // A random first PSN keeps a stale packet of an earlier connection from
  // being taken for this one's.
  info.psn = psn_() & 0xFFFFFFu;
  return std::unique_ptr<RdmaQp>(new VerbsQp(std::move(qp), poller_, ToQpEndpoint(info)));
}

}  // namespace

rdma::QueuePairInfo ToQueuePairInfo(const QpEndpoint& e) {
  rdma::QueuePairInfo info;
  info.qp_num = e.qp_num & 0xFFFFFFu;
  info.lid = e.lid;
  std::memcpy(info.gid.data(), e.gid.data(), info.gid.size());
  info.psn = e.psn & 0xFFFFFFu;
  return info;
}

QpEndpoint ToQpEndpoint(const rdma::QueuePairInfo& info) {
  QpEndpoint e;
  e.qp_num = info.qp_num & 0xFFFFFFu;
  e.lid = info.lid;
  std::memcpy(e.gid.data(), info.gid.data(), e.gid.size());
  e.psn = info.psn & 0xFFFFFFu;
  return e;
}

Result<std::unique_ptr<RdmaDevice>> OpenRdmaDevice() {
  KVTIER_ASSIGN_OR_RETURN(rdma::Context ctx, rdma::Context::OpenFirst());
  auto pd = rdma::ProtectionDomain::Create(ctx);
  if (!pd.ok()) return pd.status().WithContext("transport: rdma (use transport: tcp instead)");
  KVTIER_ASSIGN_OR_RETURN(rdma::CompletionQueue cq, rdma::CompletionQueue::Create(ctx, kCqDepth));
  return std::unique_ptr<RdmaDevice>(
      new VerbsDevice(std::move(ctx), std::move(pd).value(), std::move(cq)));
}

}  // namespace kvtier::internal::memd
