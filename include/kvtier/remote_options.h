// Options that only a tier of type remote reads, kept in TierOptions::remote.
// Plain struct: every field has a default and a comment; TierOptions::Validate
// checks them when the tier's type is remote.
//
// The kvtier-memd servers come from TierOptions::servers ("host:port"); keys
// are spread over them by rendezvous hashing. Every connection proves
// knowledge of a shared secret (HMAC challenge-response), read from
// `secret_file` (or given directly in `secret` by a program).
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

struct RemoteTierOptions {
  std::string transport = "tcp";             // tcp | rdma (rdma needs an RDMA device)
  std::string secret_file;                   // file holding the shared secret
  std::string secret;                        // the secret itself; wins over secret_file
  uint32_t connections = 2;                  // TCP connections per server, 1 to 16
  uint32_t connect_timeout_ms = 1000;        // bound on connect plus handshake
  uint32_t op_timeout_ms = 2000;             // reply deadline (later on a busy connection)
  uint32_t reconnect_backoff_ms = 50;        // first wait after a failure; doubles
  uint32_t reconnect_backoff_max_ms = 2000;  // cap of that wait

  // Checks the fields above; called by TierOptions::Validate for type remote.
  Status Validate() const {
    if (transport != "tcp" && transport != "rdma") {
      return Status::InvalidArgument("remote transport '" + transport +
                                     "' is unknown; expected tcp or rdma");
    }
    if (secret.empty() && secret_file.empty()) {
      return Status::InvalidArgument(
          "remote tier needs secret_file (the kvtier-memd shared secret)");
    }
    if (connections == 0 || connections > 16) {
      return Status::InvalidArgument("remote connections is " + std::to_string(connections) +
                                     "; expected 1 to 16");
    }
    if (connect_timeout_ms == 0 || op_timeout_ms == 0 || reconnect_backoff_ms == 0 ||
        reconnect_backoff_max_ms < reconnect_backoff_ms) {
      return Status::InvalidArgument(
          "remote timeouts must be at least 1 ms and reconnect_backoff_max_ms >= "
          "reconnect_backoff_ms");
    }
    return Status::Ok();
  }
};

}  // namespace kvtier
