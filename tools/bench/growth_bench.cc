#include "tools/bench/growth_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <unordered_map>

#include "core/block_index.h"
#include "kvtier/policy.h"
#include "policy/policy_internal.h"
#include "policy/reuse_model.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Feeds `requests` chains to `call`, timing each call.
GrowthBenchRow Time(std::string what, const GrowthBenchOptions& o,
                    const std::function<void(std::span<const uint64_t>)>& call,
                    const std::function<uint64_t()>& entries) {
  const uint64_t requests = o.blocks / o.blocks_per_request;
  std::vector<uint64_t> chain(o.blocks_per_request);
  std::vector<double> ms;
  ms.reserve(requests);
  uint64_t next = 0;
  const auto start = Clock::now();
  for (uint64_t r = 0; r < requests; ++r) {
    for (uint64_t& id : chain) id = internal::Mix64(++next);
    const auto t0 = Clock::now();
    call(chain);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  GrowthBenchRow row;
  row.what = std::move(what);
  row.total_s = std::chrono::duration<double>(Clock::now() - start).count();
  row.entries = entries();
  row.calls = requests;
  if (!ms.empty()) {
    const size_t k = std::min(ms.size() - 1, ms.size() * 999 / 1000);
    std::nth_element(ms.begin(), ms.begin() + static_cast<ptrdiff_t>(k), ms.end());
    row.p999_ms = ms[k];
    row.longest_ms = *std::max_element(ms.begin(), ms.end());
  }
  return row;
}

}  // namespace

Status GrowthBenchOptions::Validate() const {
  if (blocks_per_request == 0 || blocks < blocks_per_request) {
    return Status::InvalidArgument("--blocks must be at least --blocks-per-request (>= 1)");
  }
  if (blocks > (uint64_t{1} << 23)) {
    return Status::InvalidArgument("--blocks is at most 2^23 (the learners' bound)");
  }
  return Status::Ok();
}

Result<std::vector<GrowthBenchRow>> RunGrowthBench(const GrowthBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.Validate());
  std::vector<GrowthBenchRow> rows;
  const PolicyKnobs knobs;
  {
    internal::ReuseModel model(knobs);
    rows.push_back(Time(
        "reuse learner", o,
        [&](std::span<const uint64_t> c) { model.ObserveRequest(c, uint32_t(c.size())); },
        [&] { return uint64_t(model.TEST_Nodes()); }));
  }
  {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<AdmissionPolicy> marconi,
                            CreateAdmissionPolicy("marconi", knobs));
    uint64_t seen = 0;
    rows.push_back(Time(
        "marconi tree", o,
        [&](std::span<const uint64_t> c) {
          marconi->ObserveRequest(c, uint32_t(c.size()), RequestHints{}, 0);
          seen += c.size();
        },
        [&] { return seen; }));
  }
  {
    internal::BlockIndex index(1);
    rows.push_back(Time(
        "block index", o,
        [&](std::span<const uint64_t> c) {
          internal::IndexEntry* parent = nullptr;
          for (uint64_t id : c) parent = index.Insert({NamespaceId{1}, {id, ~id}}, parent, 1);
        },
        [&] { return uint64_t(index.size()); }));
  }
  {
    struct Value {
      uint64_t words[8];
    };
    std::unordered_map<uint64_t, Value> map;
    rows.push_back(Time(
        "one std::unordered_map (peer)", o,
        [&](std::span<const uint64_t> c) {
          for (uint64_t id : c) map.try_emplace(id);
        },
        [&] { return uint64_t(map.size()); }));
  }
  return rows;
}

}  // namespace kvtier::bench
