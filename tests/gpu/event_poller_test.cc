// The completion thread's failure results: a copy whose event fails names
// the copy, its layer (for a load) and the CUDA error, each once. The query
// of an event handle never created fails even without a driver, so these
// need no device (they skip where such a query does not fail). A `done`
// that throws leaves the thread serving.
#include "gpu/cuda/event_poller.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvtier::cuda {
namespace {

TEST(CopyNameTest, NamesTheDirectionTheBlockAndALoadsLayer) {
  EXPECT_EQ(CopyName(true, 7, std::nullopt), "cuda copy engine: save of engine block 7");
  EXPECT_EQ(CopyName(false, 7, std::nullopt), "cuda copy engine: load of engine block 7");
  EXPECT_EQ(CopyName(false, 9, 3u), "cuda copy engine: load of engine block 9 layer 3");
}

// Each case runs one copy of engine blocks 4, 5, 6 whose events all fail
// (null handles); block 5 had already failed while issuing.
class EventPollerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    err_ = cudaEventQuery(nullptr);
    cudaGetLastError();
    if (err_ == cudaSuccess || err_ == cudaErrorNotReady) {
      GTEST_SKIP() << "querying a null event does not fail here";
    }
  }

  std::string RunFailingCopy(bool per_layer) {
    std::promise<std::vector<Status>> got;
    std::vector<uint32_t> layers;
    {
      EventPoller poller(0, &health_);
      auto copy = std::make_unique<PendingCopy>();
      copy->events.resize(per_layer ? 2 : 1);
      copy->per_layer = per_layer;
      copy->on_layer = [&layers](uint32_t l) { layers.push_back(l); };
      copy->results.resize(3);
      copy->results[1] = Status::InvalidArgument("refused before issue");
      copy->blocks = {4, 5, 6};
      copy->done = [&got](std::vector<Status> r) { got.set_value(std::move(r)); };
      EXPECT_TRUE(poller.Add(copy));
    }                             // the destructor waits for `done`
    EXPECT_TRUE(layers.empty());  // the first event failed: no layer landed
    const std::vector<Status> results = got.get_future().get();
    std::string out;
    for (size_t i = 0; i < results.size(); ++i) out += (i ? " | " : "") + results[i].ToString();
    return out;
  }

  // Blocks 4 and 6, named `block4` and `block6`, fail with the event's error.
  std::string Expected(const std::string& block4, const std::string& block6) const {
    const std::string code(StatusCodeName(FromCuda(err_, "event").code()));
    const std::string cause = ": completion event: " + std::string(cudaGetErrorName(err_)) + ": " +
                              cudaGetErrorString(err_);
    return code + ": " + block4 + cause + " | invalid_argument: refused before issue | " + code +
           ": " + block6 + cause;
  }

  cudaError_t err_ = cudaSuccess;
  DeviceHealth health_;
};

TEST_F(EventPollerTest, FailedLoadEventNamesEachLiveCopyAndTheLayerOnce) {
  EXPECT_EQ(RunFailingCopy(/*per_layer=*/true),
            Expected("cuda copy engine: load of engine block 4 layer 0",
                     "cuda copy engine: load of engine block 6 layer 0"));
  EXPECT_EQ(health_.Lost().ok(), !IsStickyError(err_));
}

TEST_F(EventPollerTest, FailedSaveEventNamesEachLiveCopyWithoutALayer) {
  EXPECT_EQ(RunFailingCopy(/*per_layer=*/false),
            Expected("cuda copy engine: save of engine block 4",
                     "cuda copy engine: save of engine block 6"));
}

// `done` is the caller's code: one that throws must not end the completion
// thread (std::terminate), and later copies still complete.
TEST_F(EventPollerTest, ADoneThatThrowsLeavesTheThreadServing) {
  std::promise<Status> second;
  {
    EventPoller poller(0, &health_);
    for (int i = 0; i < 2; ++i) {
      auto copy = std::make_unique<PendingCopy>();
      copy->events.resize(1);
      copy->results.resize(1);
      copy->blocks = {static_cast<uint32_t>(i)};
      if (i == 0) {
        copy->done = [](std::vector<Status>) { throw std::runtime_error("caller bug"); };
      } else {
        copy->done = [&second](std::vector<Status> r) { second.set_value(r.at(0)); };
      }
      ASSERT_TRUE(poller.Add(copy));
      EXPECT_EQ(copy, nullptr) << "an added copy belongs to the poller";
    }
  }  // the destructor waits for both
  const Status got = second.get_future().get();
  EXPECT_NE(got.ToString().find("cuda copy engine: save of engine block 1: completion event"),
            std::string::npos)
      << got.ToString();
}

}  // namespace
}  // namespace kvtier::cuda
