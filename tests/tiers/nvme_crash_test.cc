// Crash test: a child process writes blocks continuously and is killed with
// SIGKILL at a random moment, 24 times. After each kill the tier is reopened:
// every block the index returns must verify byte for byte, and every block
// the child reported as committed must be there.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <sstream>
#include <thread>

#include "tests/support/block_data.h"
#include "tests/tiers/nvme_crash_common.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::testing {
namespace {

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout
};

Child Spawn(const std::string& dir, uint64_t round) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const std::string r = std::to_string(round);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl(KVTIER_NVME_CRASH_WRITER, KVTIER_NVME_CRASH_WRITER, dir.c_str(), r.c_str(), nullptr);
    _exit(127);
  }
  close(fds[1]);
  return {pid, fds[0]};
}

// Everything the (dead) child wrote to its stdout.
std::string Drain(int fd) {
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) all.append(buf, static_cast<size_t>(n));
  close(fd);
  return all;
}

// Reads the child's stdout up to and including the next line; that line
// ("" at EOF, or when none arrives within 60 s: a hung child fails the test
// instead of hanging it).
std::string ReadLine(int fd, std::string* all) {
  std::string line;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char ch;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
    if (read(fd, &ch, 1) != 1) return line;
    all->push_back(ch);
    if (ch == '\n') break;
    line.push_back(ch);
  }
  return line;
}

// The highest "committed N" the child printed.
uint64_t Committed(const std::string& out) {
  std::istringstream in(out);
  std::string word;
  uint64_t n = 0, best = 0;
  while (in >> word) {
    if (word == "committed" && in >> n) best = std::max(best, n);
  }
  return best;
}

TEST(NvmeCrash, SigkillAtRandomPointsLosesOnlyUncommittedBlocks) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  std::mt19937_64 rng(20240601);
  std::uniform_int_distribution<int> delay_ms(0, 60);
  uint64_t total_committed = 0, total_found = 0, rounds_with_writes = 0;
  for (uint64_t round = 0; round < 24; ++round) {
    Child child = Spawn(dir.path(), round);
    ASSERT_GT(child.pid, 0);
    // Odd rounds kill while the child may still be opening (recovering) the
    // store; even rounds wait until it writes, and every fourth round until
    // it has committed, so that however slow the disk, 6 kills land after
    // a commit.
    std::string printed;
    if (round % 2 == 0) ASSERT_EQ(ReadLine(child.out, &printed), "ready") << "round " << round;
    if (round % 4 == 0) {
      ASSERT_EQ(ReadLine(child.out, &printed).rfind("committed ", 0), 0u) << "round " << round;
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng) / 12));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));  // a random kill point
    }
    kill(child.pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child.pid, &status, 0), child.pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << round << ": the writer exited by itself";
    const uint64_t committed = Committed(printed + Drain(child.out));

    auto tier = internal::OpenNvmeTier(CrashOptions(dir.path()), TierContext{kCrashBlockBytes});
    ASSERT_TRUE(tier.ok()) << "round " << round << ": " << tier.status().ToString();
    std::vector<BlockKey> found;
    std::vector<std::byte> out(kCrashBlockBytes);
    for (uint64_t i = 0; i < kCrashCapacityBlocks + kCrashBatch; ++i) {
      ReadOp rd{CrashKey(round, i), out};
      Completion c = (*tier)->Read(kCrashNs, std::span(&rd, 1));
      (void)c.Wait();
      const Status& st = c.result(0);
      if (st.ok()) {
        ASSERT_EQ(out, BlockBytes(CrashKey(round, i), kCrashBlockBytes, round))
            << "round " << round << " block " << i;
        found.push_back(CrashKey(round, i));
      } else {
        ASSERT_EQ(st.code(), StatusCode::kNotFound) << "round " << round << ": " << st.ToString();
        ASSERT_GE(i, committed) << "round " << round << ": committed block " << i << " lost";
      }
    }
    // Nothing else is indexed: earlier rounds were removed below.
    ASSERT_EQ((*tier)->Usage().blocks, found.size()) << "round " << round;
    ASSERT_EQ((*tier)->Stats().corruptions, 0u);
    ASSERT_TRUE((*tier)->Remove(kCrashNs, found).Wait().ok());
    (*tier)->Shutdown();
    total_committed += committed;
    total_found += found.size();
    rounds_with_writes += committed > 0;
  }
  std::printf(
      "crash test: 24 rounds, %llu with committed writes, %llu blocks committed, %llu "
      "found after the kills\n",
      static_cast<unsigned long long>(rounds_with_writes),
      static_cast<unsigned long long>(total_committed),
      static_cast<unsigned long long>(total_found));
  EXPECT_GE(rounds_with_writes, 6u) << "too few kills landed while writing";
}

}  // namespace
}  // namespace kvtier::testing
