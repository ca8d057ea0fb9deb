// RunCommand: the peer tools' runner. No shell: arguments arrive as given.
#include "tools/bench/run_command.h"

#include <gtest/gtest.h>

#include <chrono>

namespace kvtier::bench {
namespace {

using std::chrono::milliseconds;

TEST(RunCommandTest, ArgumentsArriveUnparsed) {
  Result<CommandResult> r =
      RunCommand({"printf", "%s|%s", "it's a \"test\"", "$(echo no); `x` *"}, milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->output, "it's a \"test\"|$(echo no); `x` *");
}

TEST(RunCommandTest, ExitCodesAndMissingCommands) {
  Result<CommandResult> r = RunCommand({"sh", "-c", "echo partial; exit 3"}, milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->output, "partial\n");
  r = RunCommand({"/nonexistent/kvtier-no-such-tool"}, milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 127);
  EXPECT_EQ(RunCommand({}, milliseconds(5000)).status().code(), StatusCode::kInvalidArgument);
}

// A command that exits while a process it started keeps its stdout open has
// finished: it was reported as past its timeout, waiting for end of file.
TEST(RunCommandTest, ACommandThatLeavesAProcessHoldingItsOutputHasFinished) {
  auto r = RunCommand({"sh", "-c", "echo hi; sleep 3 & exit 0"}, milliseconds(2000));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->output, "hi\n");
}

TEST(RunCommandTest, ACommandPastItsTimeoutIsKilled) {
  const auto start = std::chrono::steady_clock::now();
  Result<CommandResult> r = RunCommand({"sleep", "10"}, milliseconds(100));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("sleep did not finish within 100 ms"), std::string::npos)
      << r.status().message();
  // Closing stdout early does not end the wait before the command exits.
  r = RunCommand({"sh", "-c", "exec >&-; exec sleep 10"}, milliseconds(100));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace kvtier::bench
