#include "tools/inspect/redis_url.h"

#include <charconv>
#include <string_view>

#include "io/host_port.h"

namespace kvtier::inspect {

std::string RedactRedisUrl(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t from = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t at = url.rfind('@');
  if (at == std::string::npos || at < from) return url;
  const size_t colon = url.find(':', from);
  const std::string user = colon < at ? url.substr(from, colon - from) + ":" : "";
  return url.substr(0, from) + user + "***" + url.substr(at);
}

Result<RedisUrl> ParseRedisUrl(const std::string& url) {
  const auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("redis URL '" + RedactRedisUrl(url) + "': " + std::string(why) +
                                   "; expected redis://[[user]:password@]host[:port][/db]");
  };
  constexpr std::string_view kScheme = "redis://";
  if (url.rfind(kScheme, 0) != 0) return bad("no redis:// scheme");
  std::string_view rest = std::string_view(url).substr(kScheme.size());
  RedisUrl u;
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view info = rest.substr(0, at);
    size_t colon = info.find(':');
    if (colon == std::string_view::npos) return bad("user without password");
    u.user = info.substr(0, colon);
    u.password = info.substr(colon + 1);
    rest = rest.substr(at + 1);
  }
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    auto [end, ec] = std::from_chars(db.data(), db.data() + db.size(), u.db);
    if (db.empty() || ec != std::errc() || end != db.data() + db.size()) {
      return bad("bad database number");
    }
    rest = rest.substr(0, slash);
  }
  if (rest.empty()) return bad("no host");
  // Without a port: a bare name, or a bracketed literal, whose brackets go
  // (hiredis resolves the address alone).
  const bool bracketed = rest.front() == '[';
  if (bracketed ? rest.back() == ']' : rest.find(':') == std::string_view::npos) {
    u.host = bracketed ? rest.substr(1, rest.size() - 2) : rest;
    if (u.host.empty()) return bad("no host");
    return u;
  }
  Result<internal::HostPort> split = internal::SplitHostPort(rest, /*allow_port0=*/false);
  if (!split.ok()) return bad(split.status().message());
  u.host = std::move(split->host);
  u.port = split->port;
  return u;
}

std::string RedisUrlEndpoint(const RedisUrl& url) {
  const bool v6 = url.host.find(':') != std::string::npos;
  return (v6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port);
}

}  // namespace kvtier::inspect
