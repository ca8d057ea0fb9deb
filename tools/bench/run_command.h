// Running the peer tools the benchmarks compare against (fio,
// redis-benchmark) without a shell: arguments travel as they are, so paths
// and passwords with spaces or quotes need no quoting and are never parsed.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

struct CommandResult {
  int exit_code = 0;   // the exit status; 128 + N when killed by signal N; 127 when exec failed
  std::string output;  // everything the command wrote to standard output
};

// Runs argv[0] (looked up on PATH when it has no '/') with argv[1..], stdin
// and stderr on /dev/null, and collects its standard output. A command still
// running after `timeout` is killed: DeadlineExceeded naming argv[0]. Errors
// (InvalidArgument for an empty argv, IOError when no process can be
// started) name argv[0] only, never the other arguments, which may hold a
// secret.
Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout);

}  // namespace kvtier::bench
