// A small in-process kvtier-memd for the RDMA data-path tests: 16 slots of
// 64 KiB on 127.0.0.1 (any free port), plain pages, errors-only log.
#pragma once

#include <string>

#include "kvtier/env.h"
#include "tiers/remote/memd_server.h"

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

}  // namespace kvtier::testing
