// The C API's errors: config problems at open, NULL arguments, the
// per-thread message, code names, and exceptions turned into codes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "capi/c_api_internal.h"
#include "kvtier/build_config.h"
#include "kvtier/status.h"
#include "tests/capi/c_api_test_util.h"

namespace kvtier::testing {
namespace {

bool LastErrorHas(const std::string& part) {
  return std::string(kvtier_last_error()).find(part) != std::string::npos;
}

TEST(CApiErrorsTest, CodesAndNamesAreTheStatusCodes) {
  static_assert(KVTIER_NOT_FOUND == static_cast<int>(StatusCode::kNotFound));
  static_assert(KVTIER_CORRUPTION == static_cast<int>(StatusCode::kCorruption));
  static_assert(KVTIER_INTERNAL == static_cast<int>(StatusCode::kInternal));
  for (int code = KVTIER_OK; code <= KVTIER_INTERNAL; ++code) {
    EXPECT_EQ(kvtier_code_name(code), StatusCodeName(static_cast<StatusCode>(code)));
  }
  EXPECT_STREQ(kvtier_code_name(KVTIER_DEADLINE_EXCEEDED), "deadline_exceeded");
  EXPECT_STREQ(kvtier_code_name(-1), "unknown");
  EXPECT_STREQ(kvtier_code_name(KVTIER_INTERNAL + 1), "unknown");
}

TEST(CApiErrorsTest, VersionsAreTheHeadersAndTheBuilds) {
  EXPECT_EQ(kvtier_c_api_version(), KVTIER_C_API_VERSION);
  EXPECT_STREQ(kvtier_version_string(), KVTIER_VERSION_STRING);
}

TEST(CApiErrorsTest, OpenNeedsExactlyOneConfig) {
  kvtier_runtime* rt = reinterpret_cast<kvtier_runtime*>(1);
  const std::string yaml = CapiConfig();
  EXPECT_EQ(kvtier_open(nullptr, nullptr, nullptr, 0, nullptr, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(rt, nullptr);
  EXPECT_STREQ(kvtier_last_error(),
               "invalid_argument: exactly one of config_path and config_text must be set");
  EXPECT_EQ(kvtier_open("x.yaml", yaml.c_str(), nullptr, 0, nullptr, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, nullptr, nullptr, nullptr, nullptr),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: out is NULL");
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 2, nullptr, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: overrides is NULL");
  const char* overrides[] = {"mover.interval_ms=5", nullptr};
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), overrides, 2, nullptr, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: overrides[1] is NULL");
  EXPECT_EQ(rt, nullptr);
}

TEST(CApiErrorsTest, ConfigErrorsNameTheirPlace) {
  kvtier_runtime* rt = nullptr;
  const std::string bad = "tiers:\n  - name: host\n    type: hots\n    capacity: 1MiB\n";
  EXPECT_EQ(kvtier_open(nullptr, bad.c_str(), nullptr, 0, nullptr, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorHas("config_text:3:11: ")) << kvtier_last_error();
  EXPECT_EQ(rt, nullptr);

  EXPECT_EQ(
      kvtier_open("/nonexistent/kvtier.yaml", nullptr, nullptr, 0, nullptr, nullptr, nullptr, &rt),
      KVTIER_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorHas("/nonexistent/kvtier.yaml: cannot open")) << kvtier_last_error();

  const std::string yaml = CapiConfig();
  const char* overrides[] = {"tiers.host.capacity=lots"};
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), overrides, 1, nullptr, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorHas("--set tiers.host.capacity=lots")) << kvtier_last_error();
}

TEST(CApiErrorsTest, OpensAFileWithOverrides) {
  const std::string path = ::testing::TempDir() + "/c_api_config.yaml";
  std::ofstream(path) << CapiConfig();
  const char* overrides[] = {"tiers.host.capacity=2MiB", "model.layers=2"};
  kvtier_runtime* raw = nullptr;
  ASSERT_EQ(kvtier_open(path.c_str(), nullptr, overrides, 2, nullptr, nullptr, nullptr, &raw),
            KVTIER_OK)
      << kvtier_last_error();
  RuntimePtr rt(raw);
  EXPECT_EQ(kvtier_block_bytes(rt.get()), 4096u);  // two layers instead of four
  char json[8192];
  size_t length = 0;
  ASSERT_EQ(kvtier_stats_json(rt.get(), json, sizeof json, &length), KVTIER_OK);
  EXPECT_NE(std::string(json).find("\"capacity_bytes\":2097152"), std::string::npos) << json;
  std::remove(path.c_str());
}

TEST(CApiErrorsTest, CudaCacheErrorsComeBackAsCodes) {
  const std::string yaml = CapiConfig();
  kvtier_runtime* rt = nullptr;
  kvtier_cuda_cache cache{};
  cache.num_tensors = 4;
  cache.num_blocks = 16;
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: cuda.tensors is NULL");
  // Host pointers are no engine cache: refused with or without a GPU, and
  // NotSupported in a build or on a machine without CUDA.
  static char fake[4][64];
  void* tensors[4] = {fake[0], fake[1], fake[2], fake[3]};
  cache.tensors = tensors;
  const int code = kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &rt);
  EXPECT_TRUE(code == KVTIER_NOT_SUPPORTED || code == KVTIER_INVALID_ARGUMENT)
      << kvtier_code_name(code) << ": " << kvtier_last_error();
  EXPECT_EQ(rt, nullptr);
}

TEST(CApiErrorsTest, CudaTensorShapesAreCheckedAgainstTheModel) {
  // The tiny model in the nhd layout: per layer (2, N, T=16, H=2, D=16).
  const std::string yaml = CapiConfig();
  static char fake[4][64];
  void* tensors[4] = {fake[0], fake[1], fake[2], fake[3]};
  kvtier_cuda_cache cache{};
  cache.tensors = tensors;
  cache.num_tensors = 4;
  kvtier_runtime* rt = nullptr;
  const uint64_t right_shape[] = {2, 16, 16, 2, 16};
  const uint64_t other_heads[] = {2, 16, 16, 8, 16};  // 8 heads where the model has 2
  cache.shape = other_heads;
  cache.shape_rank = 5;
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(),
               "invalid_argument: cuda tensors hold nhd:L4:H8:D16:T16:E2 with 16 blocks, but the "
               "config's model is nhd:L4:H2:D16:T16:E2 with 16 blocks; make the model section "
               "describe the engine's cache");
  const uint64_t hnd_order[] = {2, 16, 2, 16, 16};  // an hnd cache (2, N, H, T, D)
  cache.shape = hnd_order;
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvtier_last_error()).find("cuda tensors hold nhd:L4:H16:D16:T2:E2"),
            std::string::npos)
      << kvtier_last_error();
  cache.num_blocks = 8;  // the shape says 16
  cache.shape = right_shape;
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvtier_last_error())
                .find("with 16 blocks, but the config's model is "
                      "nhd:L4:H2:D16:T16:E2 with 8 blocks"),
            std::string::npos)
      << kvtier_last_error();
  const uint64_t wrong_rank[] = {16, 16, 2, 16};
  cache.shape = wrong_rank;
  cache.shape_rank = 4;
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  cache.shape = nullptr;
  EXPECT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &rt),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: cuda.shape is NULL");
  // The right shape passes the check (num_blocks from it), then meets CUDA.
  cache.shape = right_shape;
  cache.shape_rank = 5;
  cache.num_blocks = 0;
  const int code = kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &rt);
  EXPECT_EQ(std::string(kvtier_last_error()).find("cuda tensors hold"), std::string::npos)
      << kvtier_last_error();
  EXPECT_NE(code, KVTIER_OK);  // host memory is no device cache
  EXPECT_EQ(rt, nullptr);
}

