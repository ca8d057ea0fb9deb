// The kvtier-memd binary's command line: what it refuses (exit code 2 with
// the reason, before anything is started), what it writes, and what it
// cleans up when stopped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/scratch_dir.h"

namespace kvtier::memd_tool {
namespace {

class MemdCli : public ::testing::Test {
 protected:
  void SetUp() override { secret_ = Write("secret", "s3cret\n"); }
  std::string Write(const std::string& name, const std::string& text) {
    return scratch_.Write(name, text);
  }
  // Runs the kvtier-memd binary (bounded by 20 s); its exit code and stderr.
  int Memd(const std::string& args, std::string* err) {
    const std::string out = dir_ + "/memd.err";
    const std::string cmd = std::string("timeout 20 ") + KVTIER_MEMD_PATH + " " + args + " 2>" +
                            out + " >/dev/null </dev/null";
    const int status = std::system(cmd.c_str());
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    *err = ss.str();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // Starts a small server on a free loopback port writing `port_file`, and
  // waits (up to 10 s) for the file; the pid, or -1 (with a test failure).
  pid_t StartServer(const std::string& port_file) {
    auto child = testing::SpawnChild({KVTIER_MEMD_PATH, "--listen", "127.0.0.1:0", "--pool-size",
                                      "1MiB", "--slot-size", "64KiB", "--no-hugepages",
                                      "--secret-file", secret_, "--port-file", port_file});
    if (!child.ok()) {
      ADD_FAILURE() << child.status().ToString();
      return -1;
    }
    pid_t pid = *child;
    Status ready = testing::WaitUntilReady(&pid, "kvtier-memd", std::chrono::seconds(10),
                                           std::chrono::milliseconds(5),
                                           [&] { return std::filesystem::exists(port_file); });
    if (!ready.ok()) {
      ADD_FAILURE() << ready.ToString();
      if (pid > 0) Stop(pid);
      return -1;
    }
    return pid;
  }
  // SIGTERM, then waits up to 10 s (then SIGKILL); the exit code, or -1.
  static int Stop(pid_t pid) {
    kill(pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, &status, WNOHANG) == pid)
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }

  testing::ScratchDir scratch_{"kvtier_memd_cli_"};
  const std::string dir_ = scratch_.path();
  std::string secret_;
};

TEST_F(MemdCli, RefusesBadInputWithExitCode2) {
  std::string err;
  EXPECT_EQ(Memd("--config " + dir_ + " --secret-file " + secret_, &err), 2) << err;
  EXPECT_EQ(err, "kvtier-memd: " + dir_ + ": cannot read config file: Is a directory\n");
  EXPECT_EQ(Memd("--secret-file " + dir_, &err), 2) << err;
  EXPECT_EQ(err, "kvtier-memd: cannot read secret file '" + dir_ + "': Is a directory\n");
  EXPECT_EQ(
      Memd("--config " + Write("w.yaml", "watermarks: 0.9\n") + " --secret-file " + secret_, &err),
      2)
      << err;
  EXPECT_NE(err.find("w.yaml:1:13: watermarks is '0.9'"), std::string::npos) << err;
  // Not host:port: refused before the pool is mapped (a 1 GiB pool here
  // would otherwise be mapped first and the bind fail with exit 1).
  EXPECT_EQ(Memd("--listen nonsense --pool-size 1GiB --secret-file " + secret_, &err), 2) << err;
  EXPECT_EQ(err, "kvtier-memd: listen: endpoint 'nonsense' is not host:port\n");
  EXPECT_EQ(Memd("--listen 127.0.0.1:70000 --secret-file " + secret_, &err), 2) << err;
  EXPECT_NE(err.find("has a bad port"), std::string::npos) << err;
  EXPECT_EQ(Memd("--config " + Write("c.yaml", "max_connections: 100000\n") +
                     " --listen 127.0.0.1:0 --secret-file " + secret_,
                 &err),
            2)
      << err;
  EXPECT_NE(
      err.find("max_connections is 100000, out of range; expected a whole number from 1 to 65536"),
      std::string::npos)
      << err;
}

// A flag given with an empty value (an unset shell variable) is refused, not
// taken as "not given": --listen "" would otherwise serve on the default
// address. Each run also carries a later error, so a flag that slipped
// through ends the run at once with another message.
TEST_F(MemdCli, RefusesFlagsGivenAnEmptyValue) {
  const std::string later = " --listen nonsense";
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"--listen", " --transport udp"}, {"--transport", later}, {"--secret-file", later},
      {"--pool-size", later},           {"--slot-size", later}, {"--lease-ms", later},
      {"--port-file", later},           {"--config", later},
  };
  for (const auto& [flag, rest] : runs) {
    std::string err;
    const std::string args = flag == "--secret-file" ? "" : " --secret-file " + secret_;
    EXPECT_EQ(Memd(flag + " ''" + args + rest, &err), 2) << flag << ": " << err;
    EXPECT_EQ(err, "kvtier-memd: " + flag + ": empty value\n") << flag;
    EXPECT_EQ(Memd(flag + "=" + args + rest, &err), 2) << flag << "=: " << err;
    EXPECT_EQ(err, "kvtier-memd: " + flag + ": empty value\n") << flag << "=";
  }
}

