#include "io/rdma_verbs.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

namespace kvtier::internal::rdma {

Status FromIbv(int err, std::string_view operation) {
  if (err == 0) return Status::Ok();
  const std::string msg = std::string(operation) + ": " + std::strerror(err);
  switch (err) {
    case ENOMEM:
      return Status::ResourceExhausted(msg);
    case ENODEV:
    case ENOSYS:
    case EOPNOTSUPP:
      return Status::NotSupported(msg);
    case EINVAL:
      return Status::InvalidArgument(msg);
    case EAGAIN:
      return Status::Busy(msg);
    default:
      return Status::IOError(msg);
  }
}

Result<Context> Context::OpenFirst() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    return Status::NotSupported(
        "transport: rdma needs an RDMA device, and ibv_get_device_list found none; "
        "use transport: tcp");
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  const int err = errno;
  const std::string name = ibv_get_device_name(list[0]);
  ibv_free_device_list(list);
  if (ctx == nullptr) return FromIbv(err ? err : ENODEV, "ibv_open_device " + name);
  return Context(ctx);
}

Context& Context::operator=(Context&& o) noexcept {
  if (this != &o) {
    if (ctx_ != nullptr) ibv_close_device(ctx_);
    ctx_ = std::exchange(o.ctx_, nullptr);
  }
  return *this;
}

Context::~Context() {
  if (ctx_ != nullptr) ibv_close_device(ctx_);
}

Result<ProtectionDomain> ProtectionDomain::Create(const Context& ctx) {
  ibv_pd* pd = ibv_alloc_pd(ctx.get());
  if (pd == nullptr) return FromIbv(errno ? errno : ENOMEM, "ibv_alloc_pd");
  return ProtectionDomain(pd);
}

ProtectionDomain::~ProtectionDomain() {
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
}

Result<MemoryRegion> MemoryRegion::Register(const ProtectionDomain& pd, std::span<std::byte> bytes,
                                            int access) {
  ibv_mr* mr = ibv_reg_mr(pd.get(), bytes.data(), bytes.size(), access);
  if (mr == nullptr) return FromIbv(errno ? errno : ENOMEM, "ibv_reg_mr");
  return MemoryRegion(mr);
}

MemoryRegion::~MemoryRegion() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
}

Result<CompletionQueue> CompletionQueue::Create(const Context& ctx, int depth) {
  ibv_cq* cq = ibv_create_cq(ctx.get(), depth, nullptr, nullptr, 0);
  if (cq == nullptr) return FromIbv(errno ? errno : ENOMEM, "ibv_create_cq");
  return CompletionQueue(cq, depth);
}

CompletionQueue::~CompletionQueue() {
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
}

Result<QueuePair> QueuePair::Create(const ProtectionDomain& pd, const CompletionQueue& cq,
                                    uint32_t max_send_wr) {
  ibv_qp_init_attr attr{};
  attr.send_cq = cq.get();
  attr.recv_cq = cq.get();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = max_send_wr;
  attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = 2;
  attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 0;
  ibv_qp* qp = ibv_create_qp(pd.get(), &attr);
  if (qp == nullptr) return FromIbv(errno ? errno : ENOMEM, "ibv_create_qp");
  return QueuePair(qp);
}

QueuePair::~QueuePair() {
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
}

Result<QueuePairInfo> QueuePair::LocalInfo(uint8_t port) const {
  ibv_port_attr pa{};
  if (int err = ibv_query_port(qp_->context, port, &pa); err != 0) {
    return FromIbv(err, "ibv_query_port");
  }
  QueuePairInfo info;
  info.qp_num = qp_->qp_num;
  info.lid = pa.lid;
  ibv_gid gid{};
  if (int err = ibv_query_gid(qp_->context, port, 0, &gid); err != 0) {
    return FromIbv(err, "ibv_query_gid");
  }
  std::memcpy(info.gid.data(), gid.raw, info.gid.size());
  return info;
}

QpTransition InitTransition(uint8_t port) {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_INIT;
  t.attr.port_num = port;
  t.attr.qp_access_flags =
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return t;
}

QpTransition RtrTransition(const QueuePairInfo& remote, uint8_t port) {
  QpTransition t;
  ibv_qp_attr& a = t.attr;
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = remote.qp_num & 0xFFFFFFu;
  a.rq_psn = remote.psn & 0xFFFFFFu;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.port_num = port;
  bool routed = false;
  for (uint8_t b : remote.gid) routed = routed || b != 0;
  if (routed) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
    a.ah_attr.grh.hop_limit = 1;
  }
  t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return t;
}

