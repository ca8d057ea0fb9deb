// The C API's bookkeeping calls: statistics as JSON, removes, IsSaved, the
// engine's finish reports, and the GPU pool's admission and preemption.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/capi/c_api_test_util.h"

namespace kvtier::testing {
namespace {

TEST(CApiPoolTest, StatsJsonCountsSavesAndIsSizedByTheCaller) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 3, 1);
  ASSERT_EQ(SaveBlocks(rt.get(), keys, {0, 1, 2}), KVTIER_OK);
  size_t length = 0;
  ASSERT_EQ(kvtier_stats_json(rt.get(), nullptr, 0, &length), KVTIER_RESOURCE_EXHAUSTED);
  ASSERT_GT(length, 20u);
  std::string json(length + 1, 'x');
  ASSERT_EQ(kvtier_stats_json(rt.get(), json.data(), json.size(), &length), KVTIER_OK);
  EXPECT_EQ(json[length], '\0');
  json.resize(length);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_NE(json.find("\"saved_blocks\":3"), std::string::npos) << json;

  char small[10];
  size_t small_length = 0;
  EXPECT_EQ(kvtier_stats_json(rt.get(), small, sizeof small, &small_length),
            KVTIER_RESOURCE_EXHAUSTED);
  EXPECT_EQ(small_length, length);
  EXPECT_EQ(std::string(small), json.substr(0, 9));  // truncated, NUL-terminated
}

TEST(CApiPoolTest, MetricsTextIsThePrometheusExposition) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 2, 1);
  ASSERT_EQ(SaveBlocks(rt.get(), keys, {0, 1}), KVTIER_OK);
  size_t length = 0;
  ASSERT_EQ(kvtier_metrics_text(rt.get(), nullptr, 0, &length), KVTIER_RESOURCE_EXHAUSTED);
  std::string text(length + 1, 'x');
  ASSERT_EQ(kvtier_metrics_text(rt.get(), text.data(), text.size(), &length), KVTIER_OK);
  text.resize(length);
  EXPECT_NE(text.find("# TYPE kvtier_saved_blocks_total counter\nkvtier_saved_blocks_total 2\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(kvtier_metrics_text(rt.get(), text.data(), 4, nullptr), KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: length is NULL");
}

TEST(CApiPoolTest, BypassAdmissionStoresWhatTheHubWouldRefuse) {
  // The hub admits a block on its second sighting only; nothing was looked up.
  RuntimePtr rt = OpenText(CapiConfig("1MiB") + "    admission: [frequency]\n");
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> refused = ChainOf(rt.get(), 2, 10);
  const std::vector<kvtier_key> forced = ChainOf(rt.get(), 2, 20);
  ASSERT_EQ(SaveBlocks(rt.get(), refused, {0, 1}), KVTIER_OK);  // not admitted is not an error
  int saved = 1;
  ASSERT_EQ(kvtier_is_saved(rt.get(), refused.data(), 2, &saved), KVTIER_OK);
  EXPECT_EQ(saved, 0);

  kvtier_hints hints{};
  hints.bypass_admission = 1;
  const uint32_t blocks[] = {2, 3};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_save(rt.get(), nullptr, forced.data(), blocks, 2, &hints, &c), KVTIER_OK);
  CompletionPtr save(c);
  ASSERT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK);
  ASSERT_EQ(kvtier_is_saved(rt.get(), forced.data(), 2, &saved), KVTIER_OK);
  EXPECT_EQ(saved, 1);
}

TEST(CApiPoolTest, RemoveKeepsChainsWhole) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 2, 50);
  ASSERT_EQ(SaveBlocks(rt.get(), keys, {0, 1}), KVTIER_OK);
  int saved = 0;
  ASSERT_EQ(kvtier_is_saved(rt.get(), keys.data(), 2, &saved), KVTIER_OK);
  EXPECT_EQ(saved, 1);
  EXPECT_EQ(kvtier_remove(rt.get(), keys.data(), 1), KVTIER_INVALID_ARGUMENT);  // child kept
  ASSERT_EQ(kvtier_remove(rt.get(), keys.data(), 2), KVTIER_OK) << kvtier_last_error();
  ASSERT_EQ(kvtier_is_saved(rt.get(), keys.data(), 2, &saved), KVTIER_OK);
  EXPECT_EQ(saved, 0);
  size_t hits = 9;
  ASSERT_EQ(kvtier_lookup(rt.get(), keys.data(), 2, nullptr, &hits, nullptr), KVTIER_OK);
  EXPECT_EQ(hits, 0u);
  EXPECT_EQ(kvtier_request_finished(rt.get(), keys.data(), 2, 120), KVTIER_OK);
}

TEST(CApiPoolTest, AdmissionAndPreemptionFollowTheWatermark) {
  RuntimePtr rt = OpenText(CapiConfig("1MiB", "runtime:\n  gpu_watermark: 0.1\n"));
  ASSERT_TRUE(rt);
  EXPECT_EQ(kvtier_should_admit(rt.get(), 1000), 1);  // nothing reported yet
  EXPECT_EQ(kvtier_report_engine_usage(rt.get(), 5, 4), KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(),
               "invalid_argument: engine usage: free_blocks 5 exceeds total_blocks 4");
  ASSERT_EQ(kvtier_report_engine_usage(rt.get(), 30, 100), KVTIER_OK);
  EXPECT_EQ(kvtier_should_admit(rt.get(), 20), 1);  // leaves 10 % free
  EXPECT_EQ(kvtier_should_admit(rt.get(), 21), 0);

  // Request 1's first two blocks are stored, request 2's are not: 1 is
  // cheaper to restore and comes first.
  const std::vector<kvtier_key> one = ChainOf(rt.get(), 2, 1000);
  const std::vector<kvtier_key> two = ChainOf(rt.get(), 2, 2000);
  ASSERT_EQ(SaveBlocks(rt.get(), one, {0, 1}), KVTIER_OK);
  ASSERT_EQ(kvtier_track_request(rt.get(), 1, one.data(), 2, 4), KVTIER_OK);
  ASSERT_EQ(kvtier_track_request(rt.get(), 2, two.data(), 2, 4), KVTIER_OK);
  EXPECT_EQ(kvtier_track_request(rt.get(), 3, two.data(), 2, 1), KVTIER_INVALID_ARGUMENT);

  uint64_t ids[2] = {0, 0};
  size_t count = 0;
  ASSERT_EQ(kvtier_propose_preemption(rt.get(), 4, ids, 2, &count), KVTIER_OK);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(ids[0], 1u);
  ASSERT_EQ(kvtier_propose_preemption(rt.get(), 8, ids, 2, &count), KVTIER_OK);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(ids[0], 1u);
  EXPECT_EQ(ids[1], 2u);
  uint64_t first = 0;
  EXPECT_EQ(kvtier_propose_preemption(rt.get(), 8, &first, 1, &count), KVTIER_RESOURCE_EXHAUSTED);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(first, 1u);
  kvtier_untrack_request(rt.get(), 1);
  ASSERT_EQ(kvtier_propose_preemption(rt.get(), 4, ids, 2, &count), KVTIER_OK);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(ids[0], 2u);
}

}  // namespace
}  // namespace kvtier::testing
