// kvtier-memd: serves a memory pool to kvtier remote tiers over the memd
// protocol. Logs to stderr; SIGTERM or SIGINT stops it cleanly (exit 0).
// Exit codes: 0 stopped by a signal, 2 bad usage or configuration, 1 could
// not start (bind, mapping, transport, writing --port-file).
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
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
  std::optional<uint32_t> lease_ms;  // unset: keep the file's or the default
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
  if (f.lease_ms) o->lease_ms = *f.lease_ms;
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

// Each connection is a descriptor: raises the soft open-file limit toward
// the hard one when max_connections needs more (the server warns if it is
// still short).
void RaiseDescriptorLimit(const MemdServerOptions& o) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const rlim_t need = rlim_t{o.max_connections} + kvtier::internal::memd::kSpareDescriptors;
  if (r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= need) return;
  r.rlim_cur = r.rlim_max == RLIM_INFINITY ? need : std::min(need, r.rlim_max);
  setrlimit(RLIMIT_NOFILE, &r);
}

// Writes the port to a temporary name and renames it, so a reader never sees
// half; the reason when either fails.
std::optional<std::string> WritePortFile(const std::string& path, uint16_t port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) return "cannot create '" + tmp + "': " + std::strerror(errno);
    out << port << "\n";
    out.close();
    if (!out) {
      const int err = errno;
      std::remove(tmp.c_str());
      return "cannot write '" + tmp + "': " + std::strerror(err);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err);
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtier-memd: remote memory server for kvtier"};
  Flags f;
  app.add_option("--config", f.config,
                 "YAML file (listen, pool_size, slot_size, secret_file, "
                 "transport, hugepages, watermarks, max_connections, lease_ms, "
                 "handshake_timeout_ms, put_timeout_ms, reply_timeout_ms)");
  app.add_option("--listen", f.listen,
                 "host:port to listen on (default 127.0.0.1:7400; port 0 "
                 "picks one)");
  app.add_option("--pool-size", f.pool_size, "memory pool size (default 1GiB)");
  app.add_option("--slot-size", f.slot_size, "slot size: largest block + 64 (default 4MiB+4KiB)");
  app.add_option("--secret-file", f.secret_file, "file holding the shared secret");
  app.add_option("--transport", f.transport, "tcp (default) or rdma");
  app.add_option("--lease-ms", f.lease_ms,
                 "rdma: how long a GET lease pins its blocks, ms, 1 to 60000 (default 2000)");
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

  RaiseDescriptorLimit(options);
  auto server = MemdServer::Start(options);
  if (!server.ok()) return Fail(1, server.status().ToString());
  std::cerr << "kvtier-memd: listening on port " << (*server)->port() << " (transport "
            << options.transport << ")\n";
  if (!f.port_file.empty()) {
    // Whoever waits for the file would otherwise wait for good.
    if (auto why = WritePortFile(f.port_file, (*server)->port())) {
      (*server)->Stop();
      return Fail(1, "--port-file: " + *why);
    }
  }
  int sig = 0;
  sigwait(&set, &sig);
  std::cerr << "kvtier-memd: signal " << sig << ", stopping\n";
  (*server)->Stop();
  return 0;
}
