// kvtier-bench replay: how a load's blocks are counted, the --timeout-ms
// range, and the report's rates.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/bench/replay.h"
#include "tools/bench/report.h"

namespace kvtier::bench {
namespace {

Completion Finished(const std::vector<Status>& results) {
  CompletionSource src(results.size());
  for (size_t i = 0; i < results.size(); ++i) src.Set(i, results[i]);
  Completion c = src.completion();
  src.Finish();
  return c;
}

// Every block that loaded OK is verified, past the first failure too; only
// the leading verified blocks are hits.
TEST(ReplayTallyTest, EveryLoadedBlockIsVerified) {
  const Completion load = Finished({Status::Ok(), Status::Ok(), Status::NotFound("gone"),
                                    Status::Ok(), Status::Ok(), Status::Ok()});
  std::vector<size_t> checked;
  const LoadTally t = TallyLoad(load, [&](size_t i) {
    checked.push_back(i);
    return i != 1 && i != 4;  // blocks 1 and 4 hold wrong bytes
  });
  EXPECT_EQ(checked, (std::vector<size_t>{0, 1, 3, 4, 5}));
  EXPECT_EQ(t.leading_hits, 1u);
  EXPECT_EQ(t.verify_failures, 2u);
  EXPECT_EQ(t.load_failures, 1u);
  EXPECT_EQ(t.verified, 3u);
}

TEST(ReplayTallyTest, AFailedFirstBlockStillLeavesTheRestChecked) {
  const Completion load = Finished({Status::IOError("disk"), Status::Ok(), Status::Ok()});
  int calls = 0;
  const LoadTally t = TallyLoad(load, [&](size_t i) {
    ++calls;
    return i != 2;
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(t.leading_hits, 0u);
  EXPECT_EQ(t.verify_failures, 1u);
  EXPECT_EQ(t.load_failures, 1u);
  EXPECT_EQ(t.verified, 1u);
}

// -1 on the command line wraps to 2^64-1; a day is far beyond any load.
TEST(ReplayOptionsTest, TimeoutAboveADayIsRefused) {
  ReplayOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.timeout_ms = kMaxReplayTimeoutMs;
  EXPECT_TRUE(o.Validate().ok());
  for (uint64_t bad : {kMaxReplayTimeoutMs + 1, UINT64_MAX, UINT64_MAX / 1000}) {
    o.timeout_ms = bad;
    Status st = o.Validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message(), "--timeout-ms " + std::to_string(bad) +
                                " is out of range; expected at most 86400000 (one day)");
    // ReplayTrace checks it before it opens a runtime.
    KvtierConfig config;
    Result<ReplayReport> r = ReplayTrace(config, Trace(), o);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--timeout-ms"), std::string_view::npos)
        << r.status().ToString();
  }
}

// GB/s of loads and saves are over the time inside Load/Save and their waits,
// not over the whole loop (which also hashes, fills and compares).
TEST(ReplayReportTest, RatesAreOverLoadAndSaveTime) {
  ReplayReport r;
  r.elapsed_s = 10;
  r.bytes_loaded = 3'000'000'000;
  r.load_s = 1.5;
  r.bytes_saved = 1'000'000'000;
  r.save_s = 0.25;
  r.requests = 9;
  r.hit_requests = 4;
  const std::string text = FormatReplayReport(r);
  EXPECT_NE(text.find("requests:       9, 4 reused a prefix (skipped 0,"), std::string::npos)
      << text;
  EXPECT_NE(text.find("(2.000 GB/s over 1.500 s in Load+Wait)"), std::string::npos) << text;
  EXPECT_NE(text.find("(4.000 GB/s over 0.250 s in Save+Wait)"), std::string::npos) << text;
  const std::string json = ReplayReportJson(r);
  EXPECT_NE(json.find("\"load_s\":1.5,\"save_s\":0.25"), std::string::npos) << json;
  // Every count of the text is in the JSON too.
  EXPECT_NE(json.find("\"skipped_requests\":0,\"skipped_blocks\":0,\"hit_requests\":4,"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"planned_requests\":0,"), std::string::npos) << json;
}

// The checkpoint lines appear for hybrid models only.
TEST(ReplayReportTest, CheckpointLinesForHybridModelsOnly) {
  ReplayReport r;
  EXPECT_EQ(FormatReplayReport(r).find("checkpoints:"), std::string::npos);
  r.state_blocks = 4;
  r.checkpoints_offered = 10;
  r.checkpoints_saved = 7;
  r.checkpoints_unstored = 1;
  r.state_resumes = 3;
  r.state_load_failures = 2;
  r.state_bytes_loaded = 3 * kMiB;
  r.state_bytes_saved = 7 * kMiB;
  const std::string text = FormatReplayReport(r);
  EXPECT_NE(
      text.find("checkpoints:    7 saved of 10 offered (1 with their block not stored), 3 resumed "
                "from, 2 failed to load, 4 blocks each\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("of which state: 3MiB loaded, 7MiB saved\n"), std::string::npos) << text;
  const std::string json = ReplayReportJson(r);
  EXPECT_NE(json.find("\"state_blocks\":4,\"checkpoints_offered\":10,\"checkpoints_saved\":7,"
                      "\"checkpoints_unstored\":1,\"state_resumes\":3,\"state_load_failures\":2"),
            std::string::npos)
      << json;
}

TEST(ReplayReportTest, ExitCodeFlagsWrongBytesAndFailures) {
  ReplayReport r;
  EXPECT_EQ(ReplayExitCode(r), 0);
  r.load_failures = 1;
  EXPECT_EQ(ReplayExitCode(r), 3);
  r.load_failures = 0;
  r.save_failures = 2;
  EXPECT_EQ(ReplayExitCode(r), 3);
  r.save_failures = 0;
  r.lookup_failures = 1;
  EXPECT_EQ(ReplayExitCode(r), 3);
  r.verify_failures = 1;  // wrong bytes outrank every other failure
  EXPECT_EQ(ReplayExitCode(r), 1);
}

}  // namespace
}  // namespace kvtier::bench
