// Helpers of the CUDA copy engine tests: why there is no usable device, and
// device copies of a stand-in engine's tensors.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/copy_engine.h"

namespace kvtier::testing {

// Empty when a device is usable, else why not (with the CUDA error text).
std::string NoDeviceReason();

#define SKIP_WITHOUT_DEVICE()                                                  \
  do {                                                                         \
    if (std::string why = ::kvtier::testing::NoDeviceReason(); !why.empty()) { \
      GTEST_SKIP() << why;                                                     \
    }                                                                          \
  } while (0)

// Fills every tensor of the stand-in with pseudo-random bytes.
void FillRandom(HostCopyEngine& engine, uint32_t seed);

// Device copies of the stand-in's tensors (cudaMalloc'ed, uploaded), freed
// at the end.
class DeviceTensors {
 public:
  explicit DeviceTensors(HostCopyEngine& ref);
  ~DeviceTensors();
  DeviceTensors(const DeviceTensors&) = delete;
  DeviceTensors& operator=(const DeviceTensors&) = delete;

  const std::vector<void*>& ptrs() const { return ptrs_; }
  std::vector<std::byte> Download(uint32_t t) const;
  // Copies the stand-in's tensors to the device again.
  void Upload() const;
  // Copies every device tensor back over the stand-in's, so that the
  // stand-in's ReadBlock shows what the device holds.
  void DownloadInto(HostCopyEngine& engine) const;

 private:
  HostCopyEngine& ref_;
  std::vector<void*> ptrs_;
};

}  // namespace kvtier::testing
