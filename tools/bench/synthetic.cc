#include "tools/bench/synthetic.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace kvtier::bench {
namespace {

// splitmix64: small, fast and fully specified, so traces are identical on
// every platform and standard library (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [-j, j].
  int64_t Symmetric(uint32_t j) {
    if (j == 0) return 0;
    return static_cast<int64_t>(Next() % (2 * uint64_t{j} + 1)) - j;
  }

 private:
  uint64_t state_;
};

struct Step {
  uint64_t timestamp_ms;
  uint32_t session;
  uint32_t step;
  uint32_t prompt;
  uint32_t new_blocks;
};

std::vector<Step> Schedule(const SyntheticOptions& o) {
  Rng rng(o.seed);
  std::vector<Step> steps;
  steps.reserve(uint64_t{o.sessions} * o.steps);
  for (uint32_t s = 0; s < o.sessions; ++s) {
    const auto prompt = static_cast<uint32_t>(rng.Next() % o.system_prompts);
    uint64_t t = s * o.session_stagger_ms;
    for (uint32_t k = 0; k < o.steps; ++k) {
      uint32_t add = o.initial_blocks;
      if (k > 0) {
        const double scale = 1.0 + o.interval_jitter * (2.0 * rng.Unit() - 1.0);
        t += static_cast<uint64_t>(static_cast<double>(o.step_interval_ms) * scale);
        const int64_t g = int64_t{o.growth_blocks} + rng.Symmetric(o.growth_jitter);
        add = static_cast<uint32_t>(std::max<int64_t>(1, g));
      }
      steps.push_back({t, s, k, prompt, add});
    }
  }
  std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
    return std::tie(a.timestamp_ms, a.session, a.step) <
           std::tie(b.timestamp_ms, b.session, b.step);
  });
  return steps;
}

Status ParseU64(std::string_view text, uint64_t* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty()) {
    return Status::InvalidArgument("expected a non-negative integer, got \"" + std::string(text) +
                                   "\"");
  }
  return Status::Ok();
}

Status ParseU32(std::string_view text, uint32_t* out) {
  uint64_t v = 0;
  KVTIER_RETURN_IF_ERROR(ParseU64(text, &v));
  if (v > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("value " + std::string(text) + " is out of range");
  }
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

Status ParseDouble(std::string_view text, double* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty()) {
    return Status::InvalidArgument("expected a number, got \"" + std::string(text) + "\"");
  }
  return Status::Ok();
}

struct Field {
  std::string_view name;
  Status (*set)(std::string_view value, SyntheticOptions* o);
};

// One entry per SyntheticOptions field, in declaration order.
constexpr Field kFields[] = {
    {"seed", [](std::string_view v, SyntheticOptions* o) { return ParseU64(v, &o->seed); }},
    {"sessions", [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->sessions); }},
    {"steps", [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->steps); }},
    {"system_prompts",
     [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->system_prompts); }},
    {"system_prompt_blocks",
     [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->system_prompt_blocks); }},
    {"initial_blocks",
     [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->initial_blocks); }},
    {"growth_blocks",
     [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->growth_blocks); }},
    {"growth_jitter",
     [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->growth_jitter); }},
    {"output_tokens",
     [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->output_tokens); }},
    {"session_stagger_ms",
     [](std::string_view v, SyntheticOptions* o) { return ParseU64(v, &o->session_stagger_ms); }},
    {"step_interval_ms",
     [](std::string_view v, SyntheticOptions* o) { return ParseU64(v, &o->step_interval_ms); }},
    {"interval_jitter",
     [](std::string_view v, SyntheticOptions* o) { return ParseDouble(v, &o->interval_jitter); }},
    {"block_tokens",
     [](std::string_view v, SyntheticOptions* o) { return ParseU32(v, &o->block_tokens); }},
};

}  // namespace

