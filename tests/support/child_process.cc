#include "tests/support/child_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>

namespace kvtier::testing {

bool OnPath(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

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

Status WaitUntilReady(pid_t* pid, std::string_view what, std::chrono::milliseconds timeout,
                      std::chrono::milliseconds poll, const std::function<bool()>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      *pid = -1;
      return Status::Unavailable(std::string(what) + " exited at start (status " +
                                 std::to_string(status) + ")");
    }
    if (ready()) return Status::Ok();
    std::this_thread::sleep_for(poll);
  }
  return Status::Unavailable(std::string(what) + " was not ready within " +
                             std::to_string(timeout.count()) + " ms");
}

Status RunWithDeadline(std::vector<std::string> args, std::chrono::milliseconds limit) {
  const std::string what = args.empty() ? "" : args[0];
  auto child = SpawnChild(std::move(args));
  if (!child.ok()) return child.status();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(*child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(*child, SIGKILL);
      waitpid(*child, &status, 0);
      return Status::DeadlineExceeded(what + " did not finish within " +
                                      std::to_string(limit.count()) + " ms; killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  return Status::Unavailable(what + " failed (wait status " + std::to_string(status) + ")");
}

}  // namespace kvtier::testing
