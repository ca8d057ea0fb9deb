#include "tools/bench/nvme_bench.h"

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvtier/options.h"
#include "kvtier/tier.h"
#include "tools/bench/aligned_buffer.h"
#include "tools/bench/inflight.h"
#include "tools/bench/nvme_path_bench.h"
#include "tools/bench/run_command.h"

namespace kvtier::bench {
namespace {

constexpr NamespaceId kBenchNs{0xBE4C};

std::string FsName(const std::string& dir) {
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) != 0) return "unknown";
  switch (static_cast<uint64_t>(fs.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x01021994:
      return "tmpfs";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(fs.f_type));
      return buf;
    }
  }
}

std::string SizeName(uint64_t b) {
  if (b % (1 << 20) == 0) return std::to_string(b >> 20) + "MiB";
  if (b % 1024 == 0) return std::to_string(b >> 10) + "KiB";
  return std::to_string(b) + "B";
}

// How long one fio run may take before it is killed.
constexpr std::chrono::minutes kFioTimeout{10};

// fio's sequential O_DIRECT io_uring job; bytes per second.
Result<double> RunFio(const NvmeBenchOptions& o, const std::string& file, uint64_t bs, uint32_t qd,
                      const std::string& op) {
  // fio splits --filename at ':' (a list of files) unless it is escaped.
  std::string fio_file;
  for (char c : file) {
    if (c == ':') fio_file += '\\';
    fio_file += c;
  }
  std::vector<std::string> argv = {o.fio,
                                   "--name=kvtier-bench",
                                   "--filename=" + fio_file,
                                   "--size=" + std::to_string(o.total_bytes),
                                   "--ioengine=io_uring",
                                   "--direct=1",
                                   "--rw=" + op,
                                   "--bs=" + std::to_string(bs),
                                   "--iodepth=" + std::to_string(qd),
                                   "--numjobs=1",
                                   "--output-format=json"};
  if (o.fio_fixedbufs) argv.insert(argv.end(), {"--fixedbufs=1", "--registerfiles=1"});
  if (op == "write" && o.fio_fdatasync > 0) {
    argv.push_back("--fdatasync=" + std::to_string(o.fio_fdatasync));
  }
  const std::string what = o.fio + " --rw=" + op + " --bs=" + std::to_string(bs) +
                           " --iodepth=" + std::to_string(qd) + " on " + file;
  KVTIER_ASSIGN_OR_RETURN(CommandResult run, RunCommand(argv, kFioTimeout));
  if (run.exit_code != 0) {
    return Status::Internal("fio failed (exit " + std::to_string(run.exit_code) + "): " + what);
  }
  Result<double> bps = ParseFioBandwidth(run.output, op);
  if (!bps.ok()) return bps.status().WithContext(what);
  return bps;
}

// Whether the file system of `dir` accepts O_DIRECT (the tier falls back to
// buffered I/O where it does not, and says so).
bool DirectIoWorks(const std::string& dir) {
  const std::string probe = dir + "/direct-probe";
  int fd = open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) close(fd);
  unlink(probe.c_str());
  return fd >= 0;
}

struct TierRun {
  double write_bps = 0;
  double read_bps = 0;
  bool direct = false;
  uint64_t registered_bytes = 0;
};

Result<TierRun> RunTier(const NvmeBenchOptions& o, const std::string& dir, uint64_t bs,
                        uint32_t qd) {
  TierOptions t;
  t.name = "nvme-bench";
  t.type = "nvme";
  t.capacity_bytes = o.total_bytes;
  t.path = dir + "/tier.dat";
  t.region_bytes = std::max<uint64_t>(64 << 20, 4 * (bs + 4096));
  t.nvme.queue_depth = std::max<uint32_t>(64, qd);
  TierContext ctx;
  ctx.block_bytes = bs;
  // One arena of qd 4 KiB-aligned slots (like the host hub's), announced to
  // the tier as the runtime announces the hub arena (the NVMe tier registers
  // it as io_uring fixed buffers). Declared before the tier so it outlives
  // every request the tier still runs.
  KVTIER_ASSIGN_OR_RETURN(AlignedBuffer arena, AlignedBuffer::Allocate(uint64_t{qd} * bs));
  auto tier = CreateTier(t, ctx);
  if (!tier.ok()) return tier.status();
  TierRun run;
  run.registered_bytes = (*tier)->RegisterHostMemory(arena.span());
  std::vector<std::span<std::byte>> bufs;
  for (uint32_t i = 0; i < qd; ++i) {
    bufs.push_back(arena.subspan(uint64_t{i} * bs, bs));
    for (uint64_t k = 0; k < bs; ++k) bufs.back()[k] = static_cast<std::byte>(k * 31 + i);
  }
  const uint64_t blocks = o.total_bytes / bs;
  std::vector<WriteOp> wops(qd);
  std::vector<ReadOp> rops(qd);
  auto w = PumpBlocks(blocks, qd, bs, [&](uint64_t i, uint32_t slot) {
    wops[slot] = WriteOp{BlockKey{i + 1, 0xB0}, bufs[slot], std::nullopt};
    return (*tier)->Write(kBenchNs, std::span(&wops[slot], 1));
  });
  if (!w.ok()) return w.status().WithContext("tier write");
  run.write_bps = *w;
  auto r = PumpBlocks(blocks, qd, bs, [&](uint64_t i, uint32_t slot) {
    rops[slot] = ReadOp{BlockKey{i + 1, 0xB0}, bufs[slot]};
    return (*tier)->Read(kBenchNs, std::span(&rops[slot], 1));
  });
  if (!r.ok()) return r.status().WithContext("tier read");
  run.read_bps = *r;
  run.direct = DirectIoWorks(dir);
  (*tier)->Shutdown();
  return run;
}

