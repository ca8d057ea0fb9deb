#include "tools/bench/sweep_point.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>

namespace kvtier::bench {
namespace {

std::string Number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

// `share` of what `row` wrote to NVMe per modeled day; 0 when no time passed.
double BytesPerDay(double share, const SweepResult& row) {
  if (!(row.sim_seconds > 0)) return 0;
  return share * double(row.bytes_written_nvme) / row.sim_seconds * 86400.0;
}

// A budget in whole bytes: a larger one than a uint64_t holds is no limit.
uint64_t WholeBytes(double bytes) {
  if (bytes >= 0x1p64) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(bytes);
}

}  // namespace

Result<SweepCapacity> SweepCapacityAt(std::string_view point, uint64_t unique) {
  KVTIER_ASSIGN_OR_RETURN(SweepPoint p, ParseSweepPoint(point));
  SweepCapacity cap{BlocksAt(p.host, unique), BlocksAt(p.nvme, unique)};
  if (cap.host_blocks > 0) return cap;
  const std::string what = "--points " + std::string(point) + ": " + Number(100 * p.host) +
                           "% of " + std::to_string(unique) + " unique blocks is 0 host blocks";
  if (unique == 0) return Status::InvalidArgument(what + "; expected a trace with blocks");
  return Status::InvalidArgument(what + "; expected a host fraction of at least " +
                                 Number(1.0 / double(unique)) + " (one block)");
}

Result<std::vector<SweepResult>> RunSweepPoint(const Trace& trace, const SweepEngine& engine,
                                               const SweepFlags& f, const SweepCapacity& capacity,
                                               const PolicyKnobs& knobs, const SweepRowDone& done) {
  const std::vector<std::string>& names = f.policies;
  // The lru row first when the write budget is a share of what it writes;
  // the others keep their order.
  std::vector<size_t> order(names.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const bool lru_share = f.write_budget_lru_share > 0;
  if (lru_share) {
    std::stable_partition(order.begin(), order.end(), [&](size_t i) { return names[i] == "lru"; });
  }
  std::optional<double> lru_budget;  // bytes per day, once the lru row ran
  uint64_t lru_nvme_bytes = 0;
  std::vector<std::optional<SweepResult>> rows(names.size());
  for (size_t i : order) {
    const std::string& name = names[i];
    Result<SweepPolicy> policy =
        name == "custom" ? CustomSweepPolicy(f.custom) : NamedSweepPolicy(name);
    if (!policy.ok()) return policy.status();
    PolicyKnobs row_knobs = knobs;
    const auto& adm = policy->nvme_admission;
    if (lru_share && std::find(adm.begin(), adm.end(), "write_budget") != adm.end()) {
      if (!lru_budget) {
        return Status::InvalidArgument(name + ": --write-budget-lru-share needs lru in --policies");
      }
      if (*lru_budget < 1) {
        return Status::InvalidArgument(
            name + ": --write-budget-lru-share " + Number(f.write_budget_lru_share) +
            " of admit-all+LRU's NVMe writes (" + std::to_string(lru_nvme_bytes) + " bytes with " +
            std::to_string(capacity.nvme_blocks) + " NVMe blocks) is a budget of " +
            Number(*lru_budget) +
            " bytes per day, less than one; expected a larger share, a point with NVMe "
            "capacity, or --write-budget-gib-per-day");
      }
      row_knobs.write_budget_bytes_per_day = WholeBytes(*lru_budget);
    }
    const auto t0 = std::chrono::steady_clock::now();
    Result<SweepResult> r = RunSweepOne(trace, engine, *policy, capacity, row_knobs);
    if (!r.ok()) return Status(r.status().code(), name + ": " + r.status().ToString());
    if (done) {
      done(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (lru_share && name == "lru" && !lru_budget) {
      lru_budget = BytesPerDay(f.write_budget_lru_share, *r);
      lru_nvme_bytes = r->bytes_written_nvme;
    }
    rows[i] = std::move(*r);
  }
  std::vector<SweepResult> out;
  out.reserve(rows.size());
  for (std::optional<SweepResult>& r : rows) out.push_back(std::move(*r));
  return out;
}

}  // namespace kvtier::bench
