// The RDMA side of one kvtier-memd connection: RDMA_HELLO creates and
// connects this connection's queue pair and answers RDMA_READY; from then
// on PUT_BEGIN is answered with PUT_GRANT (slots the client RDMA WRITEs
// into) and PUT_COMMIT checks and publishes them, GET_LEASE pins stored
// blocks for the client's RDMA READs until LEASE_RELEASE or expiry. Frames
// in, reply frames out: no sockets and no clock (times are passed in), and
// the device is an RdmaDevice (rdma_transport.h), so every transition is
// unit-tested with a stand-in device.
//
// Not thread-safe: the server's I/O thread owns it. Destruction first
// destroys the queue pair (the client can no longer touch the pool), then
// cancels open grants and ends open leases.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tiers/remote/memd_pool.h"
#include "tiers/remote/memd_reservations.h"
#include "tiers/remote/rdma_grants.h"
#include "tiers/remote/rdma_transport.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::internal::memd {

class RdmaSession {
 public:
  struct Options {
    RdmaRegion pool_region;    // the pool's mapping as registered
    uint32_t lease_ms = 2000;  // 1..kMaxLeaseMs
  };
  struct Reply {
    Opcode op = Opcode::kError;
    std::vector<std::byte> body;
  };

  // Grants are reserved in `table`, the connection's reservation table that
  // its TCP puts share (one limit for both). REQUIRES: `pool`, `device` and
  // `table` outlive this.
  RdmaSession(MemdPool& pool, RdmaDevice& device, MemdReservations& table, const Options& options);
  ~RdmaSession();
  RdmaSession(const RdmaSession&) = delete;
  RdmaSession& operator=(const RdmaSession&) = delete;

  // True for the opcodes this session handles on a connection in its state:
  // RDMA_HELLO, GET_LEASE, LEASE_RELEASE always; PUT_BEGIN and PUT_COMMIT
  // once the queue pair is connected (before that they are TCP puts).
  bool Handles(Opcode op) const;
  // Handles one frame. The reply to send, or nullopt (LEASE_RELEASE has
  // none). An error is a protocol error: the caller sends it as an ERROR
  // frame and closes the connection (InvalidArgument for a malformed or
  // out-of-order frame, or a GET_LEASE past kMaxOpenLeases; the device's
  // code when the queue pair fails).
  Result<std::optional<Reply>> Handle(Opcode op, uint32_t request_id,
                                      std::span<const std::byte> body, uint64_t now_ms);
  // Ends every lease that ends at or before now_ms; returns how many.
  size_t Expire(uint64_t now_ms);

  bool connected() const { return qp_ != nullptr; }
  size_t open_leases() const { return grants_ ? grants_->open_leases() : 0; }
  // Reserved items of the connection, TCP puts included.
  size_t reserved_items() const { return table_.reserved_items(); }

 private:
  Result<Reply> Hello(std::span<const std::byte> body);

  MemdPool& pool_;
  RdmaDevice& device_;
  MemdReservations& table_;
  const Options options_;
  // Declared before qp_ so the queue pair is destroyed first.
  std::unique_ptr<RdmaGrants> grants_;
  std::unique_ptr<RdmaQp> qp_;
};

}  // namespace kvtier::internal::memd
