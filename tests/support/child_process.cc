#include "tests/support/child_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>

namespace kvtier::testing {

Result<pid_t> SpawnChild(std::vector<std::string> args) {
  if (args.empty()) return Status::InvalidArgument("SpawnChild: no program");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return FromErrno(errno, "fork " + args[0]);
  if (pid == 0) {
    // Between fork and prctl the parent may already have died: check.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace kvtier::testing
