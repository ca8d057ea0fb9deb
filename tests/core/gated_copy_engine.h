// GatedCopyEngine: a copy engine over the host one that can hold one Gather
// or one Scatter until the test ends it, as a slow device would, for tests
// that interleave a copy with the runtime's other work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "kvtier/copy_engine.h"
#include "tests/core/runtime_test_util.h"

namespace kvtier::testing {

// A copy engine over the host one that can hold one Gather until the test
// ends it, as a slow device would: with an error, or by copying.
class GatedCopyEngine final : public CopyEngine {
 public:
  explicit GatedCopyEngine(std::shared_ptr<HostCopyEngine> inner) : inner_(std::move(inner)) {}
  const KvLayout& layout() const override { return inner_->layout(); }
  void Gather(std::span<const BlockCopy> copies, CopyDone done) override {
    {
      std::lock_guard lock(mu_);
      if (hold_next_) {
        hold_next_ = false;
        held_copies_.assign(copies.begin(), copies.end());
        held_done_ = std::move(done);
        cv_.notify_all();
        return;
      }
    }
    inner_->Gather(copies, std::move(done));
  }
  void Scatter(std::span<const BlockCopy> copies, LayerDone on_layer, CopyDone done) override {
    {
      std::lock_guard lock(mu_);
      if (hold_next_scatter_) {
        hold_next_scatter_ = false;
        held_scatter_.assign(copies.begin(), copies.end());
        held_on_layer_ = std::move(on_layer);
        held_scatter_done_ = std::move(done);
        cv_.notify_all();
        return;
      }
    }
    inner_->Scatter(copies, std::move(on_layer), std::move(done));
  }
  void HoldNextScatter() {
    std::lock_guard lock(mu_);
    hold_next_scatter_ = true;
  }
  bool WaitScatterHeld() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5),
                        [&] { return held_scatter_done_ != nullptr; });
  }
  // Makes the held Scatter's copies.
  void ReleaseScatter() {
    CopyDone done;
    LayerDone on_layer;
    std::vector<BlockCopy> copies;
    {
      std::lock_guard lock(mu_);
      done = std::exchange(held_scatter_done_, nullptr);
      on_layer = std::move(held_on_layer_);
      copies = std::move(held_scatter_);
    }
    if (done) inner_->Scatter(copies, std::move(on_layer), std::move(done));
  }

  void HoldNextGather() {
    std::lock_guard lock(mu_);
    hold_next_ = true;
  }
  // True while a Gather is held.
  bool Held() {
    std::lock_guard lock(mu_);
    return held_done_ != nullptr;
  }
  // True once a held Gather has arrived (within 5 s).
  bool WaitHeld() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return held_done_ != nullptr; });
  }
  // Ends the held Gather: every copy fails, or every copy is made.
  void Release(bool fail) {
    CopyDone done;
    std::vector<BlockCopy> copies;
    {
      std::lock_guard lock(mu_);
      done = std::move(held_done_);
      held_done_ = nullptr;
      copies = std::move(held_copies_);
    }
    if (!done) return;
    if (fail) {
      done(std::vector<Status>(copies.size(), Status::IOError("gated gather: device error")));
    } else {
      inner_->Gather(copies, std::move(done));
    }
  }

 private:
  std::shared_ptr<HostCopyEngine> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_next_ = false;
  std::vector<BlockCopy> held_copies_;
  CopyDone held_done_;
  bool hold_next_scatter_ = false;
  std::vector<BlockCopy> held_scatter_;
  LayerDone held_on_layer_;
  CopyDone held_scatter_done_;
};

}  // namespace kvtier::testing
