// config validate and config explain.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "kvtier/block_key.h"
#include "kvtier/config.h"
#include "kvtier/kv_layout.h"
#include "tools/inspect/inspect.h"
#include "tools/inspect/json_text.h"
#include "tools/inspect/table.h"

namespace kvtier::inspect {
namespace {

using nlohmann::json;

struct Entry {
  std::string key;      // dotted path, e.g. "tiers.host.capacity"
  std::string value;    // as YAML would write it
  std::string meaning;  // one line
};

std::string Bool(bool b) { return b ? "true" : "false"; }
std::string U(uint64_t v) { return std::to_string(v); }
// A string value; "" when empty, so the line reads back as the empty string.
std::string Quoted(const std::string& v) { return v.empty() ? "\"\"" : v; }
std::string List(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out + "]";
}
// A number as a person writes it: up to the type's exact decimal digits, so a
// value typed into the file prints as typed and reads back the same.
template <typename Float>
std::string Num(Float v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*g", std::numeric_limits<Float>::digits10,
                static_cast<double>(v));
  return buf;
}
std::string Size(uint64_t bytes) {
  // Past 2^53 a double no longer holds every integer: the unit form would
  // round.
  if (bytes > (uint64_t{1} << 53)) return U(bytes);
  std::string b = Bytes(static_cast<double>(bytes));
  b.erase(std::remove(b.begin(), b.end(), ' '), b.end());
  return b.find('.') == std::string::npos ? b : U(bytes);  // exact, as the reader takes it
}

void ModelEntries(const KvtierConfig& c, std::vector<Entry>* e) {
  const ModelOptions& m = c.model;
  *e = {
      {"model.preset", m.preset, "named geometry, applied before the fields below"},
      {"model.id", m.model_id, "model id folded into every block key"},
      {"model.revision", m.revision, "weights revision (commit or tag)"},
      {"model.dtype", m.dtype, "KV element type: fp16, bf16, fp8 or fp32"},
      {"model.layers", U(m.num_layers), "transformer layers holding KV"},
      {"model.kv_heads", U(m.num_kv_heads), "KV heads per tensor-parallel shard"},
      {"model.head_size", U(m.head_size), "elements per head"},
      {"model.block_tokens", U(m.block_tokens),
       "tokens per block; one block = one I/O below the GPU"},
      {"model.tp_rank", U(m.tp_rank), "this process's tensor-parallel rank"},
      {"model.tp_size", U(m.tp_size), "tensor-parallel world size"},
      {"model.layout", std::string(KvLayoutKindName(m.layout)),
       "engine KV layout: nhd, hnd, cross_layer, flashinfer, packed or mla"},
      {"model.hidden_size", U(m.hidden_size),
       "model width for FLOP estimates; 0 = kv_heads * head_size * 8"},
      {"hashing.algorithm", std::string(HashAlgorithmName(c.runtime.hash)),
       "block key hash: xxh3_128 (fast) or sha256 (tenants who must not forge collisions)"},
      {"engine.pool_blocks", U(c.gpu_pool_blocks),
       "blocks in the engine's KV pool (simulated engine)"},
      {"runtime.worker_threads", U(c.runtime.worker_threads),
       "threads serving Save and Load (loads first; saves hold all but one)"},
      {"runtime.max_queued_requests", U(c.runtime.max_queued_requests),
       "saves, and apart loads, queued before they answer Busy"},
      {"runtime.admin_socket", c.runtime.admin_socket.empty() ? "\"\"" : c.runtime.admin_socket,
       "Unix socket serving GET /stats and /metrics; empty = off"},
      {"runtime.gpu_watermark", Num(c.runtime.gpu_watermark),
       "fraction of the engine's KV pool kept free; new requests wait below it; 0 = off"},
      {"runtime.gpu_flops", Num(c.runtime.gpu_flops_per_s),
       "the engine's prefill rate (FLOP/s) for cost admission; 0 = unknown"},
      {"runtime.state_blocks", U(c.runtime.state_blocks),
       "hybrid models: engine blocks one state checkpoint takes; 0 = KV blocks only"},
      {"mover.interval_ms", U(c.runtime.mover.interval_ms),
       "how often an idle mover re-checks the watermarks"},
      {"mover.batch_blocks", U(c.runtime.mover.batch_blocks),
       "blocks written to a lower tier per batch"},
      {"mover.shutdown_writeback_ms", U(c.runtime.mover.shutdown_writeback_ms),
       "at shutdown, time spent writing host-only blocks to the tier below; 0 = off"},
  };
}

void NvmeEntries(const std::string& p, const TierOptions& t, std::vector<Entry>* e) {
  const NvmeTierOptions& n = t.nvme;
  e->insert(e->end(), {
      {p + "path", t.path, "data file or block device"},
      {p + "region_size", Size(t.region_bytes), "log region size"},
      {p + "io_timeout_ms", U(n.io_timeout_ms), "deadline of every device I/O"},
      {p + "queue_depth", U(n.queue_depth), "requests in flight in the kernel (io_uring depth)"},
      {p + "max_queued", U(n.max_queued), "requests accepted but not in flight before Busy"},
      {p + "index_path", n.index_path.empty() ? "\"\"" : n.index_path,
       "RocksDB index directory; empty = <path>.index"},
      {p + "on_mismatch", n.on_mismatch,
       "store of another format or geometry, or with a damaged index: refuse or wipe"},
      {p + "reclaim", n.reclaim, "region reclaimed when none is free: fifo or greedy"},
      {p + "direct_io", Bool(n.direct_io), "open the data file with O_DIRECT (buffered fallback)"},
      {p + "commit_every_blocks", U(n.commit_every_blocks), "blocks between index group commits"},
      {p + "commit_interval_ms", U(n.commit_interval_ms), "most a block waits for its commit"},
      {p + "reinsert_hits", U(n.reinsert_hits),
       "reclaim keeps blocks read this often, evicts the rest (0: keeps all)"},
  });
}

void RedisEntries(const std::string& p, const TierOptions& t, std::vector<Entry>* e) {
  const RedisTierOptions& r = t.redis;
  e->insert(e->end(), {
      {p + "servers", List(t.servers), "host:port of each server (or cluster seeds)"},
      {p + "shared", Bool(t.shared), "other processes store here: lookup misses ask it"},
      {p + "user", Quoted(r.user), "ACL user for AUTH; empty = default user"},
      {p + "password", r.password.empty() ? "\"\"" : "(set, not shown)", "AUTH password; empty = no AUTH"},
      {p + "db", U(r.db), "SELECT index (0 with cluster)"},
      {p + "key_prefix", r.key_prefix, "keys are <prefix>:<namespace hex>:<key hex>"},
      {p + "ttl_s", U(r.ttl_s), "seconds a block lives after its last write or read; 0 = never"},
      {p + "connect_timeout_ms", U(r.connect_timeout_ms), "bound on connect, AUTH and SELECT"},
      {p + "op_timeout_ms", U(r.op_timeout_ms), "bound on each socket read or write of a batch"},
      {p + "connections", U(r.connections), "data connections per server (one I/O thread each)"},
      {p + "cluster", Bool(r.cluster), "servers are seeds of a Redis Cluster"},
      {p + "tls", Bool(r.tls), "TLS to every server; certificates always verified"},
      {p + "tls_ca_file", Quoted(r.tls_ca_file), "PEM CAs to trust; empty = system store"},
      {p + "tls_cert_file", Quoted(r.tls_cert_file), "client certificate; empty = none"},
      {p + "tls_key_file", Quoted(r.tls_key_file), "its private key"},
      {p + "tls_server_name", Quoted(r.tls_server_name), "name certificates must carry; empty = each server's host"},
  });
}

void RemoteEntries(const std::string& p, const TierOptions& t, std::vector<Entry>* e) {
  const RemoteTierOptions& r = t.remote;
  e->insert(e->end(), {
      {p + "servers", List(t.servers), "host:port of each kvtier-memd server"},
      {p + "shared", Bool(t.shared), "other processes store here: lookup misses ask it"},
      {p + "transport", r.transport, "tcp, or rdma (needs an RDMA device)"},
      {p + "secret_file", r.secret_file, "file holding the kvtier-memd shared secret"},
      {p + "connections", U(r.connections), "TCP connections per server"},
      {p + "connect_timeout_ms", U(r.connect_timeout_ms), "bound on connect plus handshake"},
      {p + "op_timeout_ms", U(r.op_timeout_ms), "deadline of every request"},
      {p + "reconnect_backoff_ms", U(r.reconnect_backoff_ms), "first wait after a failure; doubles"},
      {p + "reconnect_backoff_max_ms", U(r.reconnect_backoff_max_ms), "cap of that wait"},
  });
}

// Every knob, whether or not the tier's policies read it (they ignore the rest).
void PolicyEntries(const std::string& tier, const TierOptions& t, std::vector<Entry>* e) {
  const std::string p = tier + "policy.";
  const PolicyKnobs& k = t.policy;
  e->insert(
      e->end(),
      {
          {p + "frequency_threshold", U(k.frequency_threshold),
           "frequency: admit on the N-th sighting"},
          {p + "sketch_width", U(k.sketch_width), "frequency: counters per count-min row"},
          {p + "sketch_aging_period", U(k.sketch_aging_period),
           "frequency: halve every count after this many sightings; 0 = width x threshold / 4"},
          {p + "marconi_admit_tails", Bool(k.marconi_admit_tails),
           "marconi: keep tails of continuing sessions"},
          {p + "marconi_continue_threshold", Num(k.marconi_continue_threshold),
           "marconi: expected_reuse hint at which a tail is kept"},
          {p + "marconi_probation", Num(k.marconi_probation),
           "marconi: share of once-seen blocks kept without hints"},
          {p + "marconi_checkpoints_only", Bool(k.marconi_checkpoints_only),
           "marconi: admit every KV block, judge state checkpoints only"},
          {p + "write_budget_per_day", Size(k.write_budget_bytes_per_day),
           "write_budget: device bytes per day (payload = this / write_amplification)"},
          {p + "write_amplification", Num(k.write_amplification),
           "write_budget: device bytes per payload byte"},
          {p + "write_max_per_s", Size(k.write_max_bytes_per_s),
           "write_budget: hard cap in device bytes per second; 0 = none"},
          {p + "write_interval_ms", U(k.write_interval_ms),
           "write_budget: how often the admit probability is adjusted"},
          {p + "cost_margin", Num(k.cost_margin),
           "cost: admit if load time * margin < recompute time"},
          {p + "read_bandwidth",
           // Read as an integer of at most 2^64 - 1, kept as a double (which
           // may round it up to 2^64, past any integer cast).
           t.read_bytes_per_s >= 0x1p64 ? U(UINT64_MAX)
                                        : Size(static_cast<uint64_t>(t.read_bytes_per_s)),
           "cost: the tier's read bytes per second; 0 = unknown, cost admits"},
          {p + "read_latency_us", Num(t.read_latency_s * 1e6), "cost: latency of one read"},
          {p + "flop_alpha", Num(k.flop_alpha), "flop_aware: weight of FLOPs saved per byte"},
          {p + "alpha_tune_every", U(k.alpha_tune_every),
           "flop_aware: requests between tunings of flop_alpha; 0 = never"},
          {p + "alpha_tune_window", U(k.alpha_tune_window),
           "flop_aware: recent requests a tuning replays"},
          {p + "s3fifo_small_fraction", Num(k.s3fifo_small_fraction),
           "s3fifo: share of the small FIFO"},
          {p + "slru_protected_fraction", Num(k.slru_protected_fraction),
           "slru: share of the tier blocks used twice may hold"},
          {p + "reuse_ratio", Num(k.reuse_ratio),
           "reuse: admit a class reused >= ratio x the average"},
          {p + "reuse_spread", Num(k.reuse_spread),
           "reuse: 0 = hard cut; else a ramp over ratio -/+ spread"},
          {p + "reuse_fill_share", Num(k.reuse_fill_share),
           "reuse: admit every block while the tier is below this share"},
          {p + "reuse_min_samples", U(k.reuse_min_samples),
           "reuse: blocks a class needs before it is judged"},
          {p + "reuse_half_life", U(k.reuse_half_life),
           "reuse: class counts halve every N block sightings"},
          {p + "reuse_age_exponent", Num(k.reuse_age_exponent),
           "reuse eviction: rate / idle^exponent (1 = hyperbolic)"},
      });
}

void TierEntries(const TierOptions& t, std::vector<Entry>* e) {
  const std::string p = "tiers." + t.name + ".";
  e->insert(e->end(), {
      {p + "name", t.name, "names the tier in stats and metrics"},
      {p + "type", t.type, "backend: host, nvme, redis or remote"},
      {p + "capacity", Size(t.capacity_bytes), "bytes this tier may hold"},
      {p + "watermarks.high", Num(t.watermarks.high), "above this fraction of capacity the mover evicts"},
      {p + "watermarks.low", Num(t.watermarks.low), "... down to this fraction"},
      {p + "eviction", t.eviction, "eviction policy"},
      {p + "admission", List(t.admission), "admission policies; all must accept"},
  });
  if (t.type == "host") {
    e->insert(e->end(), {{p + "hugepages", Bool(t.hugepages), "try huge pages for the arena"},
                         {p + "mlock", Bool(t.mlock), "lock the arena in memory (best effort)"}});
  } else if (t.type == "nvme") {
    NvmeEntries(p, t, e);
  } else if (t.type == "redis") {
    RedisEntries(p, t, e);
  } else if (t.type == "remote") {
    RemoteEntries(p, t, e);
  }
  PolicyEntries(p, t, e);
}

std::vector<Entry> Explain(const KvtierConfig& c) {
  std::vector<Entry> e;
  ModelEntries(c, &e);
  for (const TierOptions& t : c.runtime.tiers) TierEntries(t, &e);
  e.push_back({"(derived) block_bytes", U(c.runtime.block_bytes),
               "bytes of one block across all layers, from the model"});
  return e;
}

}  // namespace

