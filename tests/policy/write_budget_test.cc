// write_budget: the bytes it lets through match its budget behind other
// policies of a chain, its cap holds after an idle spell and at the start,
// and a clock that goes back changes nothing.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvtier/policy.h"

namespace kvtier {
namespace {

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kBlockBytes = 10000;

BlockMeta Block(uint64_t id) {
  BlockMeta b;
  b.id = id;
  b.bytes = kBlockBytes;
  return b;
}

TierState At(uint64_t now_ns) {
  TierState t;
  t.now_ns = now_ns;
  return t;
}

std::unique_ptr<AdmissionPolicy> Budget(const PolicyKnobs& k) {
  auto p = CreateAdmissionPolicy("write_budget", k);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(*p);
}

// Admits ids divisible by 4 only.
class QuarterAdmission final : public AdmissionPolicy {
 public:
  std::string_view Name() const override { return "quarter"; }
  bool Admit(const BlockMeta& b, const TierState&) override { return b.id % 4 == 0; }
};

// Offers one block per millisecond from `from_ms` to `to_ms` and writes what
// is admitted; returns the bytes written.
template <typename Admitter>
uint64_t Offer(Admitter& a, uint64_t from_ms, uint64_t to_ms, uint64_t first_id = 0) {
  uint64_t written = 0;
  for (uint64_t ms = from_ms; ms < to_ms; ++ms) {
    const BlockMeta b = Block(first_id + ms);
    if (a.Admit(b, At(ms * kMs))) {
      a.OnWritten(b.bytes, ms * kMs);
      written += b.bytes;
    }
  }
  return written;
}

// 10 MB/s offered, a quarter of it passing the other policy; the budget is
// 1 MB/s at the host: it is spent whichever position write_budget was given,
// since it is asked only about the blocks the other policy admits.
TEST(WriteBudgetTest, SpendsItsBudgetBehindARefusingPolicy) {
  PolicyKnobs k;
  k.write_budget_bytes_per_day = 86400ULL * 2000000;  // 2 MB/s at the device
  k.write_amplification = 2.0;                        // 1 MB/s from the host
  for (bool budget_first : {false, true}) {
    AdmissionChain chain;
    if (budget_first) chain.Add(Budget(k));
    chain.Add(std::make_unique<QuarterAdmission>());
    if (!budget_first) chain.Add(Budget(k));
    const uint64_t written = Offer(chain, 0, 200000);
    EXPECT_NEAR(double(written), 200e6, 6e6) << "budget first: " << budget_first;
  }
}

TEST(WriteBudgetTest, ChainAsksRationingPoliciesOnlyAboutAdmittedBlocks) {
  struct Counting final : public AdmissionPolicy {
    explicit Counting(bool rations) : rations(rations) {}
    std::string_view Name() const override { return "counting"; }
    bool Admit(const BlockMeta&, const TierState&) override { return ++asked, true; }
    bool Rations() const override { return rations; }
    bool rations;
    int asked = 0;
  };
  auto owned_rationing = std::make_unique<Counting>(true);
  auto owned_plain = std::make_unique<Counting>(false);
  Counting* rationing = owned_rationing.get();
  Counting* plain = owned_plain.get();
  AdmissionChain chain;
  chain.Add(std::move(owned_rationing));
  chain.Add(std::make_unique<QuarterAdmission>());
  chain.Add(std::move(owned_plain));
  for (uint64_t id = 0; id < 100; ++id) {
    EXPECT_EQ(chain.Admit(Block(id), {}), id % 4 == 0) << id;
  }
  EXPECT_EQ(plain->asked, 100);     // every non-rationing policy sees every block
  EXPECT_EQ(rationing->asked, 25);  // the rationing one only those the others admit
}

// With a 1 MB/s cap (and a budget far above it), no interval admits more
// than the cap's 1 MB plus the block that crosses it: not the first one,
// whatever rate is offered; not the first after 100 s with no call at all,
// when a flood of 100 MB arrives at once; not one that follows an interval
// with nothing offered.
TEST(WriteBudgetTest, CapHoldsAtTheStartAndAfterIdleSpells) {
  PolicyKnobs k;
  k.write_budget_bytes_per_day = 86400ULL * 10000000;  // 10 MB/s
  k.write_max_bytes_per_s = 1000000;                   // capped at 1 MB/s
  k.write_interval_ms = 1000;
  const double cap = 1e6 + double(kBlockBytes);
  auto p = Budget(k);
  EXPECT_LE(double(Offer(*p, 0, 1000)), cap) << "first interval";
  EXPECT_LE(double(Offer(*p, 1000, 20000)), 19 * cap);
  // 100 s later, 10000 blocks at one instant.
  uint64_t burst = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    if (p->Admit(Block(1000000 + i), At(120000 * kMs))) {
      p->OnWritten(kBlockBytes, 120000 * kMs);
      burst += kBlockBytes;
    }
  }
  EXPECT_LE(double(burst), cap) << "after idle";
  EXPECT_GT(burst, 0u);
  // An interval with nothing offered (writes only), then a flood.
  p->OnWritten(0, 121500 * kMs);
  p->OnWritten(0, 123000 * kMs);
  EXPECT_LE(double(Offer(*p, 123000, 124000, 2000000)), cap) << "after an empty interval";
}

// Steady at a tenth of what is offered, then 10000 blocks stamped 15 s in
// the past: the clock going back must neither reset the rate nor open a
// burst (an unsigned underflow would read as an interval of centuries).
TEST(WriteBudgetTest, BackwardsClockChangesNothing) {
  PolicyKnobs k;
  k.write_budget_bytes_per_day = 86400ULL * 1000000;  // 1 MB/s, no cap
  auto p = Budget(k);
  const uint64_t before = Offer(*p, 0, 20000);  // 10 MB/s offered
  uint64_t back = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    if (p->Admit(Block(5000000 + i), At(5000 * kMs))) {
      p->OnWritten(kBlockBytes, 5000 * kMs);
      back += kBlockBytes;
    }
  }
  // At most what is left of the current interval's allowance: two shares.
  EXPECT_LE(double(back), 2e6 + double(kBlockBytes));
  // Time resumes where it was: 60 s at the budget's rate in all.
  const uint64_t later = Offer(*p, 20000, 60000, 6000000);
  EXPECT_NEAR(double(before + back + later), 60e6, 1.8e6);
}

}  // namespace
}  // namespace kvtier
