// RemoteClient (remote_client.h): the address of each server entry, looked
// up at Create and, for a host name, again on every connect, so that a
// server that comes back at a new address behind the same name is found.
// A connect never waits for a lookup: it goes to the last address known,
// and the lookup, on a thread of its own, is for the connects after it. A
// lookup that outlives the client posts its answer to a closed gate.
#include <algorithm>
#include <system_error>
#include <thread>

#include "tiers/remote/remote_client_impl.h"

namespace kvtier::internal::memd {

Result<std::vector<tcp::endpoint>> LookUpEntry(const RemoteClientOptions::Resolve& resolve,
                                               const std::string& entry) {
  KVTIER_ASSIGN_OR_RETURN(HostPort hp, SplitHostPort(entry, false));
  if (resolve) {
    auto answer = resolve(entry);
    if (!answer.ok()) return answer.status();
    KVTIER_ASSIGN_OR_RETURN(tcp::endpoint ep, ParseTcpEndpoint(*answer, false));
    return std::vector<tcp::endpoint>{ep};
  }
  return ResolveHostPort(hp);
}

Result<tcp::endpoint> FirstAddress(const RemoteClientOptions& options, const std::string& entry) {
  if (!options.resolve) return ParseTcpEndpoint(entry, false);
  auto found = LookUpEntry(options.resolve, entry);
  if (found.ok()) return found->front();
  if (found.status().code() == StatusCode::kInvalidArgument) return found.status();
  return Status::InvalidArgument("endpoint '" + entry +
                                 "': cannot resolve: " + found.status().ToString());
}

bool IsNamedHost(const std::string& entry) {
  auto hp = SplitHostPort(entry, false);
  if (!hp.ok()) return false;
  boost::system::error_code not_literal;
  asio::ip::make_address(hp->host, not_literal);
  return static_cast<bool>(not_literal);
}

void ClientImpl::LookUp(ServerState& s) {
  if (!s.named || s.lookup_running) return;
  s.lookup_running = true;
  try {
    std::thread([this, &s, resolve = o_.resolve, entry = s.endpoint, post = gate_.post()] {
      try {
        auto found = LookUpEntry(resolve, entry);
        post([this, &s, found = std::move(found)]() mutable { LookedUp(s, std::move(found)); });
      } catch (...) {
        // Out of memory (or a resolver that threw): the server keeps the
        // address it had, and a later reconnect looks it up again.
        try {
          post([&s] { s.lookup_running = false; });
        } catch (...) {  // no memory to say so: this server is not looked up again
        }
      }
    }).detach();
  } catch (const std::system_error& e) {
    s.lookup_running = false;
    log_->Log(LogLevel::kWarning,
              "remote server " + s.endpoint + ": no thread to look the host up: " + e.what());
  }
}

void ClientImpl::LookedUp(ServerState& s, Result<std::vector<tcp::endpoint>> found) {
  s.lookup_running = false;
  const std::string last = s.ep.address().to_string() + ":" + std::to_string(s.ep.port());
  if (!found.ok()) {
    log_->Log(LogLevel::kWarning, "remote server " + s.endpoint + ": cannot look the host up (" +
                                      found.status().ToString() + "); connecting to " + last);
    return;
  }
  // Several addresses (one name, several records): the one in use stays,
  // so the server's connections do not spread over different servers.
  if (std::find(found->begin(), found->end(), s.ep) != found->end()) return;
  s.ep = found->front();
  log_->Log(LogLevel::kInfo, "remote server " + s.endpoint + ": now at " +
                                 s.ep.address().to_string() + ":" + std::to_string(s.ep.port()) +
                                 " (was " + last + ")");
}

}  // namespace kvtier::internal::memd
