#include "tools/bench/run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <thread>

namespace kvtier::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void ExecChild(const std::vector<char*>& args, int stdout_fd) {
  const int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDERR_FILENO);
  }
  dup2(stdout_fd, STDOUT_FILENO);
  execvp(args[0], args.data());
  _exit(127);
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds timeout) {
  if (argv.empty() || argv[0].empty()) return Status::InvalidArgument("no command to run");
  const std::string& name = argv[0];
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return FromErrno(errno, "pipe for " + name);
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return FromErrno(err, "fork for " + name);
  }
  if (pid == 0) ExecChild(args, fds[1]);  // dup2 clears O_CLOEXEC on the copy
  close(fds[1]);

  CommandResult result;
  const auto deadline = SteadyClock::now() + timeout;
  bool timed_out = false;
  int status = 0;
  bool exited = false;
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 20)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) {
      // Quiet: the command may have exited while a process it left running
      // holds its stdout open, so no end of file comes. Its output is what
      // it wrote (read above); it has finished.
      exited = waitpid(pid, &status, WNOHANG) == pid;
      if (exited) break;
      continue;
    }
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of output: the command closed its stdout
    result.output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  // A command may close its stdout before it exits: the wait keeps to the
  // same deadline.
  while (!timed_out && !exited) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    if (SteadyClock::now() >= deadline) {
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (timed_out) {
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return Status::DeadlineExceeded(name + " did not finish within " +
                                    std::to_string(timeout.count()) + " ms; killed");
  }
  result.exit_code = ExitCode(status);
  return result;
}

}  // namespace kvtier::bench