TEST(CApiErrorsTest, NullArgumentsAreRefusedByName) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  kvtier_runtime* r = rt.get();
  const kvtier_key key{1, 2};
  const uint32_t block = 0;
  const int32_t token = 5;
  size_t n = 0;
  int flag = 0;
  kvtier_completion* c = nullptr;
  kvtier_key out{};
  struct Case {
    std::function<int()> call;
    const char* message;
  };
  const Case cases[] = {
      {[&] { return kvtier_lookup(nullptr, &key, 1, nullptr, &n, nullptr); }, "runtime is NULL"},
      {[&] { return kvtier_lookup(r, nullptr, 1, nullptr, &n, nullptr); }, "keys is NULL"},
      {[&] { return kvtier_lookup(r, &key, 1, nullptr, nullptr, nullptr); }, "hit_blocks is NULL"},
      {[&] { return kvtier_save(r, nullptr, &key, nullptr, 1, nullptr, &c); },
       "engine_blocks is NULL"},
      {[&] { return kvtier_save(r, nullptr, &key, &block, 1, nullptr, nullptr); }, "out is NULL"},
      {[&] { return kvtier_load(r, &key, nullptr, 1, -1, nullptr, nullptr, &c); },
       "engine_blocks is NULL"},
      {[&] { return kvtier_load(nullptr, &key, &block, 1, -1, nullptr, nullptr, &c); },
       "runtime is NULL"},
      {[&] { return kvtier_save_state(r, nullptr, &block, 1, nullptr, &c); }, "boundary is NULL"},
      {[&] { return kvtier_save_state(r, &key, nullptr, 2, nullptr, &c); },
       "engine_blocks is NULL"},
      {[&] { return kvtier_save_state(r, &key, &block, 1, nullptr, nullptr); }, "out is NULL"},
      {[&] { return kvtier_load_state(r, nullptr, &block, 1, -1, &c); }, "boundary is NULL"},
      {[&] { return kvtier_load_state(nullptr, &key, &block, 1, -1, &c); }, "runtime is NULL"},
      {[&] { return kvtier_remove(r, nullptr, 1); }, "keys is NULL"},
      {[&] { return kvtier_is_saved(r, &key, 1, nullptr); }, "saved is NULL"},
      {[&] { return kvtier_request_finished(r, nullptr, 3, 10); }, "keys is NULL"},
      {[&] { return kvtier_track_request(r, 1, nullptr, 2, 4); }, "keys is NULL"},
      {[&] { return kvtier_report_engine_usage(nullptr, 1, 2); }, "runtime is NULL"},
      {[&] { return kvtier_propose_preemption(r, 1, nullptr, 4, &n); }, "request_ids is NULL"},
      {[&] { return kvtier_propose_preemption(r, 1, nullptr, 0, nullptr); }, "count is NULL"},
      {[&] { return kvtier_key_chain(r, nullptr, nullptr, 16, nullptr, 0, &n); }, "tokens is NULL"},
      {[&] { return kvtier_key_chain_extra(r, nullptr, &token, 1, nullptr, 4, nullptr, 0, &n); },
       "extra is NULL"},
      {[&] { return kvtier_key_from_engine_hash(r, nullptr, nullptr, 8, &out); }, "hash is NULL"},
      {[&] { return kvtier_key_from_engine_hash(r, nullptr, &flag, 4, nullptr); }, "out is NULL"},
      {[&] { return kvtier_stats_json(r, nullptr, 10, &n); }, "buffer is NULL"},
      {[&] { return kvtier_host_block_write(r, 0, nullptr, 8192); }, "data is NULL"},
      {[&] { return kvtier_host_block_read(nullptr, 0, &flag, 4); }, "runtime is NULL"},
      {[&] { return kvtier_completion_wait(nullptr, -1); }, "completion is NULL"},
      {[&] { return kvtier_completion_result(nullptr, 0, nullptr); }, "completion is NULL"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(cases[i].call(), KVTIER_INVALID_ARGUMENT) << "case " << i;
    EXPECT_EQ(kvtier_last_error(), std::string("invalid_argument: ") + cases[i].message)
        << "case " << i;
  }
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(kvtier_should_admit(nullptr, 1), 0);
  EXPECT_EQ(kvtier_completion_done(nullptr), 0);
  EXPECT_EQ(kvtier_completion_size(nullptr), 0u);
  EXPECT_EQ(kvtier_completion_layers_done(nullptr), 0u);
  EXPECT_EQ(kvtier_namespace(nullptr), 0u);
  EXPECT_EQ(kvtier_block_bytes(nullptr), 0u);
  EXPECT_EQ(kvtier_engine_blocks(nullptr), 0u);
  EXPECT_EQ(kvtier_state_blocks(nullptr), 0u);
  kvtier_completion_free(nullptr);
  kvtier_close(nullptr);
  kvtier_untrack_request(nullptr, 1);
}

