// Real kvtier-memd processes for tests: each listens on a free loopback port
// (it binds port 0 and reports the port through --port-file), holds a small
// pool, shares a secret written to its own temporary directory, and is killed
// when its owner is destroyed or the test process dies. A server that ended on
// its own before the test stopped it (a crash, or a sanitizer report, which
// ends kvtier-memd under scripts/test.sh) fails the running test; its stderr is
// the test's, so the report is in the test's output.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::testing {

struct MemdProcessOptions {
  std::string secret = "kvtier test secret";
  std::string pool_size = "32MiB";
  std::string slot_size = "132KiB";  // 128 KiB blocks + header, rounded
  std::vector<std::string> extra_args;
};

class MemdProcess {
 public:
  // Starts the server and waits (up to 10 s) until it listens.
  static Result<std::unique_ptr<MemdProcess>> Start(const MemdProcessOptions& options = {});
  ~MemdProcess();
  MemdProcess(const MemdProcess&) = delete;
  MemdProcess& operator=(const MemdProcess&) = delete;

  uint16_t port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& secret() const { return options_.secret; }
  std::string secret_file() const { return dir_ + "/secret"; }
  // The server's process id; -1 once it was killed or ended.
  pid_t pid() const { return pid_; }

  // SIGKILL and reap. If the server had already ended on its own, adds a
  // non-fatal gtest failure naming its exit status. (The destructor kills.)
  void Kill();
  // SIGSTOP: the server keeps its sockets but answers nothing.
  void Pause();
  // SIGCONT: a paused server answers again.
  void Resume();
  // Kills it (as Kill(), failing the test if it had ended on its own) and
  // starts it again, empty, on the same port.
  Status Restart();
  // SIGTERM; returns the exit status (0 for a clean stop) or -1 if it had to
  // be killed after 10 s.
  int Terminate();

 private:
  MemdProcess(MemdProcessOptions options, std::string dir);
  Status Launch(uint16_t port);

  const MemdProcessOptions options_;
  const std::string dir_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
};

// The kvtier-memd binary these tests run.
std::string MemdBinary();

}  // namespace kvtier::testing