// One block size and queue depth: `rounds` rounds of fio write + read, then
// the tier's write + read, alternating so both see the same disk weather;
// the best round of each is kept.
Status MeasurePair(const NvmeBenchOptions& o, const std::string& work, uint64_t bs, uint32_t qd,
                   NvmeBenchReport& rep) {
  NvmeBenchRow wr{bs, qd, "write"}, rd{bs, qd, "read"};
  std::error_code ec;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    if (rep.fio_found) {
      KVTIER_ASSIGN_OR_RETURN(double fw, RunFio(o, work + "/fio.dat", bs, qd, "write"));
      KVTIER_ASSIGN_OR_RETURN(double fr, RunFio(o, work + "/fio.dat", bs, qd, "read"));
      std::filesystem::remove(work + "/fio.dat", ec);
      wr.fio_mb_s = std::max(wr.fio_mb_s, fw / 1e6);
      rd.fio_mb_s = std::max(rd.fio_mb_s, fr / 1e6);
    }
    const std::string tdir = work + "/tier-" + std::to_string(bs) + "-" + std::to_string(qd);
    std::filesystem::create_directories(tdir, ec);
    auto t = RunTier(o, tdir, bs, qd);
    std::filesystem::remove_all(tdir, ec);
    if (!t.ok()) return t.status();
    rep.direct_io = t->direct;
    rep.all_registered = rep.all_registered && t->registered_bytes == uint64_t{qd} * bs;
    wr.tier_mb_s = std::max(wr.tier_mb_s, t->write_bps / 1e6);
    rd.tier_mb_s = std::max(rd.tier_mb_s, t->read_bps / 1e6);
  }
  for (NvmeBenchRow* row : {&wr, &rd}) {
    row->ratio = row->fio_mb_s > 0 ? row->tier_mb_s / row->fio_mb_s : 0;
    rep.rows.push_back(*row);
  }
  return Status::Ok();
}

}  // namespace

Result<double> ParseFioBandwidth(std::string_view json, const std::string& op) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Internal("fio printed no JSON result");
  // Looked up step by step: a missing key or a value of another type is a
  // clear error here, never a nlohmann exception.
  const auto jobs = j.is_object() ? j.find("jobs") : j.end();
  if (jobs == j.end() || !jobs->is_array() || jobs->empty() || !(*jobs)[0].is_object()) {
    return Status::Internal("fio JSON result has no jobs[0]");
  }
  const nlohmann::json& job = (*jobs)[0];
  const auto side = job.find(op);
  if (side == job.end() || !side->is_object()) {
    return Status::Internal("fio JSON result has no jobs[0]." + op);
  }
  const auto bw = side->find("bw_bytes");
  if (bw == side->end() || !bw->is_number() || bw->get<double>() < 0) {
    return Status::Internal("fio JSON result has no number jobs[0]." + op + ".bw_bytes");
  }
  return bw->get<double>();
}

Status NvmeBenchOptions::Validate() const {
  if (block_sizes.empty() || queue_depths.empty()) {
    return Status::InvalidArgument("need at least one block size and one queue depth");
  }
  for (uint64_t b : block_sizes) {
    if (b == 0 || b % 4096 != 0)
      return Status::InvalidArgument("block sizes must be multiples of 4KiB");
    if (total_bytes < 4 * b) return Status::InvalidArgument("--total must hold at least 4 blocks");
  }
  if (rounds == 0 || rounds > 100) return Status::InvalidArgument("--rounds must be in [1, 100]");
  for (uint32_t q : queue_depths) {
    if (q == 0 || q > 1024) return Status::InvalidArgument("queue depths must be in [1, 1024]");
  }
  return Status::Ok();
}

// Here, not in nvme_path_bench.cc, so that a build without io_uring checks
// `nvme-path` options the same way.
Status NvmePathOptions::Validate() const {
  if (block_bytes == 0 || block_bytes % 4096 != 0 || block_bytes > (64u << 20)) {
    return Status::InvalidArgument("--block-size must be a multiple of 4KiB, at most 64MiB");
  }
  if (total_bytes < 4 * block_bytes) {
    return Status::InvalidArgument("--total must hold at least 4 blocks");
  }
  if (rounds == 0 || rounds > 100) return Status::InvalidArgument("--rounds must be in [1, 100]");
  return Status::Ok();
}

