// Shared by the io_uring engine tests: a scratch file, an engine with given
// options, and the test-only entry point of io/uring_engine.cc for fault
// injection.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "io/io_engine.h"

namespace kvtier::internal {

// Starts the engine's owner thread running `body`; may throw std::system_error
// as std::thread does.
using UringThreadStarter = std::function<std::thread(std::function<void()> body)>;

// Called before each submit-and-wait of the engine's loop; a nonzero answer
// (-errno) is taken as that call's result, and nothing is submitted.
using UringWaitFault = std::function<int()>;

// NewUringEngine with the owner thread started by `start` (null: a plain
// std::thread) and each submit-and-wait preceded by `wait_fault`.
Result<std::unique_ptr<IoEngine>> TEST_NewUringEngine(const UringEngineOptions& options,
                                                      UringThreadStarter start,
                                                      UringWaitFault wait_fault = nullptr);

// A file of its own in the build directory, removed with the object.
struct ScratchFile {
  ScratchFile() {
    std::string p = std::string(KVTIER_BINARY_DIR) + "/uring-test-XXXXXX";
    fd = mkstemp(p.data());
    path = p;
  }
  ~ScratchFile() {
    close(fd);
    unlink(path.c_str());
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  int fd = -1;
  std::string path;
};

inline std::unique_ptr<IoEngine> MakeEngine(UringEngineOptions o = {}) {
  auto e = NewUringEngine(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

}  // namespace kvtier::internal
