// An in-process stand-in for an RDMA device (rdma_transport.h): registered
// ranges are looked up by key, a WRITE or READ checks every local piece
// against its lkey and the remote range against its rkey, copies the bytes
// at post time, and reports its completion on the fabric's own thread, like
// a completion-queue poller. Queue pairs must be connected to each other
// before posting. Faults: fail the next N operations with IOError, or hold
// completions until released, or refuse the next N posts as Busy, or tear
// the next N reads (their last byte lands flipped, as when the remote slot
// is rewritten during the read).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "tiers/remote/rdma_transport.h"

namespace kvtier::testing {

namespace memd = ::kvtier::internal::memd;
using memd::LocalPiece;
using memd::QpEndpoint;
using memd::RdmaDone;

class FakeRdmaFabric {
 public:
  FakeRdmaFabric() : thread_([this] { Run(); }) {}
  ~FakeRdmaFabric() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      held_ = false;
    }
    cv_.notify_all();
    thread_.join();
  }
  // A device on this fabric; every device sees every registered range.
  memd::RdmaDeviceFactory Factory();

  void FailNext(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_next_ = n;
  }
  // The next n posts are refused as a full completion queue would refuse
  // them: Busy, nothing queued.
  void BusyNext(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    busy_next_ = n;
  }
  void TearNext(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    tear_next_ = n;
  }
  void Hold(bool held) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = held;
    }
    cv_.notify_all();
  }
  int writes() const { return writes_.load(); }
  int reads() const { return reads_.load(); }
  // Posts refused as Busy so far.
  int busy_refused() const { return busy_refused_.load(); }
  // Queue pairs made so far, by every device on the fabric.
  int queue_pairs() const { return static_cast<int>(next_qp_.load() - kFirstQpNum); }
  // Local pieces that were inside the range with this key.
  int pieces_with_key(uint32_t key) {
    std::lock_guard<std::mutex> lock(mu_);
    return by_key_[key];
  }
  // The key of the registered range holding `p`; 0 when none does.
  uint32_t KeyOf(const std::byte* p) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [k, r] : ranges_) {
      if (p >= r.data() && p < r.data() + r.size()) return k;
    }
    return 0;
  }
  // Ranges registered now, and registrations ever made.
  size_t registered() {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_.size();
  }
  int registrations() const { return registrations_.load(); }

  uint32_t Add(std::span<std::byte> bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_[next_key_] = bytes;
    registrations_.fetch_add(1);
    return next_key_++;
  }
  void Drop(uint32_t key) {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_.erase(key);
  }
  uint32_t NewQpNum() { return next_qp_.fetch_add(1); }
  Status Transfer(bool write, std::span<const LocalPiece> pieces, uint64_t addr, uint32_t rkey,
                  RdmaDone done);

 private:
  std::byte* Resolve(uint32_t key, uint64_t addr, uint64_t bytes) {
    auto it = ranges_.find(key);
    if (it == ranges_.end()) return nullptr;
    auto* base = it->second.data();
    const auto start = reinterpret_cast<uint64_t>(base);
    if (addr < start || bytes > it->second.size() || addr - start > it->second.size() - bytes) {
      return nullptr;
    }
    return base + (addr - start);
  }
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || (!held_ && !queue_.empty()); });
      if (queue_.empty() && stop_) return;
      auto item = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      item.first(item.second);
      // Dropped unlocked: the closure may hold the last reference to a
      // registered range, whose destructor takes the lock.
      item = {};
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, std::span<std::byte>> ranges_;
  std::map<uint32_t, int> by_key_;
  uint32_t next_key_ = 0x100;
  static constexpr uint32_t kFirstQpNum = 0x10;
  std::atomic<uint32_t> next_qp_{kFirstQpNum};
  int fail_next_ = 0;
  int busy_next_ = 0;
  int tear_next_ = 0;
  bool held_ = false;
  bool stop_ = false;
  std::atomic<int> writes_{0}, reads_{0}, registrations_{0}, busy_refused_{0};
  std::deque<std::pair<RdmaDone, Status>> queue_;
  std::thread thread_;
};

inline Status FakeRdmaFabric::Transfer(bool write, std::span<const LocalPiece> pieces,
                                       uint64_t addr, uint32_t rkey, RdmaDone done) {
  std::lock_guard<std::mutex> lock(mu_);
  if (busy_next_ > 0) {
    --busy_next_;
    busy_refused_.fetch_add(1);
    return Status::Busy("RDMA completion queue is full");
  }
  Status st;
  uint64_t total = 0;
  for (const LocalPiece& p : pieces) total += p.bytes;
  std::byte* remote = Resolve(rkey, addr, total);
  if (fail_next_ > 0) {
    --fail_next_;
    st = Status::IOError("RDMA completion: transport retry counter exceeded");
  } else if (remote == nullptr) {
    st = Status::IOError("RDMA completion: remote access error");
  }
  for (const LocalPiece& p : pieces) {
    if (!st.ok()) break;
    if (Resolve(p.lkey, reinterpret_cast<uint64_t>(p.addr), p.bytes) == nullptr) {
      st = Status::IOError("RDMA completion: local protection error");
      break;
    }
    ++by_key_[p.lkey];
    if (write) {
      std::memcpy(remote, p.addr, p.bytes);
    } else {
      std::memcpy(p.addr, remote, p.bytes);
    }
    remote += p.bytes;
  }
  if (st.ok() && !write && tear_next_ > 0 && pieces.back().bytes > 0) {
    --tear_next_;
    pieces.back().addr[pieces.back().bytes - 1] ^= std::byte{0xFF};
  }
  if (st.ok()) (write ? writes_ : reads_).fetch_add(1);
  queue_.emplace_back(std::move(done), st);
  cv_.notify_all();
  return Status::Ok();
}