Result<NvmeBenchReport> RunNvmeBench(const NvmeBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.Validate());
  NvmeBenchReport rep;
  rep.dir = std::filesystem::absolute(o.dir).string();
  rep.fs = FsName(rep.dir);
  rep.rounds = o.rounds;
  rep.fio_fixedbufs = o.fio_fixedbufs;
  rep.fio_fdatasync = o.fio_fdatasync;
  if (auto v = RunCommand({o.fio, "--version"}, std::chrono::seconds(30));
      v.ok() && v->exit_code == 0) {
    rep.fio_found = true;
    rep.fio_version = v->output.substr(0, v->output.find('\n'));
  }
  const std::string work = rep.dir + "/kvtier-nvme-bench." + std::to_string(getpid());
  std::error_code ec;
  std::filesystem::create_directories(work, ec);
  if (ec) return Status::IOError("cannot create " + work + ": " + ec.message());
  Status failure;
  for (uint64_t bs : o.block_sizes) {
    for (uint32_t qd : o.queue_depths) {
      failure = MeasurePair(o, work, bs, qd, rep);
      if (!failure.ok()) break;
    }
    if (!failure.ok()) break;
  }
  std::filesystem::remove_all(work, ec);
  if (!failure.ok()) return failure;
  return rep;
}

std::string FormatNvmeBench(const NvmeBenchReport& rep) {
  std::ostringstream out;
  out << "kvtier-bench nvme: " << rep.dir << " (" << rep.fs << "), tier "
      << (rep.direct_io ? "O_DIRECT" : "buffered (O_DIRECT refused)") << ", sequential\n";
  out << "best of " << rep.rounds << " rounds (fio write+read, then tier write+read, "
      << "alternating); MB/s = 10^6 payload bytes/s; tier buffers: one arena of qd blocks, "
      << (rep.all_registered ? "registered" : "NOT (fully) registered")
      << " as io_uring fixed buffers\n";
  if (rep.fio_found) {
    out << "peer: " << rep.fio_version << " --ioengine=io_uring --direct=1 --rw=write|read"
        << (rep.fio_fixedbufs ? " --fixedbufs=1 --registerfiles=1"
                              : " (fixedbufs=0, fio's default)")
        << (rep.fio_fdatasync > 0
                ? " --fdatasync=" + std::to_string(rep.fio_fdatasync) + " on writes"
                : std::string(" (no fdatasync; the tier's commits sync)"))
        << ", same bs and iodepth, same file system\n";
  } else {
    out << "fio is not installed: the fio column is empty. Install it with "
           "`sudo apt-get install fio` (scripts/install-deps.sh lists it).\n";
  }
  char line[160];
  std::snprintf(line, sizeof(line), "%-7s %4s  %-5s  %10s  %10s  %8s\n", "block", "qd", "op",
                "fio MB/s", "tier MB/s", "tier/fio");
  out << line;
  for (const NvmeBenchRow& r : rep.rows) {
    if (rep.fio_found) {
      std::snprintf(line, sizeof(line), "%-7s %4u  %-5s  %10.0f  %10.0f  %8.2f\n",
                    SizeName(r.block_bytes).c_str(), r.queue_depth, r.op.c_str(), r.fio_mb_s,
                    r.tier_mb_s, r.ratio);
    } else {
      std::snprintf(line, sizeof(line), "%-7s %4u  %-5s  %10s  %10.0f  %8s\n",
                    SizeName(r.block_bytes).c_str(), r.queue_depth, r.op.c_str(), "-", r.tier_mb_s,
                    "-");
    }
    out << line;
  }
  return out.str();
}

std::string NvmeBenchJson(const NvmeBenchReport& rep) {
  nlohmann::json j;
  j["dir"] = rep.dir;
  j["fs"] = rep.fs;
  j["direct_io"] = rep.direct_io;
  j["rounds"] = rep.rounds;
  j["all_registered"] = rep.all_registered;
  j["fio_fixedbufs"] = rep.fio_fixedbufs;
  j["fio_fdatasync"] = rep.fio_fdatasync;
  j["fio"] = rep.fio_found ? nlohmann::json(rep.fio_version) : nlohmann::json(nullptr);
  j["rows"] = nlohmann::json::array();
  for (const NvmeBenchRow& r : rep.rows) {
    j["rows"].push_back({{"block_bytes", r.block_bytes},
                         {"queue_depth", r.queue_depth},
                         {"op", r.op},
                         {"fio_mb_s", r.fio_mb_s},
                         {"tier_mb_s", r.tier_mb_s},
                         {"ratio", r.ratio}});
  }
  return j.dump();
}

}  // namespace kvtier::bench
