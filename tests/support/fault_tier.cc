#include "tests/support/fault_tier.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kvtier::testing {
namespace {

TierCapabilities CapabilitiesOf(const Tier& inner, const FaultOptions& o) {
  TierCapabilities c = inner.capabilities();
  c.local_index |= o.local_index;
  if (o.max_batch_blocks != 0) c.max_batch_blocks = o.max_batch_blocks;
  return c;
}

class FaultInjectingTier final : public Tier {
 public:
  FaultInjectingTier(std::unique_ptr<Tier> inner, FaultOptions o)
      : Tier(inner->name(), inner->type(), CapabilitiesOf(*inner, o)),
        inner_(std::move(inner)),
        o_(o),
        rng_(o.seed) {
    if (o_.latency.count() > 0) worker_ = std::thread([this] { Run(); });
  }

  ~FaultInjectingTier() override {
    Shutdown();
  }

  TierUsage Usage() const override { return inner_->Usage(); }

 protected:
  void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) override {
    std::vector<ReadOp> copy(ops.begin(), ops.end());
    Forward(o_.stall_reads.get(), std::move(done), [this, ns, copy](CompletionSource& src) {
      Completion c = inner_->Read(ns, copy);
      (void)c.Wait();
      for (size_t i = 0; i < copy.size(); ++i) {
        Status st = c.result(i);
        uint64_t bytes = c.bytes(i);
        if (Status f = Inject(); !f.ok()) {
          st = f;
        } else if (o_.unreadable.count(copy[i].key) != 0) {
          st = Status(o_.error, "injected unreadable block in tier '" + name() + "'");
        } else if (st.ok() && o_.corrupt_on_read && bytes > 0) {
          copy[i].dst[bytes / 2] ^= std::byte{0x5A};
        } else if (st.ok() && o_.truncate_on_read && bytes > 0) {
          --bytes;
        }
        src.Set(i, st, st.ok() ? bytes : 0);
      }
    });
  }

  void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) override {
    std::vector<WriteOp> copy(ops.begin(), ops.end());
    Forward(o_.stall_writes.get(), std::move(done), [this, ns, copy](CompletionSource& src) {
      // Fail the chosen ops before they reach the inner tier, so a failed
      // write never leaves data behind.
      std::vector<WriteOp> pass;
      std::vector<size_t> pass_item;
      for (size_t i = 0; i < copy.size(); ++i) {
        if (Status f = Inject(); !f.ok()) {
          src.Set(i, f);
        } else {
          pass.push_back(copy[i]);
          pass_item.push_back(i);
        }
      }
      Completion c = inner_->Write(ns, pass);
      (void)c.Wait();
      for (size_t j = 0; j < pass.size(); ++j) src.Set(pass_item[j], c.result(j), c.bytes(j));
    });
  }

  void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    std::vector<BlockKey> copy(keys.begin(), keys.end());
    Forward(o_.stall_removes.get(), std::move(done), [this, ns, copy](CompletionSource& src) {
      // Like writes, a failed remove never reaches the inner tier.
      std::vector<BlockKey> pass;
      std::vector<size_t> pass_item;
      for (size_t i = 0; i < copy.size(); ++i) {
        if (Status f = InjectRemove(); !f.ok()) {
          src.Set(i, f);
        } else {
          pass.push_back(copy[i]);
          pass_item.push_back(i);
        }
      }
      Completion c = inner_->Remove(ns, pass);
      (void)c.Wait();
      for (size_t j = 0; j < pass.size(); ++j) src.Set(pass_item[j], c.result(j));
    });
  }

  void DoContains(NamespaceId ns, std::span<const BlockKey> keys,
                  CompletionSource done) override {
    std::vector<BlockKey> copy(keys.begin(), keys.end());
    Job answer = [this, ns, copy](CompletionSource& src) {
      Completion c = inner_->Contains(ns, copy);
      (void)c.Wait();
      for (size_t i = 0; i < copy.size(); ++i) {
        std::optional<Status> injected;
        if (o_.contains != nullptr) injected = o_.contains->Injected(copy[i]);
        src.Set(i, injected.value_or(c.result(i)));
      }
    };
    if (o_.contains != nullptr && o_.contains->HoldIfStalled(done, answer)) return;
    Forward(std::move(done), std::move(answer));
  }
  void DoClaim(NamespaceId ns, std::span<const BlockKey> keys) override { inner_->Claim(ns, keys); }

  void DoShutdown() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    inner_->Shutdown();
  }

 private:
  using Job = std::function<void(CompletionSource&)>;

  // Held while `stall` is stalled; else runs inline without latency,
  // otherwise queues for the delay thread.
  void Forward(CallStall* stall, CompletionSource done, Job job) {
    if (stall != nullptr && stall->HoldIfStalled(done, job)) return;
    Forward(std::move(done), std::move(job));
  }
  void Forward(CompletionSource done, Job job) {
    if (o_.latency.count() == 0) {
      job(done);
      done.Finish();
      return;
    }
    auto due = std::chrono::steady_clock::now() + o_.latency;
    std::lock_guard lock(mu_);
    queue_.push_back({due, std::make_shared<CompletionSource>(std::move(done)), std::move(job)});
    cv_.notify_all();
  }

  void Run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto due = queue_.front().due;
      cv_.wait_until(lock, due, [&] { return false; });
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      p.job(*p.done);
      p.done->Finish();
      lock.lock();
    }
  }

  Status Inject() {
    std::lock_guard lock(rng_mu_);
    ++ops_;
    bool fail = ops_ > o_.fail_after_ops ||
                (o_.error_rate > 0 && std::uniform_real_distribution<>(0, 1)(rng_) < o_.error_rate);
    if (!fail) return Status::Ok();
    return Status(o_.error, "injected fault in tier '" + name() + "'");
  }

  // Fails the first o_.fail_removes removed keys.
  Status InjectRemove() {
    std::lock_guard lock(rng_mu_);
    if (removes_failed_ >= o_.fail_removes) return Status::Ok();
    ++removes_failed_;
    return Status(o_.error, "injected remove fault in tier '" + name() + "'");
  }

  struct Pending {
    std::chrono::steady_clock::time_point due;
    std::shared_ptr<CompletionSource> done;
    Job job;
  };

  std::unique_ptr<Tier> inner_;
  const FaultOptions o_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;   // guarded by rng_mu_
  uint64_t ops_ = 0;      // guarded by rng_mu_
  uint64_t removes_failed_ = 0;  // guarded by rng_mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  std::thread worker_;
};

}  // namespace