TEST(CApiErrorsTest, LastErrorIsPerThreadAndSurvivesSuccess) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  size_t n = 0;
  ASSERT_EQ(kvtier_lookup(rt.get(), nullptr, 1, nullptr, &n, nullptr), KVTIER_INVALID_ARGUMENT);
  const kvtier_key key{3, 4};
  ASSERT_EQ(kvtier_lookup(rt.get(), &key, 1, nullptr, &n, nullptr), KVTIER_OK);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: keys is NULL");
  std::string other = "unset";
  std::thread([&] { other = kvtier_last_error(); }).join();
  EXPECT_EQ(other, "");
}

TEST(CApiErrorsTest, HostBlocksAreCheckedAndResultsBounded) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  std::vector<unsigned char> block(8192);
  EXPECT_EQ(kvtier_host_block_write(rt.get(), 0, block.data(), 100), KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(kvtier_host_block_read(rt.get(), 16, block.data(), block.size()),
            KVTIER_INVALID_ARGUMENT);  // the pool has 16 pages
  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 1, 3);
  const uint32_t page = 0;
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_save(rt.get(), nullptr, keys.data(), &page, 1, nullptr, &c), KVTIER_OK);
  CompletionPtr save(c);
  ASSERT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK);
  uint64_t bytes = 5;
  EXPECT_EQ(kvtier_completion_result(c, 1, &bytes), KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 0u);
  EXPECT_STREQ(kvtier_last_error(), "invalid_argument: result 1 of a completion of 1");
  // An engine block out of range fails that block, not the call.
  const uint32_t far = 99;
  ASSERT_EQ(kvtier_load(rt.get(), keys.data(), &far, 1, -1, nullptr, nullptr, &c), KVTIER_OK);
  CompletionPtr load(c);
  EXPECT_EQ(kvtier_completion_wait(c, -1), KVTIER_INVALID_ARGUMENT);
}

