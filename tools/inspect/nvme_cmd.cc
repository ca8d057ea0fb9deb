// nvme: an NVMe tier's store read offline, through its index (summary) or
// block by block (verify). Built when the NVMe tier is.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "tiers/nvme/nvme_offline.h"
#include "tools/inspect/inspect.h"
#include "tools/inspect/json_text.h"
#include "tools/inspect/table.h"

namespace kvtier::inspect {
namespace {

using internal::BlockLocation;
using internal::NsKey;
using internal::NvmeOfflineStore;
using nlohmann::json;

std::string NsHex(NamespaceId ns) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(ns.value));
  return buf;
}

struct RegionView {
  uint64_t generation = 0;
  uint64_t blocks = 0;
  uint64_t disk_bytes = 0;
};
struct NsView {
  uint64_t blocks = 0;
  uint64_t payload_bytes = 0;
};

// The index as the tier would load it. Entries whose generation is not their
// region's are stale (left behind when a region is reused; the tier drops
// them on open); entries outside the store's geometry, past the end of a
// truncated file or overlapping another on disk are damage the tier drops
// too; records that do not decode are bad.
// Each is counted apart and none is a block.
struct StoreView {
  std::vector<RegionView> regions;
  std::map<uint64_t, NsView> namespaces;
  std::vector<std::pair<NsKey, BlockLocation>> blocks;  // current entries
  uint64_t payload_bytes = 0, disk_bytes = 0, stale = 0, dropped = 0, bad_records = 0;
};

Result<StoreView> Load(const NvmeOfflineStore& store) {
  StoreView v;
  v.regions.resize(store.meta().regions);
  internal::IndexEntries all;
  KVTIER_RETURN_IF_ERROR(store.Scan(
      [&](uint32_t r, uint64_t gen) {
        if (r < v.regions.size()) v.regions[r].generation = gen;
      },
      [&](const NsKey& id, const BlockLocation& loc) { all.emplace_back(id, loc); },
      &v.bad_records));
  const internal::StoreMeta& m = store.meta();
  internal::IndexEntries current;
  for (auto& [id, loc] : all) {
    if (!internal::LocationFits(loc, m.block_bytes, m.region_bytes, m.regions) ||
        !store.Holds(loc)) {
      ++v.dropped;
    } else if (loc.generation == 0 || loc.generation != v.regions[loc.region].generation) {
      ++v.stale;
    } else {
      current.emplace_back(id, loc);
    }
  }
  std::vector<internal::IndexUpdate> overlapping;
  internal::DropOverlaps(current, overlapping);
  v.dropped += overlapping.size();
  for (auto& [id, loc] : current) {
    RegionView& r = v.regions[loc.region];
    ++r.blocks;
    r.disk_bytes += internal::DiskBytes(loc.payload_bytes);
    NsView& n = v.namespaces[id.ns.value];
    ++n.blocks;
    n.payload_bytes += loc.payload_bytes;
    v.payload_bytes += loc.payload_bytes;
    v.disk_bytes += internal::DiskBytes(loc.payload_bytes);
    v.blocks.emplace_back(id, loc);
  }
  return v;
}

// The summary reads the index alone; an index given with --index that
// belongs to another data file would pass for this one's. A few blocks,
// spread over the index, have their header pages read: when not one names
// its entry, the index does not describe this file.
Status CheckHeadersSampled(const NvmeOfflineStore& store, const StoreView& v) {
  const internal::HeaderSample sample = internal::SampleHeaders(
      v.blocks, [&](const NsKey& id, const BlockLocation& loc) -> std::optional<Status> {
        return store.VerifyHeader(id, loc);
      });
  if (!sample.Mismatched()) return Status::Ok();
  return Status::Corruption("none of " + std::to_string(sample.failed) +
                            " blocks sampled from the index at " + store.index_dir() +
                            " has its header in the data file (first: " + sample.first.ToString() +
                            "): the index is another store's, or the file was overwritten; "
                            "'verify' checks every block");
}

uint64_t RegionsInUse(const StoreView& v) {
  uint64_t n = 0;
  for (const RegionView& r : v.regions) n += r.blocks > 0;
  return n;
}

double WriteAmplification(const internal::WriteTotals& t) {
  return t.host_bytes == 0 ? 0.0
                           : static_cast<double>(t.device_bytes) / static_cast<double>(t.host_bytes);
}

std::string Fixed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}

