// kvtier-inspect's live views against an admin endpoint that answers what a
// test chooses: documents of a foreign shape, zero-valued flags, and output
// that cannot be written.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/admin_server.h"
#include "tests/inspect/inspect_cli_util.h"
#include "tests/inspect/inspect_test_util.h"

namespace kvtier::testing {
namespace {

using nlohmann::json;

// An admin endpoint whose /stats body is `*body`.
class FakeRuntime {
 public:
  explicit FakeRuntime(const std::string& path) {
    auto s = internal::AdminServer::Start(
        path,
        [this](std::string_view) {
          std::lock_guard<std::mutex> l(mu_);
          ++answered_;
          return internal::AdminResponse{.body = body_};
        },
        nullptr);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) server_ = std::move(s).value();
  }
  void Answer(std::string body) {
    std::lock_guard<std::mutex> l(mu_);
    body_ = std::move(body);
  }
  uint64_t answered() {
    std::lock_guard<std::mutex> l(mu_);
    return answered_;
  }

 private:
  std::mutex mu_;
  std::string body_;
  uint64_t answered_ = 0;
  std::unique_ptr<internal::AdminServer> server_;  // last: stopped before the rest goes
};

class InspectLive : public ::testing::Test {
 protected:
  CliRun Inspect(const std::string& args) { return RunInspect(dir_.path(), args); }
  std::string Socket() const { return dir_.File("admin.sock"); }
  TempDir dir_;
};

// Every view either shows the document or says it is not a stats document:
// exit 1 with a message, never an abort.
TEST_F(InspectLive, ForeignDocumentsAreRefusedNotFatal) {
  FakeRuntime rt(Socket());
  const std::string refused =
      "kvtier-inspect: io_error: admin socket " + Socket() + ": /stats is not a stats document";
  auto run = [&](const std::string& body, const char* cmd, int rc) {
    rt.Answer(body);
    CliRun r = Inspect(std::string(cmd) + " --socket " + Socket());
    EXPECT_EQ(r.rc, rc) << cmd << " of " << body << ": " << r.err;
    if (rc == 0) {
      EXPECT_EQ(r.err, "") << cmd << " of " << body;
    } else {
      EXPECT_EQ(r.err.rfind(refused, 0), 0u) << cmd << " of " << body << ": " << r.err;
    }
  };
  for (const char* cmd : {"stats", "tiers", "top --interval-ms 1", "watch --count 1"}) {
    run(R"({"tiers":[1]})", cmd, 1);
  }
  // Nested deeper than any stats document: printing it back recursed once
  // per level and overflowed the stack.
  const std::string deep =
      R"({"tiers":[],"x":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  run(deep, "stats --json", 1);
  run(deep, "stats", 1);
  for (const char* body : {R"({"tiers":{}})", R"([1,2])", "nonsense", R"({"tiers":[],"moves":3})",
                           R"({"tiers":[],"errors":[[]]})", R"({"tiers":[],"save_latency":[]})"}) {
    run(body, "stats", 1);
  }
  // Of the right shape, with fields missing or of other types: shown as 0
  // or empty.
  for (const char* body : {R"({"tiers":[]})", R"({"tiers":[{}],"moves":[{}],"errors":[{}]})"}) {
    run(body, "stats", 0);
    run(body, "top --interval-ms 1", 0);
  }
  const std::string odd = R"({"tiers":[{"name":7,"type":null,"blocks":"x"}],
      "moves":[{"from":[],"to":{}}], "errors":[{"op":1,"code":2,"blocks":"3"}],
      "lookups":"many", "save_latency":{"count":2,"upper_bounds_s":"x","bucket_counts":[1,"y"]},
      "load_latency":{"count":1,"upper_bounds_s":[],"bucket_counts":[1]}})";
  for (const char* cmd :
       {"stats", "tiers", "top --interval-ms 1", "watch --count 1", "top --json --interval-ms 1"}) {
    run(odd, cmd, 0);
  }
}

// A reply far larger than any runtime's is cut off, not read into memory
// for as long as the peer sends.
TEST_F(InspectLive, AnOversizedReplyIsRefused) {
  FakeRuntime rt(Socket());
  rt.Answer(R"({"tiers":[],"x":")" + std::string(20u << 20, 'a') + R"("})");
  CliRun r = Inspect("stats --socket " + Socket());
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("the reply passed 16 MiB; not an admin endpoint"), std::string::npos)
      << r.err.substr(0, 300);
}

// watch follows a runtime to its end: one that shuts down (its socket file
// removed) ends the watch with success; one killed, whose file stays with
// nobody listening, ends it with exit 1.
TEST_F(InspectLive, WatchTellsAShutdownFromACrash) {
  for (const bool crash : {false, true}) {
    auto rt = std::make_unique<FakeRuntime>(Socket());
    rt->Answer(R"({"tiers":[]})");
    auto watch = std::async(std::launch::async, [&] {
      return Inspect("watch --json --interval-ms 20 --socket " + Socket());
    });
    // Once watch has shown a refresh (a sanitizer build starts it slowly).
    for (int i = 0; i < 1000 && rt->answered() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GT(rt->answered(), 0u);
    rt.reset();   // shut down: the file goes
    if (crash) ASSERT_TRUE(LeaveStaleSocket(Socket()));  // a file left behind, nobody listening
    ASSERT_EQ(watch.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    CliRun r = watch.get();
    if (crash) {
      EXPECT_EQ(r.rc, 1) << r.err;
      EXPECT_NE(r.err.find("left its socket file: it ended without shutting down"),
                std::string::npos)
          << r.err;
      ASSERT_EQ(unlink(Socket().c_str()), 0);
    } else {
      EXPECT_EQ(r.rc, 0) << r.err;
      EXPECT_NE(r.err.find("shut down after"), std::string::npos) << r.err;
    }
  }
}

// The value column of the table row labelled `label`; "" when none.
std::string Row(const std::string& text, const std::string& label) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(label + "  ", 0) != 0) continue;
    const size_t at = line.find_first_not_of(' ', label.size());
    return at == std::string::npos ? "" : line.substr(at);
  }
  return "";
}