// --lease-ms reads as the file's lease_ms: decimal only, with the same
// messages (no octal 070000 = 28672, no hex 0x3e8 = 1000).
TEST_F(MemdCli, LeaseMsIsDecimalLikeTheFile) {
  const std::string rest = " --listen nonsense --secret-file " + secret_;
  const std::string listen_error = "kvtier-memd: listen: endpoint 'nonsense' is not host:port\n";
  std::string err;
  EXPECT_EQ(Memd("--lease-ms 070000" + rest, &err), 2) << err;
  EXPECT_EQ(err,
            "kvtier-memd: --lease-ms: lease_ms is 070000, out of range; expected a whole number "
            "from 1 to 60000\n");
  EXPECT_EQ(Memd("--lease-ms 0x3e8" + rest, &err), 2) << err;
  const std::string not_number =
      "lease_ms is '0x3e8', not a whole number; expected a whole number from 1 to 60000";
  EXPECT_EQ(err, "kvtier-memd: --lease-ms: " + not_number + "\n");
  EXPECT_EQ(Memd("--config " + Write("l.yaml", "lease_ms: 0x3e8\n") + rest, &err), 2) << err;
  EXPECT_EQ(err, "kvtier-memd: " + dir_ + "/l.yaml:1:11: " + not_number + "\n");
  // 0 is refused as the file's lease_ms: 0 is not "unset".
  EXPECT_EQ(Memd("--lease-ms 0" + rest, &err), 2) << err;
  EXPECT_EQ(err,
            "kvtier-memd: --lease-ms: lease_ms is 0, out of range; expected a whole number from 1 "
            "to 60000\n");
  EXPECT_EQ(Memd("--lease-ms +5" + rest, &err), 2) << err;
  EXPECT_NE(err.find("--lease-ms: lease_ms is '+5', not a whole number"), std::string::npos) << err;
  // Decimal values in range pass on to the next check.
  EXPECT_EQ(Memd("--lease-ms 060000" + rest, &err), 2) << err;
  EXPECT_EQ(err, listen_error);
  EXPECT_EQ(Memd("--lease-ms 1" + rest, &err), 2) << err;
  EXPECT_EQ(err, listen_error);
}

TEST_F(MemdCli, ByteSizeErrorsNameTheFlag) {
  std::string err;
  EXPECT_EQ(Memd("--pool-size 1x --secret-file " + secret_, &err), 2) << err;
  EXPECT_EQ(err.rfind("kvtier-memd: --pool-size: byte size '1x' has an unknown unit 'x'", 0), 0u)
      << err;
  EXPECT_EQ(Memd("--slot-size 4QiB --secret-file " + secret_, &err), 2) << err;
  EXPECT_EQ(err.rfind("kvtier-memd: --slot-size: byte size '4QiB' has an unknown unit", 0), 0u)
      << err;
}

// A --port-file that cannot be written stops the server with exit 1 and
// the reason: whoever waits for that file would otherwise wait for good.
TEST_F(MemdCli, StopsWhenThePortFileCannotBeWritten) {
  const std::string args =
      "--listen 127.0.0.1:0 --pool-size 1MiB --slot-size 64KiB "
      "--no-hugepages --secret-file " +
      secret_ + " --port-file ";
  std::string err;
  EXPECT_EQ(Memd(args + dir_ + "/missing/port", &err), 1) << err;
  EXPECT_NE(err.find("kvtier-memd: --port-file: cannot create '" + dir_ +
                     "/missing/port.tmp': No such file or directory\n"),
            std::string::npos)
      << err;
  // A directory in the way: the rename fails, and the temporary is gone.
  std::filesystem::create_directories(dir_ + "/taken/inside");
  EXPECT_EQ(Memd(args + dir_ + "/taken", &err), 1) << err;
  EXPECT_NE(err.find("kvtier-memd: --port-file: cannot rename '" + dir_ + "/taken.tmp' to '" +
                     dir_ + "/taken': Is a directory\n"),
            std::string::npos)
      << err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/taken.tmp"));
}

// A clean stop removes the port file, so a supervisor that restarts memd on
// port 0 and waits for the file never reads the previous run's port; a file
// another process put there since is left alone.
TEST_F(MemdCli, RemovesItsPortFileWhenStopped) {
  const std::string port_file = dir_ + "/port";
  pid_t pid = StartServer(port_file);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(Stop(pid), 0);
  EXPECT_FALSE(std::filesystem::exists(port_file));

  std::filesystem::remove(port_file);  // (left only without the removal above)
  pid = StartServer(port_file);
  ASSERT_GT(pid, 0);
  const std::string successor = Write("successor", "7401\n");
  std::filesystem::rename(successor, port_file);
  EXPECT_EQ(Stop(pid), 0);
  std::ifstream in(port_file);
  std::string text;
  EXPECT_TRUE(std::getline(in, text));
  EXPECT_EQ(text, "7401");
}

// Its stderr a pipe nobody reads any more (a log shipper that went away):
// the server's log lines fail, and it goes on serving. The first one
// ("listening on port") used to end it with SIGPIPE.
TEST_F(MemdCli, ALogPipeWithNoReaderDoesNotStopTheServer) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  close(p[0]);
  // The child inherits descriptor 2 as it is at the spawn.
  const int saved = dup(2);
  ASSERT_GE(saved, 0);
  dup2(p[1], 2);
  const std::string port_file = dir_ + "/port";
  auto child = testing::SpawnChild({KVTIER_MEMD_PATH, "--listen", "127.0.0.1:0", "--pool-size",
                                    "1MiB", "--slot-size", "64KiB", "--no-hugepages",
                                    "--secret-file", secret_, "--port-file", port_file});
  dup2(saved, 2);
  close(saved);
  close(p[1]);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  pid_t pid = *child;
  Status ready = testing::WaitUntilReady(&pid, "kvtier-memd", std::chrono::seconds(10),
                                         std::chrono::milliseconds(5),
                                         [&] { return std::filesystem::exists(port_file); });
  ASSERT_TRUE(ready.ok()) << ready.ToString();
  EXPECT_EQ(Stop(pid), 0);
}

}  // namespace
}  // namespace kvtier::memd_tool
