#include "tests/support/tier_view.h"

#include <utility>
#include <vector>

namespace kvtier::testing {
namespace {

class TierView final : public Tier {
 public:
  TierView(std::shared_ptr<Tier> inner, TierCapabilities caps, TierViewHooks hooks)
      : Tier(inner->name(), inner->type(), caps),
        inner_(std::move(inner)),
        hooks_(std::move(hooks)) {}
  ~TierView() override { Shutdown(); }

  TierUsage Usage() const override {
    if (hooks_.before_usage) hooks_.before_usage();
    return inner_->Usage();
  }

 protected:
  void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) override {
    if (hooks_.before_read) hooks_.before_read();
    Forward(inner_->Read(ns, ops), std::move(done));
  }
  void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) override {
    if (hooks_.before_write) {
      Status st = hooks_.before_write();
      if (!st.ok()) {
        for (size_t i = 0; i < ops.size(); ++i) done.Set(i, st);
        done.Finish();
        return;
      }
    }
    if (hooks_.write_op_status) {
      WriteSome(ns, ops, std::move(done));
      return;
    }
    Forward(inner_->Write(ns, ops), std::move(done));
  }
  void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    if (hooks_.before_remove) hooks_.before_remove();
    Forward(inner_->Remove(ns, keys), std::move(done));
  }
  void DoContains(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) override {
    if (hooks_.instead_of_contains && hooks_.instead_of_contains(keys.size(), done)) return;
    Completion c = inner_->Contains(ns, keys);
    if (hooks_.after_contains) {
      (void)c.Wait();
      hooks_.after_contains();
    }
    Forward(c, std::move(done));
  }
  void DoClaim(NamespaceId ns, std::span<const BlockKey> keys) override {
    if (hooks_.before_claim) hooks_.before_claim();
    inner_->Claim(ns, keys);
  }

 private:
  static void Forward(const Completion& c, CompletionSource done) {
    auto src = std::make_shared<CompletionSource>(std::move(done));
    c.OnDone([c, src] {
      for (size_t i = 0; i < c.size(); ++i) src->Set(i, c.result(i), c.bytes(i));
      src->Finish();
    });
  }

  // Writes the ops write_op_status lets through; the others fail with its error.
  void WriteSome(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) {
    std::vector<WriteOp> kept;
    std::vector<size_t> kept_at;
    std::vector<std::pair<size_t, Status>> failed;
    for (size_t i = 0; i < ops.size(); ++i) {
      Status st = hooks_.write_op_status(ops[i].key);
      if (st.ok()) {
        kept.push_back(ops[i]);
        kept_at.push_back(i);
      } else {
        failed.emplace_back(i, std::move(st));
      }
    }
    auto src = std::make_shared<CompletionSource>(std::move(done));
    for (auto& [i, st] : failed) src->Set(i, st);
    if (kept.empty()) {
      src->Finish();
      return;
    }
    Completion c = inner_->Write(ns, kept);
    c.OnDone([c, src, kept_at = std::move(kept_at)] {
      for (size_t j = 0; j < c.size(); ++j) src->Set(kept_at[j], c.result(j), c.bytes(j));
      src->Finish();
    });
  }

  std::shared_ptr<Tier> inner_;
  TierViewHooks hooks_;
};

}  // namespace

std::unique_ptr<Tier> NewTierView(std::shared_ptr<Tier> inner, TierCapabilities caps,
                                  TierViewHooks hooks) {
  return std::make_unique<TierView>(std::move(inner), caps, std::move(hooks));
}

}  // namespace kvtier::testing
