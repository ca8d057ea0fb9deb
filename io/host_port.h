// "host:port" entries of the network tiers' server lists, split without
// looking the host up.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::internal {

struct HostPort {
  std::string host;  // an IPv6 literal without its brackets
  uint16_t port = 0;
};

// Splits "host:port" or "[IPv6]:port" (port 0 allowed when `allow_port0`).
// Without brackets the last colon splits, so "::1:7400" is ::1 port 7400.
// InvalidArgument naming the entry.
Result<HostPort> SplitHostPort(std::string_view text, bool allow_port0);

}  // namespace kvtier::internal
