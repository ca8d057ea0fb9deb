// Request traces for kvtier-bench: the Mooncake JSONL reader and the
// infinite-cache reference that a replay is compared against.
//
// A trace is a list of requests in arrival order. Each request names the
// prefix-chained ids of its 512-token blocks: two requests share the KV of
// their first k blocks iff their first k ids are equal.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::bench {

// Tokens per hash id in Mooncake traces.
inline constexpr uint32_t kMooncakeBlockTokens = 512;

struct TraceRequest {
  uint64_t timestamp_ms = 0;       // arrival, ms since the trace start
  uint32_t input_length = 0;       // prompt tokens
  uint32_t output_length = 0;      // generated tokens
  std::vector<uint64_t> hash_ids;  // one per block; the last block may be partial
};

struct Trace {
  std::string source;  // file path or generator description
  uint32_t block_tokens = kMooncakeBlockTokens;
  std::vector<TraceRequest> requests;
  // Blocks whose id the file had already used for another block: under
  // another prefix, or as a block of another length (a partial last block's
  // id used again for a longer block). ParseMooncakeTrace gives each such
  // block an id of its own, so every reader of the trace counts it apart.
  uint64_t renamed_blocks = 0;
};

// Tokens covered by block `index` of `request`: block_tokens, or fewer for a
// trailing partial block.
uint32_t BlockTokensAt(const TraceRequest& request, size_t index, uint32_t block_tokens);
// The number of leading blocks that hold block_tokens tokens each.
uint32_t FullBlocks(const TraceRequest& request, uint32_t block_tokens);

// Parses Mooncake JSONL text, one request object per line:
//   {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [id, ...]}
// Empty (or all-blank) lines are skipped; other fields are ignored. Every
// other line must hold exactly those fields as non-negative integers, with
// len(hash_ids) == ceil(input_length / block_tokens). The first bad line fails
// the whole parse with InvalidArgument("<source>:<line>: <what>"). An id
// stands for its whole prefix: one the file uses again for another block
// (see Trace::renamed_blocks) is replaced there by an id the file does not
// use, the same one wherever that block comes back.
Result<Trace> ParseMooncakeTrace(std::string_view text, std::string_view source,
                                 uint32_t block_tokens = kMooncakeBlockTokens);

// Reads and parses a file; NotFound / IOError when it cannot be read,
// InvalidArgument for a directory.
Result<Trace> ReadMooncakeTrace(const std::string& path,
                                uint32_t block_tokens = kMooncakeBlockTokens);

// What an unbounded cache would hit when the requests are replayed in order.
// A block is a hit iff it and every block before it in its request appeared in
// an earlier request (ids are prefix-chained, so this is the longest prefix of
// ids all seen before the request started).
struct InfiniteCacheStats {
  uint64_t requests = 0;
  uint64_t blocks = 0;
  uint64_t unique_blocks = 0;
  uint64_t hit_blocks = 0;
  uint64_t tokens = 0;      // sum of input_length
  uint64_t hit_tokens = 0;  // tokens of the hit blocks
};

// Which blocks of a request a cache stores: every id, or (as an engine does,
// which hashes full blocks only) the leading full blocks; the partial last
// block is then always recomputed.
enum class CachedBlocks { kAll, kFull };

InfiniteCacheStats ComputeInfiniteCacheStats(std::span<const TraceRequest> requests,
                                             uint32_t block_tokens,
                                             CachedBlocks cached = CachedBlocks::kAll);
inline InfiniteCacheStats ComputeInfiniteCacheStats(const Trace& trace) {
  return ComputeInfiniteCacheStats(trace.requests, trace.block_tokens);
}

}  // namespace kvtier::bench
