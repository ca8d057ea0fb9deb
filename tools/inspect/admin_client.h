// Client side of the runtime's admin endpoint (core/admin_server.h): one
// HTTP/1.0 GET over the Unix socket per call.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::inspect {

// The body of GET `path`. Unavailable when nothing answers on `socket_path`
// or the runtime closes the connection without a reply (it is going away);
// DeadlineExceeded after `timeout`; NotFound / InvalidArgument for a 404 /
// other non-200 answer (the message holds the server's text).
Result<std::string> FetchAdmin(const std::string& socket_path, std::string_view path,
                               std::chrono::milliseconds timeout);

}  // namespace kvtier::inspect
