#include "tests/support/memd_server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/child_process.h"

namespace kvtier::testing {

std::string MemdBinary() { return KVTIER_MEMD_PATH; }

namespace {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "wait status " + std::to_string(status);
}

}  // namespace

MemdProcess::MemdProcess(MemdProcessOptions options, std::string dir)
    : options_(std::move(options)), dir_(std::move(dir)) {}

MemdProcess::~MemdProcess() {
  Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Result<std::unique_ptr<MemdProcess>> MemdProcess::Start(const MemdProcessOptions& options) {
  static std::atomic<int> counter{0};
  std::string dir =
      (std::filesystem::temp_directory_path() /
       ("kvtier-memd-" + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1))))
          .string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/secret") << options.secret << "\n";
  std::unique_ptr<MemdProcess> p(new MemdProcess(options, std::move(dir)));
  KVTIER_RETURN_IF_ERROR(p->Launch(0));
  return p;
}

Status MemdProcess::Launch(uint16_t port) {
  const std::string port_file = dir_ + "/port";
  std::filesystem::remove(port_file);
  std::vector<std::string> args = {
      MemdBinary(),       "--listen",         "127.0.0.1:" + std::to_string(port),
      "--pool-size",      options_.pool_size, "--slot-size",
      options_.slot_size, "--secret-file",    dir_ + "/secret",
      "--port-file",      port_file,          "--no-hugepages"};
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  auto child = SpawnChild(std::move(args));
  if (!child.ok()) return child.status();
  pid_ = *child;
  return WaitUntilReady(&pid_, "kvtier-memd", std::chrono::seconds(10),
                        std::chrono::milliseconds(5), [&] {
                          std::ifstream in(port_file);
                          unsigned p = 0;
                          if (!(in >> p) || p == 0) return false;
                          port_ = static_cast<uint16_t>(p);
                          return true;
                        });
}

void MemdProcess::Kill() {
  if (pid_ <= 0) return;
  // Only the test may end the server: one that is already gone crashed, or a
  // sanitizer ended it after a report (halt_on_error), and the test that was
  // talking to it must not pass.
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    ADD_FAILURE() << "kvtier-memd (pid " << pid_ << ", port " << port_
                  << ") ended on its own before the test stopped it: " << DescribeWaitStatus(status)
                  << " (a crash or a sanitizer report; its stderr is in this test's output)";
    pid_ = -1;
    return;
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void MemdProcess::Pause() {
  if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0) return;
  // SIGSTOP lands asynchronously: wait until the kernel reports it stopped
  // ('T' in /proc/<pid>/stat), so nothing is served after Pause returns.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'T') return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void MemdProcess::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

Status MemdProcess::Restart() {
  Kill();
  return Launch(port_);
}

int MemdProcess::Terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Kill();
  return -1;
}

}  // namespace kvtier::testing
