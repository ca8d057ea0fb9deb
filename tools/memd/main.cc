// kvtier-memd: serves a memory pool to kvtier remote tiers over the memd
// protocol. Logs to stderr; SIGTERM or SIGINT stops it cleanly (exit 0) and
// removes the --port-file it wrote.
// Exit codes: 0 stopped by a signal, 2 bad usage or configuration, 1 could
// not start (bind, mapping, transport, writing --port-file).
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "config/config_values.h"
#include "io/asio_loop.h"
#include "kvtier/config.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/remote_auth.h"
#include "tools/memd/memd_config.h"

namespace {

using kvtier::internal::memd::MemdServer;
using kvtier::internal::memd::MemdServerOptions;

struct Flags {
  // Empty: not given (a given flag never is, see EmptyValue).
  std::string config, listen, pool_size, slot_size, secret_file, transport, port_file, lease_ms;
  bool no_hugepages = false;
};

// A flag that takes a value, and the string CLI11 stores it in.
struct ValuedFlag {
  const char* name;
  const CLI::Option* option;
  const std::string* value;
};

int Fail(int code, const std::string& what) {
  std::cerr << "kvtier-memd: " << what << "\n";
  return code;
}

// A flag given an empty value (an unset shell variable in a supervisor's
// command line) is refused: read as "not given", --listen "" would serve on
// the default address. Before parsing: "--listen=", whose value CLI11 would
// take from the next argument (even "--no-hugepages").
const char* EmptyAssignment(const std::vector<ValuedFlag>& flags, int argc, char** argv) {
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    for (const ValuedFlag& flag : flags) {
      if (std::string_view(argv[i]) == std::string(flag.name) + "=") return flag.name;
    }
  }
  return nullptr;
}

// After parsing: --listen "", which CLI11 stores as "" (as if not given).
const char* EmptyValue(const std::vector<ValuedFlag>& flags) {
  for (const ValuedFlag& flag : flags) {
    if (flag.option->count() > 0 && flag.value->empty()) return flag.name;
  }
  return nullptr;
}

// --lease-ms reads as the file's lease_ms does: decimal digits only (CLI11's
// own conversion would take 070000 as octal and 0x3e8 as hex); the upper
// bound is MemdServerOptions::Validate's, as for the file.
kvtier::Status ParseLeaseMs(const std::string& text, uint32_t* out) {
  kvtier::internal::ConfigNode node;
  node.kind = kvtier::internal::ConfigNode::Kind::kScalar;
  node.text = text;
  node.where = "--lease-ms";
  return kvtier::internal::ReadU32(node, "lease_ms", 1, out, kvtier::internal::memd::kMaxLeaseMs);
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
  if (!f.lease_ms.empty()) {
    if (kvtier::Status s = ParseLeaseMs(f.lease_ms, &o->lease_ms); !s.ok()) {
      return Fail(2, std::string(s.message()));
    }
  }
  if (!f.secret_file.empty()) secret_file = f.secret_file;
  if (f.no_hugepages) o->pool.hugepages = false;
  for (auto [flag, text, out] : {std::tuple{"--pool-size", &f.pool_size, &o->pool.pool_bytes},
                                 std::tuple{"--slot-size", &f.slot_size, &o->pool.slot_bytes}}) {
    if (text->empty()) continue;
    auto v = kvtier::ParseByteSize(*text);
    if (!v.ok()) return Fail(2, std::string(flag) + ": " + std::string(v.status().message()));
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

// Removes the port file at a clean stop, so whoever restarts memd and waits
// for the file does not read this run's port; left alone when it is no longer
// the file this process wrote (a successor already replaced it).
void RemovePortFile(const std::string& path, const struct stat& written) {
  struct stat now {};
  if (stat(path.c_str(), &now) == 0 && now.st_dev == written.st_dev &&
      now.st_ino == written.st_ino) {
    std::remove(path.c_str());
  }
}

// Declares the flags; those that take a value, for the empty-value checks.
std::vector<ValuedFlag> AddFlags(CLI::App& app, Flags& f) {
  std::vector<ValuedFlag> valued;
  auto add = [&app, &valued](const char* name, std::string& value, const char* help) {
    valued.push_back({name, app.add_option(name, value, help), &value});
  };
  add("--config", f.config,
      "YAML file (listen, pool_size, slot_size, secret_file, "
      "transport, hugepages, watermarks, max_connections, lease_ms, "
      "handshake_timeout_ms, put_timeout_ms, reply_timeout_ms)");
  add("--listen", f.listen,
      "host:port to listen on (default 127.0.0.1:7400; port 0 "
      "picks one)");
  add("--pool-size", f.pool_size, "memory pool size (default 1GiB)");
  add("--slot-size", f.slot_size, "slot size: largest block + 64 (default 4MiB+4KiB)");
  add("--secret-file", f.secret_file, "file holding the shared secret");
  add("--transport", f.transport, "tcp (default) or rdma");
  add("--lease-ms", f.lease_ms,
      "rdma: how long a GET lease pins its blocks, ms, 1 to 60000 (default 2000)");
  add("--port-file", f.port_file, "write the bound port here once listening");
  app.add_flag("--no-hugepages", f.no_hugepages, "do not try huge pages");
  return valued;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtier-memd: remote memory server for kvtier"};
  Flags f;
  const std::vector<ValuedFlag> valued = AddFlags(app, f);
  if (const char* flag = EmptyAssignment(valued, argc, argv)) {
    return Fail(2, std::string(flag) + ": empty value");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (const char* flag = EmptyValue(valued)) return Fail(2, std::string(flag) + ": empty value");
  MemdServerOptions options;
  if (int rc = BuildOptions(f, &options); rc != 0) return rc;
  if (kvtier::Status s = options.Validate(); !s.ok()) return Fail(2, std::string(s.message()));
  // A listen address that does not parse or resolve is a usage error, found
  // before the pool is mapped.
  if (auto ep = kvtier::internal::ParseTcpEndpoint(options.listen, /*allow_port0=*/true);
      !ep.ok()) {
    return Fail(2, "listen: " + std::string(ep.status().message()));
  }

  // A log reader that went away (stderr a pipe) fails the log's writes
  // with EPIPE instead of ending the server.
  signal(SIGPIPE, SIG_IGN);
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
  struct stat port_file_id {};
  bool wrote_port_file = false;
  if (!f.port_file.empty()) {
    // Whoever waits for the file would otherwise wait for good.
    if (auto why = WritePortFile(f.port_file, (*server)->port())) {
      (*server)->Stop();
      return Fail(1, "--port-file: " + *why);
    }
    wrote_port_file = stat(f.port_file.c_str(), &port_file_id) == 0;
  }
  int sig = 0;
  sigwait(&set, &sig);
  std::cerr << "kvtier-memd: signal " << sig << ", stopping\n";
  (*server)->Stop();
  if (wrote_port_file) RemovePortFile(f.port_file, port_file_id);
  return 0;
}
