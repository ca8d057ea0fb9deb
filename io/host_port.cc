#include "io/host_port.h"

#include <arpa/inet.h>

#include <charconv>
#include <string>

namespace kvtier::internal {
namespace {

// A host name or address literal, so that a URL, a list or a bare IPv6
// address is refused where the entry is read, naming the fix, instead of
// failing every connect as a name nobody can resolve.
Status CheckHost(std::string_view text, std::string_view host, bool bracketed) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("endpoint '" + std::string(text) + "': " + why);
  };
  if (text.find("://") != std::string_view::npos) {
    return bad("a URL; expected host:port without a scheme");
  }
  for (const char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_' || c == ':' || c == '%';
    if (!ok) {
      return bad(c == ',' ? "holds a ','; list each server as its own entry"
                          : "the host holds '" + std::string(1, c) +
                                "'; expected a host name or an IP address");
    }
  }
  if (bracketed || host.find(':') != std::string_view::npos) {
    in6_addr v6{};
    const std::string address(host.substr(0, host.find('%')));  // without a zone (%eth0)
    if (inet_pton(AF_INET6, address.c_str(), &v6) != 1) {
      return bad(bracketed ? "'" + std::string(host) + "' is not an IPv6 address"
                           : "not host:port; an IPv6 address goes in brackets: [::1]:6379");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<HostPort> SplitHostPort(std::string_view text, bool allow_port0) {
  // "[v6]:port" brackets an IPv6 literal; otherwise the last colon splits,
  // so "::1:7400" still reads as ::1 port 7400.
  std::string_view host, port_text;
  const bool bracketed = !text.empty() && text.front() == '[';
  if (bracketed) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close == 1 || close + 1 >= text.size() ||
        text[close + 1] != ':') {
      return Status::InvalidArgument("endpoint '" + std::string(text) + "' is not [address]:port");
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Status::InvalidArgument("endpoint '" + std::string(text) + "' is not host:port");
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (Status st = CheckHost(text, host, bracketed); !st.ok()) return st;
  unsigned port = 0;
  auto [ptr, err] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || err != std::errc() || ptr != port_text.data() + port_text.size() ||
      port > 65535 || (port == 0 && !allow_port0)) {
    return Status::InvalidArgument("endpoint '" + std::string(text) + "' has a bad port");
  }
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

}  // namespace kvtier::internal
