#include "io/host_port.h"

#include <charconv>

namespace kvtier::internal {

Result<HostPort> SplitHostPort(std::string_view text, bool allow_port0) {
  // "[v6]:port" brackets an IPv6 literal; otherwise the last colon splits,
  // so "::1:7400" still reads as ::1 port 7400.
  std::string_view host, port_text;
  if (!text.empty() && text.front() == '[') {
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
  unsigned port = 0;
  auto [ptr, err] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || err != std::errc() || ptr != port_text.data() + port_text.size() ||
      port > 65535 || (port == 0 && !allow_port0)) {
    return Status::InvalidArgument("endpoint '" + std::string(text) + "' has a bad port");
  }
  return HostPort{std::string(host), static_cast<uint16_t>(port)};
}

}  // namespace kvtier::internal
