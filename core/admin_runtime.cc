// The runtime's side of the admin endpoint: which paths it serves.
#include "core/runtime_impl.h"
#include "kvtier/metrics.h"

namespace kvtier::internal {

Status RuntimeImpl::StartAdmin() {
  if (options_.admin_socket.empty()) return Status::Ok();
  // The handler only reads Stats(), which holds mu_ for a short copy: a
  // client can never make the engine wait on the admin thread.
  auto handler = [this](std::string_view path) -> AdminResponse {
    if (path == "/stats") return {200, "application/json", RenderStatsJson(Stats()) + "\n"};
    if (path == "/metrics") {
      return {200, "text/plain; version=0.0.4; charset=utf-8", RenderPrometheusText(Stats())};
    }
    if (path == "/" || path == "/health") {
      return {200, "text/plain; charset=utf-8", "ok\npaths: /stats /metrics /health\n"};
    }
    return {404, "text/plain; charset=utf-8",
            "unknown path " + std::string(path) + "; expected /stats, /metrics or /health\n"};
  };
  auto server = AdminServer::Start(options_.admin_socket, std::move(handler), log_);
  if (!server.ok()) return server.status();
  admin_ = std::move(server).value();
  return Status::Ok();
}

}  // namespace kvtier::internal