QpTransition RtsTransition(uint32_t local_psn) {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTS;
  t.attr.timeout = 14;
  t.attr.retry_cnt = 7;
  t.attr.rnr_retry = 7;
  t.attr.sq_psn = local_psn & 0xFFFFFFu;
  t.attr.max_rd_atomic = 16;
  t.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
           IBV_QP_MAX_QP_RD_ATOMIC;
  return t;
}

Status QueuePair::Connect(const QueuePairInfo& remote, uint8_t port, uint32_t local_psn) {
  QpTransition t = InitTransition(port);
  if (int err = ibv_modify_qp(qp_, &t.attr, t.mask); err != 0) {
    return FromIbv(err, "ibv_modify_qp INIT");
  }
  t = RtrTransition(remote, port);
  if (int err = ibv_modify_qp(qp_, &t.attr, t.mask); err != 0) {
    return FromIbv(err, "ibv_modify_qp RTR");
  }
  t = RtsTransition(local_psn);
  return FromIbv(ibv_modify_qp(qp_, &t.attr, t.mask), "ibv_modify_qp RTS");
}

CqPoller::CqPoller(CompletionQueue& cq)
    : CqPoller([q = cq.get()](int max, ibv_wc* wc) { return ibv_poll_cq(q, max, wc); },
               cq.depth()) {}

CqPoller::CqPoller(PollFn poll, int depth) : poll_(std::move(poll)), free_slots_(depth) {
  thread_ = std::thread([this] { Run(); });
}

CqPoller::~CqPoller() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
  std::unordered_map<uint64_t, Pending> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(callbacks_);
  }
  for (auto& [id, p] : left) Deliver(p.done, Status::Cancelled("completion queue closed"), 0);
}

Status CqPoller::Post(const std::function<int(uint64_t)>& post, Callback done, uint64_t owner) {
  // Reserve the CQ entry before posting: a full CQ would otherwise drop
  // completions and move the QP to the error state.
  if (free_slots_.fetch_sub(1, std::memory_order_acq_rel) <= 0) {
    free_slots_.fetch_add(1, std::memory_order_acq_rel);
    return Status::Busy("completion queue is full");
  }
  uint64_t id;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    callbacks_.emplace(id, Pending{owner, std::move(done)});
  } catch (const std::bad_alloc&) {
    // Nothing was posted: the entry reserved above is given back, or each
    // such failure would shrink the queue for good.
    free_slots_.fetch_add(1, std::memory_order_acq_rel);
    return Status::ResourceExhausted("no memory to track a work request");
  }
  work_.notify_one();
  if (int err = post(id); err != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_.erase(id);
    free_slots_.fetch_add(1, std::memory_order_acq_rel);
    return FromIbv(err, "ibv_post_send");
  }
  return Status::Ok();
}

// A callback that throws (allocation failure) must not end the poller thread
// through std::terminate; its request's owner sees it at the deadline.
void CqPoller::Deliver(Callback& cb, const Status& st, uint32_t bytes) noexcept {
  try {
    cb(st, bytes);
  } catch (...) {
  }
}

void CqPoller::Forget(uint64_t owner) {
  std::vector<Callback> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = callbacks_.begin(); it != callbacks_.end();) {
      if (it->second.owner != owner) {
        ++it;
        continue;
      }
      ended.push_back(std::move(it->second.done));
      it = callbacks_.erase(it);
    }
  }
  free_slots_.fetch_add(static_cast<int>(ended.size()), std::memory_order_acq_rel);
  for (Callback& cb : ended) {
    Deliver(cb, Status::Cancelled("RDMA queue pair destroyed with the request outstanding"), 0);
  }
}

namespace {

// A work completion's result, built on the poller's thread: a fixed message
// when memory runs out for the detailed one.
Status CompletionStatus(ibv_wc_status status) noexcept {
  if (status == IBV_WC_SUCCESS) return Status::Ok();
  return DescribedStatus(StatusCode::kIOError, "RDMA completion failed", [&] {
    return Status::IOError(std::string("RDMA completion: ") + ibv_wc_status_str(status));
  });
}

}  // namespace

void CqPoller::Run() {
  ibv_wc wc[16];
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [this] { return stop_ || !callbacks_.empty(); });
      if (stop_) return;
    }
    const int n = poll_(16, wc);
    if (n < 0) {
      // The CQ itself failed; outstanding requests end at their deadlines.
      // Look again later rather than spin on the error.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (n == 0) {
      std::this_thread::yield();
      continue;
    }
    for (int i = 0; i < n; ++i) {
      Callback cb;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = callbacks_.find(wc[i].wr_id);
        if (it == callbacks_.end()) continue;
        cb = std::move(it->second.done);
        callbacks_.erase(it);
      }
      free_slots_.fetch_add(1, std::memory_order_acq_rel);
      Deliver(cb, CompletionStatus(wc[i].status), wc[i].byte_len);
    }
  }
}

}  // namespace kvtier::internal::rdma
