#include "tools/bench/nvme_path_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>

#include "core/admin_server.h"  // UniqueFd
#include "core/payload_hash.h"
#include "io/io_engine.h"
#include "io/ring.h"
#include "kvtier/completion.h"
#include "kvtier/options.h"
#include "kvtier/tier.h"
#include "tools/bench/aligned_buffer.h"

namespace kvtier::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr NamespaceId kPathNs{0xBE4D};
const char* const kSteps[] = {"ring", "ring+hash", "engine", "tier"};

// Writes `blocks` blocks of a byte pattern to `path` and opens it for
// reading, O_DIRECT where the file system allows.
Result<int> MakeRingFile(const std::string& path, std::span<std::byte> buf, uint64_t blocks,
                         bool* direct) {
  {
    internal::UniqueFd w(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
    if (w.get() < 0) return FromErrno(errno, "create " + path);
    for (uint64_t i = 0; i < blocks; ++i) {
      for (size_t k = 0; k < buf.size(); k += 4096) buf[k] = static_cast<std::byte>(i + k);
      const auto off = static_cast<off_t>(i * buf.size());
      if (pwrite(w.get(), buf.data(), buf.size(), off) != static_cast<ssize_t>(buf.size())) {
        return FromErrno(errno, "write " + path);
      }
    }
    if (fsync(w.get()) != 0) return FromErrno(errno, "fsync " + path);
  }
  int fd = open(path.c_str(), O_RDONLY | O_DIRECT);
  *direct = fd >= 0;
  if (fd < 0) fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return FromErrno(errno, "open " + path);
  return fd;
}

// `ring` and `ring+hash`: submit and wait in this thread.
Status RingReads(int fd, std::span<std::byte> buf, uint64_t blocks, bool hash, uint64_t* sink) {
  KVTIER_ASSIGN_OR_RETURN(internal::Ring ring, internal::Ring::Create(4));
  for (uint64_t i = 0; i < blocks; ++i) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring.get());
    io_uring_prep_read(sqe, fd, buf.data(), static_cast<unsigned>(buf.size()), i * buf.size());
    const int rc = io_uring_submit_and_wait(ring.get(), 1);
    if (rc < 0) return FromErrno(-rc, "io_uring_submit_and_wait");
    io_uring_cqe* cqe = nullptr;
    const int got = io_uring_peek_cqe(ring.get(), &cqe);
    if (got < 0) return FromErrno(-got, "io_uring_peek_cqe");
    const int res = cqe->res;
    io_uring_cqe_seen(ring.get(), cqe);
    if (res != static_cast<int>(buf.size())) {
      return Status::IOError("ring read of block " + std::to_string(i) + " returned " +
                             std::to_string(res));
    }
    if (hash) *sink += internal::PayloadXxh3(buf.data(), buf.size());
  }
  return Status::Ok();
}

// `engine`: one request at a time through the tier's I/O engine.
Status EngineReads(int fd, std::span<std::byte> buf, uint64_t blocks) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<internal::IoEngine> engine, internal::NewUringEngine({}));
  Status failure;
  for (uint64_t i = 0; i < blocks && failure.ok(); ++i) {
    auto src = std::make_shared<CompletionSource>(1);
    Completion c = src->completion();
    internal::IoRequest r;
    r.op = internal::IoOp::kRead;
    r.fd = fd;
    r.offset = i * buf.size();
    r.iov = {iovec{buf.data(), buf.size()}};
    r.done = [src](const internal::IoCompletion& io) {
      src->Set(0, io.status, io.bytes);
      src->Finish();
    };
    std::vector<internal::IoRequest> one;
    one.push_back(std::move(r));
    failure = engine->Submit(std::move(one));
    if (failure.ok()) failure = c.Wait();
  }
  engine->Shutdown();
  return failure;
}

double MicrosSince(SteadyClock::time_point start, uint64_t reads) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - start).count() /
         static_cast<double>(reads);
}

}  // namespace

