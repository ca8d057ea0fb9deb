// A small in-process kvtier-memd for the RDMA data-path tests: 16 slots of
// 64 KiB on 127.0.0.1 (any free port), plain pages, errors-only log; and a
// remote client's options for one TCP connection to such a server.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/env.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/remote_client.h"

namespace kvtier::testing {

inline internal::memd::MemdServerOptions SmallMemdOptions(const std::string& secret,
                                                          const std::string& transport) {
  internal::memd::MemdServerOptions o;
  o.listen = "127.0.0.1:0";
  o.secret = secret;
  o.transport = transport;
  o.pool.pool_bytes = 16 * (64 << 10);
  o.pool.slot_bytes = 64 << 10;
  o.pool.hugepages = false;
  o.pool.prefault = false;
  o.log = StderrLogSink(LogLevel::kError);
  return o;
}

// One connection to the server on 127.0.0.1:`port`, a 1 s connect timeout.
inline internal::memd::RemoteClientOptions OneConnectionTo(uint16_t port, const std::string& secret,
                                                           uint32_t op_timeout_ms) {
  internal::memd::RemoteClientOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(port)};
  o.secret = secret;
  o.connections = 1;
  o.connect_timeout_ms = 1000;
  o.op_timeout_ms = op_timeout_ms;
  return o;
}

}  // namespace kvtier::testing
