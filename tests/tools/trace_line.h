// One Mooncake JSONL request line for the trace tests: `tokens` of input,
// one output token, and `ids` ("1, 2") as its hash_ids.
#pragma once

#include <cstdint>
#include <string>

namespace kvtier::bench {

inline std::string TraceLine(uint64_t ts, uint32_t tokens, const std::string& ids) {
  return "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": " + std::to_string(tokens) +
         ", \"output_length\": 1, \"hash_ids\": [" + ids + "]}\n";
}

}  // namespace kvtier::bench
