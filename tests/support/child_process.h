// Starting the servers that tests run against (redis-server, kvtier-memd) as
// child processes that never outlive the test process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::testing {

// Whether `program` is found on PATH (as the shell's `command -v` finds it).
bool OnPath(const std::string& program);

// Runs args[0] (looked up on PATH when it has no '/') with args[1..] in a
// child that gets SIGKILL when the test process dies. Returns the child's
// pid; exec failures show as the child exiting with 127.
Result<pid_t> SpawnChild(std::vector<std::string> args);

// Polls `ready` every `poll` until it is true (OK), the child `*pid` exits
// (Unavailable "<what> exited at start (status N)", *pid set to -1) or
// `timeout` passes (Unavailable "<what> was not ready within <timeout>").
Status WaitUntilReady(pid_t* pid, std::string_view what, std::chrono::milliseconds timeout,
                      std::chrono::milliseconds poll, const std::function<bool()>& ready);

// Runs `args` as a child (see SpawnChild) and waits for it to exit, at most
// `limit`: past that the child is killed (SIGKILL) and reaped, and the
// result is DeadlineExceeded naming args[0]. Otherwise OK when it exited
// with status 0, else Unavailable with its exit status. For setup commands
// (redis-cli) that must fail a test rather than hang it.
Status RunWithDeadline(std::vector<std::string> args, std::chrono::milliseconds limit);

}  // namespace kvtier::testing