// A call refused before it could list its blocks (out of memory: the
// runtime answers with a completion of no items) answers every block with
// its refusal, not "out of range": an engine walking the results recomputes
// them all.
TEST(CApiErrorsTest, ACallRefusedBeforeListingItsBlocksAnswersEachWithTheRefusal) {
  kvtier_completion refused{
      CompletionSource::Done(0, Status::ResourceExhausted("load: out of memory for the request"))};
  ASSERT_EQ(kvtier_completion_size(&refused), 0u);
  for (size_t i : {size_t{0}, size_t{3}}) {
    uint64_t bytes = 5;
    EXPECT_EQ(kvtier_completion_result(&refused, i, &bytes), KVTIER_RESOURCE_EXHAUSTED) << i;
    EXPECT_EQ(bytes, 0u);
    EXPECT_STREQ(kvtier_last_error(), "resource_exhausted: load: out of memory for the request");
  }
  kvtier_completion empty{CompletionSource::Done(0, Status::Ok())};  // a call of no blocks
  EXPECT_EQ(kvtier_completion_result(&empty, 0, nullptr), KVTIER_INVALID_ARGUMENT);
}

TEST(CApiErrorsTest, LogLinesFromInfoUpReachTheCallbackTerminated) {
  std::vector<std::pair<int, std::string>> lines;
  auto collect = [](void* user, int level, const char* message) {
    static_cast<std::vector<std::pair<int, std::string>>*>(user)->emplace_back(level, message);
  };
  capi::CallbackLogSink sink(collect, &lines);
  sink.Log(LogLevel::kDebug, "chatty");
  sink.Log(LogLevel::kInfo, "hello");
  const std::string long_line(300, 'x');
  sink.Log(LogLevel::kWarning, std::string_view(long_line).substr(0, 5));  // not terminated
  sink.Log(LogLevel::kError, "bad");
  const std::vector<std::pair<int, std::string>> expected = {
      {KVTIER_LOG_INFO, "hello"}, {KVTIER_LOG_WARNING, "xxxxx"}, {KVTIER_LOG_ERROR, "bad"}};
  EXPECT_EQ(lines, expected);
}