Status SyntheticOptions::Validate() const {
  if (sessions == 0) return Status::InvalidArgument("sessions must be > 0");
  if (steps == 0) return Status::InvalidArgument("steps must be > 0");
  if (system_prompts == 0) return Status::InvalidArgument("system_prompts must be > 0");
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  if (system_prompt_blocks + uint64_t{initial_blocks} == 0) {
    return Status::InvalidArgument("system_prompt_blocks + initial_blocks must be > 0");
  }
  if (!(interval_jitter >= 0.0 && interval_jitter < 1.0)) {
    return Status::InvalidArgument("interval_jitter must be in [0, 1)");
  }
  // The whole trace is held in memory: bound it before anything is allocated.
  // With requests <= 10^7 none of the products below can overflow 64 bits.
  const uint64_t requests = uint64_t{sessions} * steps;
  if (requests > kMaxSyntheticRequests) {
    return Status::InvalidArgument("sessions * steps is " + std::to_string(requests) +
                                   " requests; at most " + std::to_string(kMaxSyntheticRequests));
  }
  const uint64_t base = uint64_t{system_prompt_blocks} + initial_blocks;
  const uint64_t growth_max = uint64_t{growth_blocks} + growth_jitter + 1;
  const uint64_t max_blocks = base + uint64_t{steps - 1} * growth_max;
  if (max_blocks > std::numeric_limits<uint32_t>::max() / block_tokens) {
    return Status::InvalidArgument("the longest context would exceed 2^32 tokens");
  }
  // Step k holds at most base + k * growth_max blocks.
  const uint64_t blocks_per_session = steps * base + uint64_t{steps - 1} * growth_max * steps / 2;
  if (blocks_per_session > kMaxSyntheticBlockIds / sessions) {
    return Status::InvalidArgument("the trace could hold more than " +
                                   std::to_string(kMaxSyntheticBlockIds) +
                                   " block ids; use fewer sessions, steps or blocks");
  }
  return Status::Ok();
}

std::string SyntheticOptions::ToString() const {
  return "seed=" + std::to_string(seed) + ",sessions=" + std::to_string(sessions) +
         ",steps=" + std::to_string(steps) + ",system_prompts=" + std::to_string(system_prompts) +
         ",system_prompt_blocks=" + std::to_string(system_prompt_blocks) +
         ",initial_blocks=" + std::to_string(initial_blocks) +
         ",growth_blocks=" + std::to_string(growth_blocks) +
         ",growth_jitter=" + std::to_string(growth_jitter) +
         ",output_tokens=" + std::to_string(output_tokens) +
         ",session_stagger_ms=" + std::to_string(session_stagger_ms) +
         ",step_interval_ms=" + std::to_string(step_interval_ms) +
         ",interval_jitter=" + std::to_string(interval_jitter) +
         ",block_tokens=" + std::to_string(block_tokens);
}

Status ApplySyntheticSpec(std::string_view spec, SyntheticOptions* options) {
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument("generator option \"" + std::string(item) +
                                     "\" is not key=value");
    }
    const std::string_view key = item.substr(0, eq);
    const Field* field = std::find_if(std::begin(kFields), std::end(kFields),
                                      [&](const Field& f) { return f.name == key; });
    if (field == std::end(kFields)) {
      return Status::InvalidArgument("unknown generator option \"" + std::string(key) + "\"");
    }
    KVTIER_RETURN_IF_ERROR(field->set(item.substr(eq + 1), options)
                               .WithContext("generator option " + std::string(key)));
  }
  return Status::Ok();
}

Result<Trace> GenerateSyntheticTrace(const SyntheticOptions& o) {
  KVTIER_RETURN_IF_ERROR(o.Validate());
  Trace trace;
  trace.source = "synthetic:" + o.ToString();
  trace.block_tokens = o.block_tokens;
  uint64_t next_id = 0;
  // Only the prompts sessions use are held: system_prompts may be far more
  // than sessions (4e9 asked for 96 GB up front).
  std::unordered_map<uint32_t, std::vector<uint64_t>> prompt_ids;
  std::vector<std::vector<uint64_t>> context(o.sessions);
  for (const Step& st : Schedule(o)) {
    std::vector<uint64_t>& ctx = context[st.session];
    if (st.step == 0) {
      // Ids go out in order of first appearance, as in the Mooncake traces.
      std::vector<uint64_t>& prompt = prompt_ids[st.prompt];
      while (prompt.size() < o.system_prompt_blocks) prompt.push_back(next_id++);
      ctx = prompt;
    }
    for (uint32_t i = 0; i < st.new_blocks; ++i) ctx.push_back(next_id++);
    TraceRequest req;
    req.timestamp_ms = st.timestamp_ms;
    req.input_length = static_cast<uint32_t>(ctx.size() * o.block_tokens);
    req.output_length = o.output_tokens;
    req.hash_ids = ctx;
    trace.requests.push_back(std::move(req));
  }
  return trace;
}

}  // namespace kvtier::bench
