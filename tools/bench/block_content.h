// Deterministic block payloads for the replay benchmark: the bytes a block
// with a given key holds, so a load can be checked byte for byte without
// keeping a copy of everything that was saved.
#pragma once

#include <cstddef>
#include <span>

#include "kvtier/block_key.h"

namespace kvtier::bench {

// Fills `out` with the content of `key`: a splitmix64 stream seeded by
// key.hi ^ key.lo, 8 little-endian bytes per step (a trailing partial word
// takes its low bytes). Same key and size -> same bytes.
void FillBlockContent(const BlockKey& key, std::span<std::byte> out);

}  // namespace kvtier::bench
