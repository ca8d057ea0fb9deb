#include "core/payload_hash.h"

#include <xxhash.h>

namespace kvtier::internal {

#if defined(KVTIER_HAVE_AVX2_HASH)
uint64_t PayloadXxh3Avx2(const void* data, size_t size);  // payload_hash_avx2.cc

namespace {
using HashFn = uint64_t (*)(const void*, size_t);

uint64_t PayloadXxh3Baseline(const void* data, size_t size) { return XXH3_64bits(data, size); }

HashFn PickHash() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? &PayloadXxh3Avx2 : &PayloadXxh3Baseline;
}
}  // namespace

uint64_t PayloadXxh3(const void* data, size_t size) {
  static const HashFn fn = PickHash();
  return fn(data, size);
}
#else
uint64_t PayloadXxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }
#endif

}  // namespace kvtier::internal
