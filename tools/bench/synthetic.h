// A deterministic generator of agentic traces: many sessions, each a loop of
// steps whose context grows by appending to the previous step's context
// (tool results, model output), all sessions sharing a few system prompts.
// This is the workload where prefix reuse across turns matters most.
//
// Output is an ordinary Trace with Mooncake-style prefix-chained ids: ids are
// handed out in order of first appearance, so a block shared by two requests
// (a system prompt, an earlier step of the same session) has the same id.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "tools/bench/trace.h"

namespace kvtier::bench {

// Validate's bounds on what one generated trace may hold in memory.
inline constexpr uint64_t kMaxSyntheticRequests = 10'000'000;
inline constexpr uint64_t kMaxSyntheticBlockIds = 200'000'000;  // 1.6 GB of ids

struct SyntheticOptions {
  uint64_t seed = 1;                  // same seed and options -> same trace
  uint32_t sessions = 32;             // concurrent agent sessions
  uint32_t steps = 8;                 // requests per session
  uint32_t system_prompts = 2;        // distinct shared system prompts
  uint32_t system_prompt_blocks = 8;  // blocks of each system prompt
  uint32_t initial_blocks = 4;        // blocks after the system prompt in step 0
  uint32_t growth_blocks = 2;         // blocks appended per later step
  uint32_t growth_jitter = 1;         // growth varies by up to +/- this (min 1)
  uint32_t output_tokens = 256;       // output_length of every request
  uint64_t session_stagger_ms = 500;  // session i starts at i * stagger
  uint64_t step_interval_ms = 4000;   // mean time between steps of a session
  double interval_jitter = 0.5;       // interval scaled by 1 +/- up to this, in [0, 1)
  uint32_t block_tokens = kMooncakeBlockTokens;

  Status Validate() const;
  // "sessions=32,steps=8,..." in field order, for reports.
  std::string ToString() const;
};

// Applies "key=value,key=value" (field names as above) on top of `options`.
// InvalidArgument naming the key for an unknown key or a bad value.
Status ApplySyntheticSpec(std::string_view spec, SyntheticOptions* options);

// Builds the trace. Requests are ordered by timestamp, ties by session.
// Session s uses system prompt (random % system_prompts); step 0 holds the
// system prompt plus initial_blocks new blocks, step k > 0 the context of
// step k-1 plus max(1, growth_blocks + jitter) new blocks. Every block is full,
// so input_length = blocks * block_tokens.
Result<Trace> GenerateSyntheticTrace(const SyntheticOptions& options);

}  // namespace kvtier::bench
