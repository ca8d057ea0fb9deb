#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier::internal {

// XXH3-64 of a block payload: the same value as the library's XXH3_64bits,
// computed with AVX2 where the CPU has it. The packaged libxxhash is built
// for baseline x86-64 (SSE2), which hashes about half as fast as AVX2 and
// costs a visible share of every tier's write and verify path.
uint64_t PayloadXxh3(const void* data, size_t size);

}  // namespace kvtier::internal
