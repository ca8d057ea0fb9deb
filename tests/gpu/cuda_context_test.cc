// What the CUDA copy engine leaves on a caller's thread, and which compute
// streams it accepts, as plain logic tested without a device: ScopedDevice
// over fake context calls (it must give the thread back exactly the context
// it had, none included), and the check of the compute stream's device.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/engine_checks.h"
#include "kvtier/status.h"

namespace kvtier::cuda {
namespace {

CUcontext Ctx(uintptr_t n) { return reinterpret_cast<CUcontext>(n); }

// One thread's current context as the driver would keep it; each device has
// the primary context Ctx(0x100 + device).
struct FakeDriver {
  CUcontext current = nullptr;
  bool readable = true;
  cudaError_t set_device_result = cudaSuccess;
  std::vector<std::string> calls;

  ContextOps Ops() {
    ContextOps ops;
    ops.get = [this](CUcontext* ctx) {
      calls.push_back("get");
      if (!readable) return false;
      *ctx = current;
      return true;
    };
    ops.set = [this](CUcontext ctx) {
      calls.push_back(ctx == nullptr ? "set none" : "set " + std::to_string(uintptr_t(ctx)));
      current = ctx;
      return true;
    };
    ops.set_device = [this](int device) {
      calls.push_back("set_device " + std::to_string(device));
      if (set_device_result == cudaSuccess) current = Ctx(0x100 + device);
      return set_device_result;
    };
    return ops;
  }
};

// A worker thread that never chose a device has no context: it must have
// none afterwards, not device 0's (cudaGetDevice reports 0 on such a thread).
TEST(ScopedDeviceTest, AThreadWithoutAContextIsLeftWithoutOne) {
  FakeDriver driver;
  const ContextOps ops = driver.Ops();
  {
    ScopedDevice device(3, ops);
    EXPECT_EQ(device.status(), cudaSuccess);
    EXPECT_EQ(driver.current, Ctx(0x103));
  }
  EXPECT_EQ(driver.current, nullptr);
  EXPECT_EQ(driver.calls, (std::vector<std::string>{"get", "set_device 3", "set none"}));
}

TEST(ScopedDeviceTest, TheContextTheThreadHadIsMadeCurrentAgain) {
  FakeDriver driver;
  driver.current = Ctx(0x7000);  // e.g. a context the caller created itself on device 3
  const ContextOps ops = driver.Ops();
  {
    ScopedDevice device(3, ops);
    EXPECT_EQ(driver.current, Ctx(0x103));
  }
  EXPECT_EQ(driver.current, Ctx(0x7000));
  // The engine's own device's context stays if the thread already had it.
  driver.current = Ctx(0x103);
  { ScopedDevice device(3, ops); }
  EXPECT_EQ(driver.current, Ctx(0x103));
}

TEST(ScopedDeviceTest, AFailedSetDeviceChangesNothing) {
  FakeDriver driver;
  driver.current = Ctx(0x101);
  driver.set_device_result = cudaErrorInvalidDevice;
  const ContextOps ops = driver.Ops();
  {
    ScopedDevice device(5, ops);
    EXPECT_EQ(device.status(), cudaErrorInvalidDevice);
  }
  EXPECT_EQ(driver.current, Ctx(0x101));
  EXPECT_EQ(driver.calls, (std::vector<std::string>{"get", "set_device 5"}));
}

// Without a readable context nothing is restored: guessing a device to
// restore is what would bind a thread to a GPU it never used.
TEST(ScopedDeviceTest, AnUnreadableContextIsNotRestored) {
  FakeDriver driver;
  driver.readable = false;
  const ContextOps ops = driver.Ops();
  { ScopedDevice device(2, ops); }
  EXPECT_EQ(driver.calls, (std::vector<std::string>{"get", "set_device 2"}));
}

TEST(CheckStreamDeviceTest, AStreamOfAnotherDeviceIsRefusedNamingBoth) {
  EXPECT_TRUE(CheckStreamDevice(cudaSuccess, 2, 2).ok());
  const Status st = CheckStreamDevice(cudaSuccess, 0, 3);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "cuda copy engine: compute_stream belongs to device 0, not to the engine's device 3; "
            "pass the stream the engine computes on, on options.device");
}

TEST(CheckStreamDeviceTest, WhatTheDriverCannotAnswerPassesAndBadHandlesDoNot) {
  EXPECT_TRUE(CheckStreamDevice(cudaErrorNotSupported, -1, 0).ok());
  EXPECT_TRUE(CheckStreamDevice(cudaErrorCallRequiresNewerDriver, -1, 0).ok());
  const Status bad = CheckStreamDevice(cudaErrorInvalidResourceHandle, -1, 0);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(),
            "cuda copy engine: compute_stream is not a live stream: "
            "cudaErrorInvalidResourceHandle");
  const Status other = CheckStreamDevice(cudaErrorLaunchFailure, -1, 0);
  EXPECT_EQ(other.code(), StatusCode::kIOError);
  EXPECT_NE(other.message().find("cudaStreamGetDevice of compute_stream"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::cuda
