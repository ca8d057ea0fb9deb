// The C API on the CUDA engine: a runtime opened over device tensors saves
// blocks out of them and loads them back into other pages byte for byte; the
// host stand-in's page calls are refused. Skips without a device.
#include <gtest/gtest.h>

#include <vector>

#include "kvtier/config.h"
#include "kvtier/copy_engine.h"
#include "tests/capi/c_api_test_util.h"
#include "tests/gpu/cuda_test_util.h"

namespace kvtier::testing {
namespace {

TEST(CudaCApiTest, SavesAndLoadsDevicePagesByteForByte) {
  SKIP_WITHOUT_DEVICE();
  const std::string yaml = CapiConfig();
  Result<KvtierConfig> config = ParseConfig(yaml, "t.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Result<std::unique_ptr<HostCopyEngine>> ref =
      HostCopyEngine::Create(config->model.Layout(config->gpu_pool_blocks));
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  FillRandom(**ref, 17);
  DeviceTensors device(**ref);

  kvtier_cuda_cache cache{};
  cache.tensors = device.ptrs().data();
  cache.num_tensors = static_cast<uint32_t>(device.ptrs().size());
  cache.num_blocks = config->gpu_pool_blocks;
  kvtier_runtime* raw = nullptr;
  ASSERT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, &cache, nullptr, nullptr, &raw),
            KVTIER_OK)
      << kvtier_last_error();
  RuntimePtr rt(raw);
  unsigned char byte = 0;
  EXPECT_EQ(kvtier_host_block_write(rt.get(), 0, &byte, 1), KVTIER_NOT_SUPPORTED);

  const std::vector<kvtier_key> keys = ChainOf(rt.get(), 3, 5);
  const uint32_t src[] = {0, 1, 2};
  const uint32_t dst[] = {12, 13, 14};
  kvtier_completion* c = nullptr;
  ASSERT_EQ(kvtier_save(rt.get(), nullptr, keys.data(), src, 3, nullptr, &c), KVTIER_OK);
  CompletionPtr save(c);
  ASSERT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK) << kvtier_last_error();
  ASSERT_EQ(kvtier_load(rt.get(), keys.data(), dst, 3, -1, nullptr, nullptr, &c), KVTIER_OK);
  CompletionPtr load(c);
  ASSERT_EQ(kvtier_completion_wait(c, -1), KVTIER_OK) << kvtier_last_error();

  device.DownloadInto(**ref);
  const uint64_t bytes = kvtier_block_bytes(rt.get());
  for (int i = 0; i < 3; ++i) {
    std::vector<std::byte> saved(bytes), loaded(bytes);
    ASSERT_TRUE((*ref)->ReadBlock(src[i], saved).ok());
    ASSERT_TRUE((*ref)->ReadBlock(dst[i], loaded).ok());
    EXPECT_EQ(saved, loaded) << "block " << i;
  }
}

}  // namespace
}  // namespace kvtier::testing
