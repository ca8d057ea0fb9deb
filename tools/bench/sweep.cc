// Named policy sets and the markdown table of `kvtier-bench sweep`.
#include "tools/bench/sweep.h"

#include <algorithm>
#include <cstdio>
#include <unordered_set>

namespace kvtier::bench {

Result<SweepPolicy> NamedSweepPolicy(const std::string& name) {
  SweepPolicy p;
  p.label = name;
  if (name == "lru") {
    p.label = "admit-all+LRU";
  } else if (name == "oracle") {
    p.label = "oracle (Belady)";
    p.oracle = true;
  } else if (name == "frequency") {
    p.label = "frequency+LRU";
    p.nvme_admission = {"frequency"};
  } else if (name == "s3fifo") {
    p.label = "admit-all+S3-FIFO";
    p.host_eviction = p.nvme_eviction = "s3fifo";
  } else if (name == "cost") {
    p.label = "cost+LRU";
    p.nvme_admission = {"cost"};
  } else if (name == "write_budget") {
    p.label = "write_budget+LRU";
    p.nvme_admission = {"write_budget"};
  } else if (name == "flop_aware") {
    p.label = "admit-all+flop_aware";
    p.host_eviction = p.nvme_eviction = "flop_aware";
    p.tune_alpha = true;
  } else if (name == "marconi") {
    p.label = "marconi+flop_aware";
    p.nvme_admission = {"marconi"};
    p.host_eviction = p.nvme_eviction = "flop_aware";
    p.tune_alpha = true;
  } else if (name == "slru") {
    p.label = "admit-all+SLRU";
    p.host_eviction = p.nvme_eviction = "slru";
  } else if (name == "kvtier") {
    // The default set; see docs/BENCHMARKS.md.
    p.label = "kvtier default";
    p.nvme_admission = {"reuse"};
    p.host_eviction = "reuse";
    p.nvme_eviction = "reuse";
  } else {
    return Status::InvalidArgument(
        "unknown sweep policy '" + name +
        "'; expected one of: lru, oracle, frequency, s3fifo, slru, cost, write_budget, "
        "flop_aware, marconi, kvtier, custom");
  }
  return p;
}

Result<SweepPolicy> CustomSweepPolicy(const std::string& spec) {
  const size_t a = spec.find(':');
  const size_t b = a == std::string::npos ? a : spec.find(':', a + 1);
  if (b == std::string::npos || spec.find(':', b + 1) != std::string::npos) {
    return Status::InvalidArgument(
        "custom policy set '" + spec +
        "': expected HOST_EVICTION:ADMISSION[+ADMISSION...]:NVME_EVICTION");
  }
  SweepPolicy p;
  p.label = "custom " + spec;
  p.host_eviction = spec.substr(0, a);
  p.nvme_eviction = spec.substr(b + 1);
  p.nvme_admission.clear();
  std::string adm = spec.substr(a + 1, b - a - 1);
  for (size_t pos = 0; pos <= adm.size();) {
    const size_t next = std::min(adm.find('+', pos), adm.size());
    p.nvme_admission.push_back(adm.substr(pos, next - pos));
    pos = next + 1;
  }
  p.tune_alpha = p.host_eviction == "flop_aware" || p.nvme_eviction == "flop_aware";
  return p;
}

uint64_t UniqueBlocks(const Trace& trace) {
  std::unordered_set<uint64_t> ids;
  for (const TraceRequest& r : trace.requests) ids.insert(r.hash_ids.begin(), r.hash_ids.end());
  return ids.size();
}

namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

}  // namespace

std::string FormatSweepTable(const std::vector<SweepResult>& rows, uint64_t block_bytes) {
  std::string out =
      "| policy | host blk | nvme blk | hit % host | hit % nvme | hit % total | FLOPs saved % "
      "| host GiB written | NVMe GiB written | NVMe writes vs LRU | preemptions "
      "| recomputed tok | TTFT p50 s | TTFT p99 s |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  const double gib = 1024.0 * 1024.0 * 1024.0;
  // Every row against admit-all+LRU's, wherever it is listed.
  double lru_nvme = 0;
  for (const SweepResult& r : rows) {
    if (r.label == "admit-all+LRU") {
      lru_nvme = double(r.bytes_written_nvme);
      break;
    }
  }
  for (const SweepResult& r : rows) {
    const double tok = r.tokens == 0 ? 1.0 : double(r.tokens);
    const std::string ratio =
        lru_nvme > 0 ? Fmt("%.2f", double(r.bytes_written_nvme) / lru_nvme) : "-";
    out += "| " + r.label + " | " + std::to_string(r.capacity.host_blocks) + " | " +
           std::to_string(r.capacity.nvme_blocks) + " | " +
           Fmt("%.2f", 100.0 * double(r.hit_tokens_host) / tok) + " | " +
           Fmt("%.2f", 100.0 * double(r.hit_tokens_nvme) / tok) + " | " +
           Fmt("%.2f", 100.0 * r.HitRate()) + " | " +
           Fmt("%.2f", r.flops_total > 0 ? 100.0 * r.flops_saved / r.flops_total : 0.0) + " | " +
           Fmt("%.1f", double(r.bytes_written_host) / gib) + " | " +
           Fmt("%.1f", double(r.bytes_written_nvme) / gib) + " | " + ratio + " | " +
           std::to_string(r.preemptions) + " | " + std::to_string(r.recomputed_tokens) + " | " +
           Fmt("%.3f", r.ttft_p50_s) + " | " + Fmt("%.3f", r.ttft_p99_s) + " |\n";
  }
  (void)block_bytes;
  return out;
}

}  // namespace kvtier::bench
