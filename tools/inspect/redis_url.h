// The redis:// URL `kvtier-inspect redis` connects to, parsed apart from
// hiredis so that tests reach it.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::inspect {

struct RedisUrl {
  std::string host;  // a name or address; an IPv6 literal without its brackets
  std::string user, password;
  uint16_t port = 6379;
  uint32_t db = 0;
};

// redis://[[user]:password@]host[:port][/db], the host an IPv6 literal in
// brackets ("[::1]:6390") when it has colons. host:port is split as the
// Redis tier splits its servers (SplitHostPort). InvalidArgument naming the
// URL without its password.
Result<RedisUrl> ParseRedisUrl(const std::string& url);

// `url` fit to print: the user-info before the last '@' (where
// ParseRedisUrl looks for it) keeps its user name and loses its password.
// Without a ':' the whole user-info may be the password, so all of it goes.
std::string RedactRedisUrl(const std::string& url);

// "host:port", or "[IPv6]:port", for messages.
std::string RedisUrlEndpoint(const RedisUrl& url);

}  // namespace kvtier::inspect