TEST(CApiErrorsTest, ACountNoMemoryCouldHoldIsRefusedByName) {
  RuntimePtr rt = OpenText(CapiConfig());
  ASSERT_TRUE(rt);
  const kvtier_key key{1, 2};
  const uint32_t block = 0;
  size_t hits = 7;
  kvtier_completion* c = nullptr;
  // A negative count cast to size_t: it was "internal: cannot create
  // std::vector larger than max_size()".
  const size_t huge = SIZE_MAX;
  EXPECT_EQ(kvtier_lookup(rt.get(), &key, huge, nullptr, &hits, nullptr), KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(
      std::string(kvtier_last_error()),
      "invalid_argument: num_keys is " + std::to_string(huge) + ", more keys than memory can hold");
  EXPECT_EQ(hits, 0u);
  EXPECT_EQ(kvtier_save(rt.get(), nullptr, &key, &block, huge, nullptr, &c),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(kvtier_load(rt.get(), &key, &block, size_t{1} << 62, -1, nullptr, nullptr, &c),
            KVTIER_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorHas("num_keys is 4611686018427387904")) << kvtier_last_error();
  EXPECT_EQ(kvtier_remove(rt.get(), &key, huge), KVTIER_INVALID_ARGUMENT);
  // A checkpoint's engine blocks: the state calls took such a count as the
  // size of their answer.
  EXPECT_EQ(kvtier_save_state(rt.get(), &key, &block, huge, nullptr, &c), KVTIER_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorHas("more than memory can hold")) << kvtier_last_error();
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(kvtier_load_state(rt.get(), &key, &block, huge, -1, &c), KVTIER_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
}

TEST(CApiErrorsTest, ExceptionsBecomeCodes) {
  EXPECT_EQ(capi::Guard([]() -> Status { throw std::runtime_error("boom"); }), KVTIER_INTERNAL);
  EXPECT_STREQ(kvtier_last_error(), "internal: boom");
  EXPECT_EQ(capi::Guard([]() -> Status { throw std::bad_alloc(); }), KVTIER_RESOURCE_EXHAUSTED);
  EXPECT_STREQ(kvtier_last_error(), "resource_exhausted: out of memory");
  EXPECT_EQ(capi::Guard([]() -> Status { throw std::length_error("vector too long"); }),
            KVTIER_RESOURCE_EXHAUSTED);
  EXPECT_STREQ(kvtier_last_error(), "resource_exhausted: out of memory: vector too long");
  EXPECT_EQ(capi::Guard([]() -> Status { throw 7; }), KVTIER_INTERNAL);
  EXPECT_STREQ(kvtier_last_error(), "internal: unknown exception");
  EXPECT_EQ(capi::Guard([] { return Status::Busy("queue full"); }), KVTIER_BUSY);
  EXPECT_STREQ(kvtier_last_error(), "busy: queue full");
}

}  // namespace
}  // namespace kvtier::testing