void ContainsFaults::Fail(const BlockKey& key, StatusCode error) {
  std::lock_guard lock(mu_);
  fail_[key] = error;
}

void ContainsFaults::ReportPresent(const BlockKey& key) {
  std::lock_guard lock(mu_);
  present_.insert(key);
}

void CallStall::Stall() {
  std::lock_guard lock(mu_);
  stalled_ = true;
}

void CallStall::Release() {
  std::vector<Held> held;
  {
    std::lock_guard lock(mu_);
    stalled_ = false;
    held.swap(held_);
  }
  // Outside mu_: an answer asks the inner tier, and its waiters may call in.
  for (Held& h : held) {
    h.answer(*h.done);
    h.done->Finish();
  }
}

uint64_t CallStall::held() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

bool CallStall::HoldIfStalled(CompletionSource& done, Answer answer) {
  std::lock_guard lock(mu_);
  if (!stalled_) return false;
  held_.push_back({std::make_shared<CompletionSource>(std::move(done)), std::move(answer)});
  return true;
}

void ContainsFaults::Stall() { stall_.Stall(); }

void ContainsFaults::Clear() {
  {
    std::lock_guard lock(mu_);
    fail_.clear();
    present_.clear();
  }
  stall_.Release();
}

uint64_t ContainsFaults::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

bool ContainsFaults::HoldIfStalled(CompletionSource& done, CallStall::Answer answer) {
  {
    std::lock_guard lock(mu_);
    ++calls_;
  }
  return stall_.HoldIfStalled(done, std::move(answer));
}

std::optional<Status> ContainsFaults::Injected(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  if (auto it = fail_.find(key); it != fail_.end()) {
    return Status(it->second, "injected contains fault for block " + ToHex(key));
  }
  if (present_.count(key) != 0) return Status::Ok();
  return std::nullopt;
}

std::unique_ptr<Tier> NewFaultInjectingTier(std::unique_ptr<Tier> inner, FaultOptions options) {
  return std::make_unique<FaultInjectingTier>(std::move(inner), options);
}

TierFactory FaultyTierFactory(std::string name, FaultOptions options) {
  return [name = std::move(name), options](const TierOptions& t,
                                           const TierContext& c) -> Result<std::unique_ptr<Tier>> {
    auto inner = CreateTier(t, c);
    if (!inner.ok() || t.name != name) return inner;
    return NewFaultInjectingTier(std::move(inner).value(), options);
  };
}

}  // namespace kvtier::testing
