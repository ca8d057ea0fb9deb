// Compiled with -mavx2 and called only when the CPU reports AVX2
// (payload_hash.cc). Everything xxhash.h defines here is static
// (XXH_INLINE_ALL), and this file includes nothing else, so no AVX2 code
// can leak into inline functions that other files share.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvtier::internal {

uint64_t PayloadXxh3Avx2(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace kvtier::internal