int RunConfigValidate(const std::string& file, const std::vector<std::string>& overrides,
                      const Output& o) {
  Result<KvtierConfig> c = LoadConfigFile(file, overrides);
  if (!c.ok()) {
    if (o.json) {
      o.out << JsonText({{"file", file}, {"valid", false}, {"error", c.status().message()}})
            << "\n";
    }
    o.err << c.status().message() << "\n";
    return kExitBad;
  }
  json tiers = json::array();
  std::string summary;
  for (const TierOptions& t : c->runtime.tiers) {
    tiers.push_back({{"name", t.name}, {"type", t.type}, {"capacity_bytes", t.capacity_bytes}});
    summary += (summary.empty() ? "" : ", ") + t.name + " (" + t.type + ", " +
               Bytes(static_cast<double>(t.capacity_bytes)) + ")";
  }
  if (o.json) {
    o.out << JsonText({{"file", file},
                       {"valid", true},
                       {"block_bytes", c->runtime.block_bytes},
                       {"tiers", tiers}})
          << "\n";
  } else {
    o.out << file << ": valid; block " << Bytes(static_cast<double>(c->runtime.block_bytes))
          << "; tiers: " << summary << "\n";
  }
  return kExitOk;
}

int RunConfigExplain(const std::string& file, const std::vector<std::string>& overrides,
                     const Output& o) {
  Result<KvtierConfig> c = LoadConfigFile(file, overrides);
  if (!c.ok()) {
    if (o.json) {  // as validate answers: a document on stdout either way
      o.out << JsonText({{"file", file}, {"valid", false}, {"error", c.status().message()}})
            << "\n";
    }
    o.err << c.status().message() << "\n";
    return kExitBad;
  }
  std::vector<Entry> entries = Explain(*c);
  if (o.json) {
    json keys = json::array();
    for (const Entry& e : entries) {
      keys.push_back({{"key", e.key}, {"value", e.value}, {"meaning", e.meaning}});
    }
    o.out << JsonText({{"file", file}, {"keys", keys}}) << "\n";
    return kExitOk;
  }
  o.out << "# effective configuration of " << file << ", every default filled in\n";
  // Left-aligned columns, like the comments of config/examples/default.yaml.
  size_t kw = 0, vw = 0;
  for (const Entry& e : entries) {
    kw = std::max(kw, e.key.size());
    vw = std::max(vw, e.value.size());
  }
  for (const Entry& e : entries) {
    o.out << e.key << std::string(kw - e.key.size() + 2, ' ') << e.value
          << std::string(vw - e.value.size() + 2, ' ') << "# " << e.meaning << "\n";
  }
  return kExitOk;
}

}  // namespace kvtier::inspect
