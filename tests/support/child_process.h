// Starting the servers that tests run against (redis-server, kvtier-memd) as
// child processes that never outlive the test process.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::testing {

// Runs args[0] (looked up on PATH when it has no '/') with args[1..] in a
// child that gets SIGKILL when the test process dies. Returns the child's
// pid; exec failures show as the child exiting with 127.
Result<pid_t> SpawnChild(std::vector<std::string> args);

}  // namespace kvtier::testing
