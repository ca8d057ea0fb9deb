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

// Four requests that use ids 2 and 3 again under other prefixes: [1 2] [2]
// [1 2 3] [1 3]. Three hits (1 2 of the third, 1 of the fourth).
inline std::string IdsUsedUnderOtherPrefixes() {
  return TraceLine(0, 1024, "1, 2") + TraceLine(1, 512, "2") + TraceLine(2, 1536, "1, 2, 3") +
         TraceLine(3, 1024, "1, 3");
}

}  // namespace kvtier::bench