int PrintSummary(const NvmeOfflineStore& store, const StoreView& v, const NvmeFlags& f,
                 const Output& o) {
  const internal::StoreMeta& m = store.meta();
  auto recorded = store.Totals();
  if (!recorded.ok()) {
    o.err << "kvtier-inspect nvme: " << recorded.status().ToString() << "\n";
    return kExitBad;
  }
  const internal::WriteTotals totals = *recorded;
  if (o.json) {
    json j{{"path", f.path},
           {"index", store.index_dir()},
           {"format_version", m.format_version},
           {"block_bytes", m.block_bytes},
           {"region_bytes", m.region_bytes},
           {"regions", m.regions},
           {"regions_in_use", RegionsInUse(v)},
           {"blocks", v.blocks.size()},
           {"payload_bytes", v.payload_bytes},
           {"disk_bytes", v.disk_bytes},
           {"stale_entries", v.stale},
           {"dropped_entries", v.dropped},
           {"bad_records", v.bad_records},
           {"host_bytes_written", totals.host_bytes},
           {"device_bytes_written", totals.device_bytes},
           {"write_amplification", WriteAmplification(totals)},
           {"namespaces", json::array()},
           {"region_detail", json::array()}};
    for (const auto& [ns, n] : v.namespaces) {
      j["namespaces"].push_back({{"id", NsHex(NamespaceId{ns})},
                                 {"blocks", n.blocks},
                                 {"payload_bytes", n.payload_bytes}});
    }
    for (size_t i = 0; i < v.regions.size(); ++i) {
      j["region_detail"].push_back({{"region", i},
                                    {"generation", v.regions[i].generation},
                                    {"blocks", v.regions[i].blocks},
                                    {"disk_bytes", v.regions[i].disk_bytes}});
    }
    o.out << JsonText(j, 2) << "\n";
    return kExitOk;
  }
  o.out << "nvme store " << f.path << "\nindex " << store.index_dir() << "\n\n";
  Table t({"format version", std::to_string(m.format_version)});
  t.Row({"block size", Bytes(static_cast<double>(m.block_bytes))});
  t.Row({"region size", Bytes(static_cast<double>(m.region_bytes))});
  t.Row({"regions",
         std::to_string(m.regions) + " (" + std::to_string(RegionsInUse(v)) + " holding blocks)"});
  t.Row({"blocks", std::to_string(v.blocks.size())});
  t.Row({"payload bytes", std::to_string(v.payload_bytes)});
  t.Row({"disk bytes", std::to_string(v.disk_bytes)});
  t.Row({"stale entries", std::to_string(v.stale)});
  t.Row({"dropped entries", std::to_string(v.dropped)});
  t.Row({"bad records", std::to_string(v.bad_records)});
  t.Row({"host bytes written", std::to_string(totals.host_bytes)});
  t.Row({"device bytes written", std::to_string(totals.device_bytes)});
  t.Row({"write amplification", totals.host_bytes == 0
                                    ? std::string("n/a (nothing written yet)")
                                    : Fixed(WriteAmplification(totals))});
  o.out << t.Render() << "\n";
  Table ns({"namespace", "blocks", "payload bytes"});
  for (const auto& [id, n] : v.namespaces) {
    ns.Row({NsHex(NamespaceId{id}), std::to_string(n.blocks), std::to_string(n.payload_bytes)});
  }
  o.out << ns.Render();
  return kExitOk;
}

// A bar on stderr, redrawn when the percentage changes; only on a terminal.
class Progress {
 public:
  Progress(std::ostream& err, uint64_t total)
      : err_(err), total_(total), on_(isatty(STDERR_FILENO) == 1 && total > 0) {}
  void Step(uint64_t done) {
    if (!on_) return;
    const uint64_t pct = done * 100 / total_;
    if (pct == last_ && done != total_) return;
    last_ = pct;
    const size_t filled = static_cast<size_t>(pct * 40 / 100);
    err_ << "\rverify [" << std::string(filled, '#') << std::string(40 - filled, '.') << "] "
         << done << "/" << total_ << " blocks" << std::flush;
    if (done == total_) err_ << "\n";
  }

 private:
  std::ostream& err_;
  const uint64_t total_;
  const bool on_;
  uint64_t last_ = 101;
};

int Verify(const NvmeOfflineStore& store, const StoreView& v, const Output& o) {
  json bad = json::array();
  Table t({"corrupt block", "region", "offset", "error"});
  Progress progress(o.err, v.blocks.size());
  uint64_t done = 0;
  for (const auto& [id, loc] : v.blocks) {
    Status s = store.VerifyBlock(id, loc);
    progress.Step(++done);
    if (s.ok()) continue;
    const std::string name = NsHex(id.ns) + ":" + ToHex(id.key);
    bad.push_back({{"namespace", NsHex(id.ns)},
                   {"key", ToHex(id.key)},
                   {"region", loc.region},
                   {"offset", loc.offset},
                   {"file_offset", store.FileOffset(loc)},
                   {"error", s.ToString()}});
    t.Row({name, std::to_string(loc.region), std::to_string(loc.offset), s.ToString()});
  }
  const uint64_t good = v.blocks.size() - bad.size();
  if (o.json) {
    o.out << JsonText({{"blocks", v.blocks.size()},
                       {"good", good},
                       {"corrupt_blocks", bad.size()},
                       {"stale_entries", v.stale},
                       {"dropped_entries", v.dropped},
                       {"bad_records", v.bad_records},
                       {"corrupt", bad}},
                      2)
          << "\n";
  } else {
    o.out << "verified " << v.blocks.size() << " blocks: " << good << " good, " << bad.size()
          << " corrupt\n";
    if (v.dropped != 0 || v.bad_records != 0) {
      o.out << "index: " << v.bad_records << " bad records, " << v.dropped
            << " dropped entries (outside the store's geometry or the file, or overlapping "
               "another); the tier discards them\n";
    }
    if (!bad.empty()) o.out << t.Render();
  }
  // A damaged index is as bad as a damaged block: the tier loses what it held.
  return bad.empty() && v.dropped == 0 && v.bad_records == 0 ? kExitOk : kExitBad;
}

}  // namespace

int RunNvme(const NvmeFlags& f, const Output& o) {
  auto store = NvmeOfflineStore::Open(f.path, f.index, f.read_only);
  if (!store.ok()) {
    const bool held = store.status().code() == StatusCode::kUnavailable;
    o.err << "kvtier-inspect nvme: " << store.status().ToString()
          << (held ? "; stop it first, or pass --read-only to read it while it changes" : "")
          << "\n";
    return held ? kExitUsage : kExitBad;
  }
  auto view = Load(**store);
  if (!view.ok()) {
    o.err << "kvtier-inspect nvme: " << view.status().ToString() << "\n";
    return kExitBad;
  }
  if (f.action == "verify") return Verify(**store, *view, o);
  if (Status s = CheckHeadersSampled(**store, *view); !s.ok()) {
    o.err << "kvtier-inspect nvme: " << s.ToString() << "\n";
    return kExitBad;
  }
  return PrintSummary(**store, *view, f, o);
}

}  // namespace kvtier::inspect
