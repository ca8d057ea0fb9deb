#include "tests/support/tier_view.h"

namespace kvtier::testing {
namespace {

class TierView final : public Tier {
 public:
  TierView(std::shared_ptr<Tier> inner, TierCapabilities caps, std::function<void()> hook)
      : Tier(inner->name(), inner->type(), caps),
        inner_(std::move(inner)),
        after_contains_(std::move(hook)) {}
  ~TierView() override { Shutdown(); }

  TierUsage Usage() const override { return inner_->Usage(); }

 protected:
  void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) override {
    Forward(inner_->Read(ns, ops), std::move(done));
  }
  void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) override {
    Forward(inner_->Write(ns, ops), std::move(done));
  }
  void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    Forward(inner_->Remove(ns, keys), std::move(done));
  }
  void DoContains(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    Completion c = inner_->Contains(ns, keys);
    if (after_contains_) {
      c.Wait();
      after_contains_();
    }
    Forward(c, std::move(done));
  }

 private:
  static void Forward(const Completion& c, CompletionSource done) {
    auto src = std::make_shared<CompletionSource>(std::move(done));
    c.OnDone([c, src] {
      for (size_t i = 0; i < c.size(); ++i) src->Set(i, c.result(i), c.bytes(i));
      src->Finish();
    });
  }

  std::shared_ptr<Tier> inner_;
  std::function<void()> after_contains_;
};

}  // namespace

std::unique_ptr<Tier> NewTierView(std::shared_ptr<Tier> inner, TierCapabilities caps,
                                  std::function<void()> after_contains) {
  return std::make_unique<TierView>(std::move(inner), caps, std::move(after_contains));
}

}  // namespace kvtier::testing