// Every counter of the runtime has its row, so the save rows add up.
TEST_F(InspectLive, StatsShowsEveryCounter) {
  FakeRuntime rt(Socket());
  rt.Answer(R"({"tiers":[],"save_blocks":10,"saved_blocks":5,"save_duplicates":2,
                "save_failures":1,"save_not_admitted":2,"adopted_blocks":7})");
  CliRun r = Inspect("stats --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Row(r.out, "save not admitted"), "2") << r.out;
  EXPECT_EQ(Row(r.out, "adopted blocks"), "7") << r.out;
  EXPECT_EQ(Row(r.out, "save failures"), "1") << r.out;
}

// Numbers out of a counter's range are clamped: a negative or too large
// double cast to uint64 is undefined (-5 printed as 18446744073709551611).
TEST_F(InspectLive, CountsOutOfRangeAreClamped) {
  FakeRuntime rt(Socket());
  rt.Answer(R"({"tiers":[],"lookups":-5,"save_blocks":1e300,
                "moves":[{"from":"a","to":"b","blocks":1,"bytes":1e300}]})");
  CliRun r = Inspect("stats --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Row(r.out, "lookups"), "0") << r.out;
  EXPECT_EQ(Row(r.out, "save blocks"), "18446744073709551615") << r.out;
}

TEST_F(InspectLive, ZeroValuedFlagsAreUsageErrors) {
  FakeRuntime rt(Socket());
  rt.Answer(R"({"tiers":[]})");
  const std::string trace = dir_.File("t.jsonl");
  std::ofstream(trace) << R"({"timestamp": 0, "input_length": 512, "output_length": 1, )"
                       << R"("hash_ids": [1]})"
                       << "\n";
  for (const std::string& args :
       {"trace " + trace + " --block-tokens 0", "stats --timeout-ms 0 --socket " + Socket(),
        "watch --interval-ms 0 --count 2 --socket " + Socket(),
        "top --interval-ms 0 --socket " + Socket(),
        std::string("redis redis://127.0.0.1 summary --timeout-ms 0")}) {
    CliRun r = Inspect(args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_NE(r.err.find("not in range"), std::string::npos) << args << ": " << r.err;
  }
  EXPECT_EQ(Inspect("trace " + trace + " --block-tokens 512").rc, 0);
  EXPECT_EQ(Inspect("stats --timeout-ms 1000 --socket " + Socket()).rc, 0);
}

// CLI11 alone read "--count -1" as 2^64 - 1 refreshes and "--sample -5" as
// every key, both exit 0: every unsigned option is a usage error unless it
// is a whole number within its type.
TEST_F(InspectLive, NegativeAndOutOfRangeCountsAreUsageErrors) {
  const std::string nobody = " --socket " + dir_.File("nobody.sock");
  const std::pair<std::string, std::string> cases[] = {
      {"watch --count -1" + nobody,
       "--count: '-1' is not a whole number from 0 to "
       "18446744073709551615"},
      {"watch --count 18446744073709551616" + nobody, "--count: '18446744073709551616' is not"},
      {"watch --count +1" + nobody, "--count: '+1' is not"},
      {"redis redis://127.0.0.1:1 summary --sample -5",
       "--sample: '-5' is not a whole number from 0 to 18446744073709551615"},
      {"stats --timeout-ms -1" + nobody,
       "--timeout-ms: '-1' is not a whole number from 0 to 4294967295"},
      {"top --interval-ms -1" + nobody, "--interval-ms: '-1' is not"},
      {"trace x.jsonl --block-tokens -512", "--block-tokens: '-512' is not"},
      // A socket path longer than a Unix socket's was a runtime error (exit 1).
      {"tiers --socket /" + std::string(200, 'a'),
       "--socket: path of 201 bytes; expected 1 to 107"},
  };
  for (const auto& [args, why] : cases) {
    CliRun r = Inspect(args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_NE(r.err.find(why), std::string::npos) << args << ": " << r.err;
  }
}

// Output that cannot be written is a failure, not a silent success.
TEST_F(InspectLive, AFailedWriteToStdoutIsExitCode1) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  FakeRuntime rt(Socket());
  rt.Answer(R"({"tiers":[]})");
  for (const char* cmd : {"stats", "stats --json", "watch --json --count 2 --interval-ms 10"}) {
    const std::string line = "timeout 30 " + std::string(KVTIER_INSPECT_BIN) + " " + cmd +
                             " --socket " + Socket() + " >/dev/full 2>" + dir_.File("err");
    const int status = std::system(line.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << cmd;
    EXPECT_EQ(WEXITSTATUS(status), 1) << cmd;
    EXPECT_NE(SlurpFile(dir_.File("err")).find("kvtier-inspect: "), std::string::npos) << cmd;
  }
}

}  // namespace
}  // namespace kvtier::testing
