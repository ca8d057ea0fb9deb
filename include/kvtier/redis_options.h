// Options that only a tier of type redis reads, kept in TierOptions::redis.
// Plain struct: every field has a default and a comment; TierOptions::Validate
// checks them when the tier's type is redis.
//
// The servers themselves come from TierOptions::servers ("host:port"
// entries): one entry is a single server; several entries are independent
// servers over which keys are spread by rendezvous hashing, or, with
// `cluster: true`, seeds of one Redis Cluster whose slot map is read at open.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

struct RedisTierOptions {
  std::string user;                    // ACL user for AUTH; empty = the default user
  std::string password;                // AUTH password; empty = no AUTH
  uint32_t db = 0;                     // SELECT index; must be 0 with cluster (Redis rule)
  std::string key_prefix = "kvtier";   // keys are "<prefix>:<namespace hex>:<key hex>"
  uint64_t ttl_s = 0;                  // expiry of every stored block, counted from its last
                                       // write or read (reads use GETEX: Redis 6.2+); 0 = never.
                                       // Hits from the hub do not touch it: a block the hub
                                       // kept serving is written again before it leaves the
                                       // hub, once half of ttl_s has passed.
  uint32_t connect_timeout_ms = 1000;  // bound on connect, AUTH and SELECT
  uint32_t op_timeout_ms = 2000;       // bound on each reply (longer by a value's bytes at
                                       // 4 MB/s) and on sending each request batch
  uint32_t connections = 2;            // data connections (each with its own I/O thread) per
                                       // server; one more carries EXISTS and DEL
  bool cluster = false;                // servers are seeds of a Redis Cluster
  // TLS (Redis 6+ built with TLS; managed services): the server's
  // certificate is always verified, against tls_ca_file and the name of
  // each server entry (or tls_server_name).
  bool tls = false;             // talk TLS 1.2+ to every server
  std::string tls_ca_file;      // PEM CAs to trust; empty = the system's trust store
  std::string tls_cert_file;    // PEM client certificate, for servers that require one
  std::string tls_key_file;     // its PEM private key (no passphrase)
  std::string tls_server_name;  // name the certificates must carry (sent as SNI);
                                // empty = each server's host (name or IP address)

  // Checks the fields above; called by TierOptions::Validate for type redis.
  Status Validate() const {
    if (key_prefix.empty()) {
      return Status::InvalidArgument("redis key_prefix is empty; expected a prefix such as kvtier");
    }
    for (char c : key_prefix) {
      if (c == ' ' || c == '\r' || c == '\n' || c == '\t') {
        return Status::InvalidArgument(
            "redis key_prefix has white space; expected a prefix without spaces");
      }
    }
    // A longer expiry would make every SET fail; the config file's bound too.
    constexpr uint64_t kMaxTtlS = 10ull * 365 * 86400;
    if (ttl_s > kMaxTtlS) {
      return Status::InvalidArgument("redis ttl_s is " + std::to_string(ttl_s) +
                                     "; expected at most " + std::to_string(kMaxTtlS) +
                                     " (10 years), or 0 for no expiry");
    }
    if (connect_timeout_ms == 0 || op_timeout_ms == 0) {
      return Status::InvalidArgument("redis timeouts must be at least 1 ms");
    }
    if (connections == 0 || connections > 64) {
      return Status::InvalidArgument("redis connections is " + std::to_string(connections) +
                                     "; expected 1 to 64");
    }
    if (cluster && db != 0) {
      return Status::InvalidArgument("redis db is " + std::to_string(db) +
                                     " with cluster; expected db 0 (a cluster has one database)");
    }
    KVTIER_RETURN_IF_ERROR(ValidateTls());
    if (!password.empty() || user.empty()) return Status::Ok();
    return Status::InvalidArgument("redis user '" + user + "' has no password; expected both");
  }

  // The tls_* fields: only with tls, and a certificate with its key.
  Status ValidateTls() const {
    if (!tls) {
      for (const std::string* f : {&tls_ca_file, &tls_cert_file, &tls_key_file, &tls_server_name}) {
        if (!f->empty()) {
          return Status::InvalidArgument(
              "redis tls_* options are set but tls is off; expected "
              "tls: true, or none of them");
        }
      }
      return Status::Ok();
    }
    if (tls_cert_file.empty() != tls_key_file.empty()) {
      return Status::InvalidArgument(
          "redis tls_cert_file and tls_key_file go together; expected both or neither");
    }
    return Status::Ok();
  }
};

}  // namespace kvtier
