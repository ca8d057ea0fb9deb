// The RDMA data path as the memd server and the remote client see it: a
// device that registers memory and creates reliable-connection queue pairs,
// and queue pairs that post one-sided WRITE and READ operations. No verbs
// types appear here, so the server session and the client link compile in
// every build and are tested against a stand-in device; the libibverbs
// implementation (rdma_device.cc) is built with KVTIER_HAVE_RDMA, and builds
// without it get a stub whose OpenRdmaDevice names `transport: tcp`.
//
// Threads: Register and CreateQp from any thread; Post* from one thread per
// queue pair; completions run on the device's poller thread (one per CQ).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/status.h"
#include "tiers/remote/rdma_protocol.h"

namespace kvtier::internal::memd {

// A registered range. Deregistered by the destructor; REQUIRES: no work
// that uses it is in flight then.
class RdmaMemory {
 public:
  virtual ~RdmaMemory() = default;
  virtual std::span<std::byte> bytes() const = 0;
  virtual uint32_t lkey() const = 0;
  // The range as a peer addresses it (addr, bytes, rkey).
  virtual RdmaRegion region() const = 0;
};

// One piece of local memory of a work request, inside a registered range.
struct LocalPiece {
  std::byte* addr = nullptr;
  uint32_t bytes = 0;
  uint32_t lkey = 0;
};

// Called once per posted operation, on the poller thread.
using RdmaDone = std::function<void(const Status& status)>;

class RdmaQp {
 public:
  virtual ~RdmaQp() = default;
  // What the peer needs to connect to this queue pair.
  virtual QpEndpoint local() const = 0;
  // Moves the queue pair to RTR then RTS against the peer's endpoint.
  virtual Status Connect(const QpEndpoint& remote) = 0;
  // One signalled RDMA WRITE of `pieces` (gathered in order) to [addr, ...)
  // under `rkey`, or one RDMA READ from there scattered into `pieces`. The
  // completion entry is reserved before posting: Busy when the completion
  // queue is full, nothing posted then. `done` runs exactly once when the
  // post succeeded (Cancelled when the device closes first).
  virtual Status PostWrite(std::span<const LocalPiece> pieces, uint64_t addr, uint32_t rkey,
                           RdmaDone done) = 0;
  virtual Status PostRead(std::span<const LocalPiece> pieces, uint64_t addr, uint32_t rkey,
                          RdmaDone done) = 0;
};

class RdmaDevice {
 public:
  virtual ~RdmaDevice() = default;
  // Registers `bytes` for local access and remote READ and WRITE.
  virtual Result<std::unique_ptr<RdmaMemory>> Register(std::span<std::byte> bytes) = 0;
  // A reliable-connection queue pair, not yet connected.
  virtual Result<std::unique_ptr<RdmaQp>> CreateQp() = 0;
};

// Opens the first RDMA device (protection domain, completion queue and its
// poller). NotSupported naming `transport: tcp` where there is none or the
// build lacks libibverbs. The memd server and the remote tier each call it
// once, at start, and fail with this reason; there is no separate probe.
Result<std::unique_ptr<RdmaDevice>> OpenRdmaDevice();

// How servers and clients obtain their device; tests inject a stand-in.
using RdmaDeviceFactory = std::function<Result<std::unique_ptr<RdmaDevice>>()>;

}  // namespace kvtier::internal::memd