class FakeRdmaMemory final : public memd::RdmaMemory {
 public:
  FakeRdmaMemory(FakeRdmaFabric& f, std::span<std::byte> b) : f_(f), b_(b), key_(f.Add(b)) {}
  ~FakeRdmaMemory() override { f_.Drop(key_); }
  std::span<std::byte> bytes() const override { return b_; }
  uint32_t lkey() const override { return key_; }
  memd::RdmaRegion region() const override {
    return {reinterpret_cast<uint64_t>(b_.data()), b_.size(), key_};
  }

 private:
  FakeRdmaFabric& f_;
  std::span<std::byte> b_;
  uint32_t key_;
};

class FakeRdmaQp final : public memd::RdmaQp {
 public:
  explicit FakeRdmaQp(FakeRdmaFabric& f) : f_(f) {
    local_.qp_num = f.NewQpNum();
    local_.psn = 7;
  }
  QpEndpoint local() const override { return local_; }
  Status Connect(const QpEndpoint& remote) override {
    // Queue pair 0xDEAD stands for a peer the device cannot reach.
    if (remote.qp_num == 0xDEAD) return Status::IOError("ibv_modify_qp RTR: Invalid argument");
    connected_ = true;
    return Status::Ok();
  }
  Status PostWrite(std::span<const LocalPiece> p, uint64_t addr, uint32_t rkey,
                   RdmaDone done) override {
    return Post(true, p, addr, rkey, std::move(done));
  }
  Status PostRead(std::span<const LocalPiece> p, uint64_t addr, uint32_t rkey,
                  RdmaDone done) override {
    return Post(false, p, addr, rkey, std::move(done));
  }

 private:
  Status Post(bool write, std::span<const LocalPiece> p, uint64_t addr, uint32_t rkey,
              RdmaDone done) {
    if (!connected_) return Status::InvalidArgument("ibv_post_send: queue pair not connected");
    return f_.Transfer(write, p, addr, rkey, std::move(done));
  }
  FakeRdmaFabric& f_;
  QpEndpoint local_;
  bool connected_ = false;
};

class FakeRdmaDevice final : public memd::RdmaDevice {
 public:
  explicit FakeRdmaDevice(FakeRdmaFabric& f) : f_(f) {}
  Result<std::unique_ptr<memd::RdmaMemory>> Register(std::span<std::byte> b) override {
    return std::unique_ptr<memd::RdmaMemory>(new FakeRdmaMemory(f_, b));
  }
  Result<std::unique_ptr<memd::RdmaQp>> CreateQp() override {
    return std::unique_ptr<memd::RdmaQp>(new FakeRdmaQp(f_));
  }

 private:
  FakeRdmaFabric& f_;
};

inline memd::RdmaDeviceFactory FakeRdmaFabric::Factory() {
  return [this]() -> Result<std::unique_ptr<memd::RdmaDevice>> {
    return std::unique_ptr<memd::RdmaDevice>(new FakeRdmaDevice(*this));
  };
}

}  // namespace kvtier::testing

namespace kvtier::testing {

// The device a data-path test runs on: the stand-in (every build) or the
// machine's first RDMA device (the `rdma`-labelled binary, built with
// KVTIER_TEST_VERBS=1), which skips when there is none.
enum class RdmaDev { kFake, kVerbs };

inline std::string RdmaDevName(const ::testing::TestParamInfo<RdmaDev>& i) {
  return i.param == RdmaDev::kFake ? "StandIn" : "Verbs";
}

// `inner`, counting the times it is asked.
inline memd::RdmaDeviceFactory Counted(memd::RdmaDeviceFactory inner, std::atomic<int>& asks) {
  return [inner = std::move(inner), &asks] {
    asks.fetch_add(1);
    return inner();
  };
}

// The factory for `dev`, or why the test must skip. For kVerbs the device
// opened to find out is not thrown away: the factory's first call hands it
// out and later calls open another one.
inline Result<memd::RdmaDeviceFactory> DeviceFor(RdmaDev dev, FakeRdmaFabric& fabric) {
  if (dev == RdmaDev::kFake) return fabric.Factory();
  auto probe = memd::OpenRdmaDevice();
  if (!probe.ok()) return probe.status();
  struct First {
    std::mutex mu;
    std::unique_ptr<memd::RdmaDevice> device;  // guarded by mu; null once handed out
  };
  auto first = std::make_shared<First>();
  first->device = std::move(probe).value();
  return memd::RdmaDeviceFactory([first]() -> Result<std::unique_ptr<memd::RdmaDevice>> {
    {
      std::lock_guard<std::mutex> lock(first->mu);
      if (first->device) return std::move(first->device);
    }
    return memd::OpenRdmaDevice();
  });
}

}  // namespace kvtier::testing

#if KVTIER_TEST_VERBS
#define KVTIER_RDMA_DEVICES ::testing::Values(::kvtier::testing::RdmaDev::kVerbs)
#else
#define KVTIER_RDMA_DEVICES ::testing::Values(::kvtier::testing::RdmaDev::kFake)
#endif
