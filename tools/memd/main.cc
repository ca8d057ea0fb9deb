// kvtier-memd: serves a memory pool to kvtier remote tiers over the memd
// protocol. Logs to stderr; SIGTERM or SIGINT stops it cleanly (exit 0).
// Exit codes: 0 stopped by a signal, 2 bad usage or configuration, 1 could
// not start (bind, mapping, transport).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "io/asio_loop.h"
#include "kvtier/config.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/remote_auth.h"
#include "tools/memd/memd_config.h"

namespace {

using kvtier::internal::memd::MemdServer;
using kvtier::internal::memd::MemdServerOptions;

struct Flags {
  std::string config, listen, pool_size, slot_size, secret_file, transport, port_file;
  uint32_t lease_ms = 0;  // 0: keep the file's or the default
  bool no_hugepages = false;
};

int Fail(int code, const std::string& what) {
  std::cerr << "kvtier-memd: " << what << "\n";
  return code;
}

// Flags override the YAML file; the file overrides the defaults.
int BuildOptions(const Flags& f, MemdServerOptions* o) {
  std::string secret_file;
  if (!f.config.empty()) {
    kvtier::Status s = kvtier::memd_tool::LoadMemdConfig(f.config, o, &secret_file);
    if (!s.ok()) return Fail(2, std::string(s.message()));
  }
  if (!f.listen.empty()) o->listen = f.listen;
  if (!f.transport.empty()) o->transport = f.transport;
  if (f.lease_ms != 0) o->lease_ms = f.lease_ms;
  if (!f.secret_file.empty()) secret_file = f.secret_file;
  if (f.no_hugepages) o->pool.hugepages = false;
  for (auto [text, out] : {std::pair{&f.pool_size, &o->pool.pool_bytes},
                           std::pair{&f.slot_size, &o->pool.slot_bytes}}) {
    if (text->empty()) continue;
    auto v = kvtier::ParseByteSize(*text);
    if (!v.ok()) return Fail(2, std::string(v.status().message()));
    *out = *v;
  }
  if (secret_file.empty()) return Fail(2, "--secret-file is required (the shared secret)");
  auto secret = kvtier::internal::memd::ReadSecretFile(secret_file);
  if (!secret.ok()) return Fail(2, std::string(secret.status().message()));
  o->secret = *secret;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtier-memd: remote memory server for kvtier"};
  Flags f;
  app.add_option("--config", f.config,
                 "YAML file (listen, pool_size, slot_size, secret_file, "
                 "transport, hugepages, watermarks, max_connections, lease_ms, "
                 "handshake_timeout_ms, put_timeout_ms)");
  app.add_option("--listen", f.listen,
                 "host:port to listen on (default 127.0.0.1:7400; port 0 "
                 "picks one)");
  app.add_option("--pool-size", f.pool_size, "memory pool size (default 1GiB)");
  app.add_option("--slot-size", f.slot_size, "slot size: largest block + 64 (default 4MiB+4KiB)");
  app.add_option("--secret-file", f.secret_file, "file holding the shared secret");
  app.add_option("--transport", f.transport, "tcp (default) or rdma");
  app.add_option("--lease-ms", f.lease_ms,
                 "rdma: how long a GET lease pins its blocks, ms (default 2000)");
  app.add_option("--port-file", f.port_file, "write the bound port here once listening");
  app.add_flag("--no-hugepages", f.no_hugepages, "do not try huge pages");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  MemdServerOptions options;
  if (int rc = BuildOptions(f, &options); rc != 0) return rc;
  if (kvtier::Status s = options.Validate(); !s.ok()) return Fail(2, std::string(s.message()));
  // A listen address that does not parse or resolve is a usage error, found
  // before the pool is mapped.
  if (auto ep = kvtier::internal::ParseTcpEndpoint(options.listen, /*allow_port0=*/true);
      !ep.ok()) {
    return Fail(2, "listen: " + std::string(ep.status().message()));
  }

  // Signals are taken by sigwait below, never by a handler: the server's
  // threads inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto server = MemdServer::Start(options);
  if (!server.ok()) return Fail(1, server.status().ToString());
  std::cerr << "kvtier-memd: listening on port " << (*server)->port() << " (transport "
            << options.transport << ")\n";
  if (!f.port_file.empty()) {
    // Written to a temporary name and renamed, so a reader never sees half.
    const std::string tmp = f.port_file + ".tmp";
    std::ofstream(tmp) << (*server)->port() << "\n";
    std::rename(tmp.c_str(), f.port_file.c_str());
  }
  int sig = 0;
  sigwait(&set, &sig);
  std::cerr << "kvtier-memd: signal " << sig << ", stopping\n";
  (*server)->Stop();
  return 0;
}