Result<NvmePathReport> RunNvmePathBench(const NvmePathOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.Validate());
  NvmePathReport rep;
  rep.dir = std::filesystem::absolute(o.dir).string();
  rep.block_bytes = o.block_bytes;
  rep.reads = o.total_bytes / o.block_bytes;
  rep.rounds = o.rounds;
  const std::string work = rep.dir + "/kvtier-nvme-path." + std::to_string(getpid());
  std::error_code ec;
  std::filesystem::create_directories(work, ec);
  if (ec) return Status::IOError("cannot create " + work + ": " + ec.message());
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      std::filesystem::remove_all(dir, e);
    }
  } cleanup{work};

  KVTIER_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(o.block_bytes));
  KVTIER_ASSIGN_OR_RETURN(int raw_fd,
                          MakeRingFile(work + "/ring.dat", buf.span(), rep.reads, &rep.direct_io));
  internal::UniqueFd fd(raw_fd);

  TierOptions t;
  t.name = "nvme-path";
  t.type = "nvme";
  t.region_bytes = std::max<uint64_t>(64 << 20, 4 * (o.block_bytes + 4096));
  t.capacity_bytes = rep.reads * o.block_bytes + 2 * t.region_bytes;
  t.path = work + "/tier.dat";
  TierContext ctx;
  ctx.block_bytes = o.block_bytes;
  auto tier = CreateTier(t, ctx);
  if (!tier.ok()) return tier.status().WithContext("tier");
  (void)(*tier)->RegisterHostMemory(buf.span());
  for (uint64_t i = 0; i < rep.reads; ++i) {
    WriteOp w{BlockKey{i + 1, 0xB1}, buf.span(), std::nullopt};
    Status st = (*tier)->Write(kPathNs, std::span(&w, 1)).Wait();
    if (!st.ok()) return st.WithContext("tier write");
  }

  std::vector<double> best(std::size(kSteps), 0);
  uint64_t sink = 0;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    for (size_t step = 0; step < std::size(kSteps); ++step) {
      const auto start = SteadyClock::now();
      Status st;
      if (step <= 1) {
        st = RingReads(fd.get(), buf.span(), rep.reads, step == 1, &sink);
      } else if (step == 2) {
        st = EngineReads(fd.get(), buf.span(), rep.reads);
      } else {
        for (uint64_t i = 0; i < rep.reads && st.ok(); ++i) {
          ReadOp r{BlockKey{i + 1, 0xB1}, buf.span()};
          st = (*tier)->Read(kPathNs, std::span(&r, 1)).Wait();
        }
      }
      if (!st.ok()) return st.WithContext(kSteps[step]);
      const double us = MicrosSince(start, rep.reads);
      if (round == 0 || us < best[step]) best[step] = us;
    }
  }
  (*tier)->Shutdown();
  for (size_t step = 0; step < std::size(kSteps); ++step) {
    NvmePathRow row;
    row.step = kSteps[step];
    row.us_per_read = best[step];
    row.mb_s = static_cast<double>(o.block_bytes) / best[step];
    row.vs_ring = best[step] / best[0];
    rep.rows.push_back(row);
  }
  return rep;
}

std::string FormatNvmePath(const NvmePathReport& rep) {
  std::ostringstream out;
  out << "kvtier-bench nvme-path: " << rep.dir << ", " << rep.block_bytes / 1024
      << " KiB blocks, queue depth 1, " << rep.reads << " reads per way, best of " << rep.rounds
      << " interleaved rounds, ring file " << (rep.direct_io ? "O_DIRECT" : "buffered")
      << "\nring: one thread, own io_uring (as fio); ring+hash: and XXH3 of the payload; "
         "engine: the tier's I/O engine (thread hand-off); tier: NvmeTier::Read\n";
  char line[128];
  std::snprintf(line, sizeof(line), "%-10s  %10s  %8s  %8s\n", "way", "us/read", "MB/s", "vs ring");
  out << line;
  for (const NvmePathRow& r : rep.rows) {
    std::snprintf(line, sizeof(line), "%-10s  %10.1f  %8.0f  %8.2f\n", r.step.c_str(),
                  r.us_per_read, r.mb_s, r.vs_ring);
    out << line;
  }
  return out.str();
}

}  // namespace kvtier::bench
