// kvtier-memd's YAML file: the same settings as its flags, flags winning.
//
//   listen: "0.0.0.0:7400"
//   pool_size: 8GiB
//   slot_size: 4MiB        # largest block + 64-byte header, rounded up
//   secret_file: /etc/kvtier/memd.secret
//   transport: tcp         # or rdma
//   hugepages: true
//   watermarks: {high: 0.95, low: 0.85}
//   max_connections: 256
//   handshake_timeout_ms: 5000   # unauthenticated connections are closed after this
//   put_timeout_ms: 10000        # a put with no progress this long is cancelled
//   reply_timeout_ms: 10000      # a client taking no reply bytes this long is closed
#pragma once

#include <string>

#include "kvtier/status.h"
#include "tiers/remote/memd_server.h"

namespace kvtier::memd_tool {

// Reads `path` into `options` (secret_file into *secret_file). Unknown keys
// and bad values are InvalidArgument with file, line and column; a file that
// cannot be read (missing, a directory, over 1 MiB) is InvalidArgument
// "<path>: cannot read config file: <why>". An empty file sets nothing.
Status LoadMemdConfig(const std::string& path, internal::memd::MemdServerOptions* options,
                      std::string* secret_file);

}  // namespace kvtier::memd_tool
