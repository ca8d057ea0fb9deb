#include "tools/bench/trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/file_text.h"

namespace kvtier::bench {
namespace {

using Json = nlohmann::json;

// Why `v`, not an unsigned integer the parser could hold, is refused.
std::string NotUnsigned(const Json& v) {
  // Non-negative integers parse as unsigned, so a signed one is negative.
  if (v.is_number_integer()) return " is negative";
  // Integers past 2^64 - 1 parse as floating point.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0x1p64 && d == std::floor(d)) return " is out of range";
  }
  return " must be an integer";
}

// Reads field `name` of `obj` as an unsigned integer no larger than `max`.
// Returns an empty string on success, else what is wrong with the field.
std::string ReadUnsigned(const Json& obj, const char* name, uint64_t max, uint64_t* out) {
  auto it = obj.find(name);
  if (it == obj.end()) return std::string("missing field \"") + name + "\"";
  const std::string field = std::string("field \"") + name + "\"";
  if (it->is_number_unsigned()) {
    uint64_t v = it->get<uint64_t>();
    if (v > max) return field + " is out of range";
    *out = v;
    return {};
  }
  return field + NotUnsigned(*it);
}

std::string ReadHashIds(const Json& obj, std::vector<uint64_t>* ids) {
  auto it = obj.find("hash_ids");
  if (it == obj.end()) return "missing field \"hash_ids\"";
  if (!it->is_array()) return "field \"hash_ids\" must be an array";
  ids->reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& v = (*it)[i];
    if (v.is_number_unsigned()) {
      ids->push_back(v.get<uint64_t>());
      continue;
    }
    return "hash_ids[" + std::to_string(i) + "]" + NotUnsigned(v);
  }
  // Ids are prefix-chained: one id twice in a request would be one block
  // standing for two places of the prompt.
  std::unordered_map<uint64_t, size_t> first;
  for (size_t i = 0; i < ids->size(); ++i) {
    auto [at, fresh] = first.emplace((*ids)[i], i);
    if (!fresh) {
      return "hash_ids[" + std::to_string(i) + "] repeats hash_ids[" + std::to_string(at->second) +
             "] (" + std::to_string((*ids)[i]) + "); a request's ids must be distinct";
    }
  }
  return {};
}

// Parses one non-blank line; returns what is wrong with it, or "".
std::string ParseLine(std::string_view line, uint32_t block_tokens, TraceRequest* req) {
  // JSON leaves a key named twice to the reader (the parser keeps the last):
  // a line with two timestamps or two hash_ids is refused, not half read.
  std::vector<std::string> keys;
  std::string repeated;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 && repeated.empty()) {
      std::string key = parsed.get<std::string>();
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
        repeated = std::move(key);
      } else {
        keys.push_back(std::move(key));
      }
    }
    return true;
  };
  Json obj;
  try {
    obj = Json::parse(line.begin(), line.end(), on_event);
  } catch (const Json::exception& e) {
    // The parser's own account of where and why: a syntax error
    // (parse_error), or a number no double holds, such as 1e400
    // (out_of_range).
    std::string why = e.what();
    const size_t tag = why.find("] ");  // "[json.exception.parse_error.101] "
    return "malformed JSON: " + (tag == std::string::npos ? why : why.substr(tag + 2));
  }
  if (!obj.is_object()) return "expected a JSON object";
  if (!repeated.empty()) return "field \"" + repeated + "\" appears twice";
  constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
  // Simulators take the time in nanoseconds as a double and back: 10^13 ms
  // (317 years) keeps that in range of a uint64_t.
  constexpr uint64_t kMaxTimestampMs = 10'000'000'000'000;
  uint64_t ts = 0, in = 0, out = 0;
  std::string err = ReadUnsigned(obj, "timestamp", kMaxTimestampMs, &ts);
  if (err.empty()) err = ReadUnsigned(obj, "input_length", kU32, &in);
  if (err.empty()) err = ReadUnsigned(obj, "output_length", kU32, &out);
  if (err.empty()) err = ReadHashIds(obj, &req->hash_ids);
  if (!err.empty()) return err;
  req->timestamp_ms = ts;
  req->input_length = static_cast<uint32_t>(in);
  req->output_length = static_cast<uint32_t>(out);
  const uint64_t expected = (in + block_tokens - 1) / block_tokens;
  if (req->hash_ids.size() != expected) {
    return "hash_ids has " + std::to_string(req->hash_ids.size()) + " ids, expected " +
           std::to_string(expected) + " for input_length " + std::to_string(in);
  }
  return {};
}

// Where a block is: its parent's id (after renaming; none for a first
// block) and its tokens. An id names one place only.
struct Place {
  bool root = true;
  uint64_t parent = 0;
  uint32_t tokens = 0;
  auto operator<=>(const Place&) const = default;
};

// Renames the ids `trace` uses for more than one block (ParseMooncakeTrace).
// A consistent trace is left as it is.
void GiveEachBlockItsOwnId(Trace& trace) {
  // By id: where the file first used it; nullopt until then. Ids given out
  // here are entered too, so none is given twice.
  std::unordered_map<uint64_t, std::optional<Place>> first_place;
  std::map<std::pair<Place, uint64_t>, uint64_t> renamed;  // (place, file's id) -> id given
  for (const TraceRequest& req : trace.requests) {
    for (uint64_t id : req.hash_ids) first_place.emplace(id, std::nullopt);
  }
  uint64_t next_free = 0;
  for (TraceRequest& req : trace.requests) {
    Place place;
    for (size_t i = 0; i < req.hash_ids.size(); ++i) {
      place.tokens = BlockTokensAt(req, i, trace.block_tokens);
      uint64_t& id = req.hash_ids[i];
      std::optional<Place>& first = first_place[id];
      if (!first) {
        first = place;
      } else if (!(*first == place)) {
        auto [at, added] = renamed.emplace(std::pair(place, id), 0);
        if (added) {
          while (first_place.count(next_free) != 0) ++next_free;
          at->second = next_free;
          first_place.emplace(next_free, place);
          ++trace.renamed_blocks;
        }
        id = at->second;
      }
      place.root = false;
      place.parent = id;
    }
  }
}

bool IsBlank(std::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

}  // namespace

uint32_t BlockTokensAt(const TraceRequest& request, size_t index, uint32_t block_tokens) {
  const uint64_t start = uint64_t{block_tokens} * index;
  if (start >= request.input_length) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(block_tokens, request.input_length - start));
}

uint32_t FullBlocks(const TraceRequest& request, uint32_t block_tokens) {
  uint32_t full = 0;
  while (full < request.hash_ids.size() &&
         BlockTokensAt(request, full, block_tokens) == block_tokens) {
    ++full;
  }
  return full;
}

Result<Trace> ParseMooncakeTrace(std::string_view text, std::string_view source,
                                 uint32_t block_tokens) {
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  Trace trace;
  trace.source = std::string(source);
  trace.block_tokens = block_tokens;
  size_t line_no = 0;
  size_t previous_line = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (IsBlank(line)) continue;
    TraceRequest req;
    std::string err = ParseLine(line, block_tokens, &req);
    if (err.empty() && !trace.requests.empty() &&
        req.timestamp_ms < trace.requests.back().timestamp_ms) {
      err = "timestamp " + std::to_string(req.timestamp_ms) + " is before line " +
            std::to_string(previous_line) + "'s " +
            std::to_string(trace.requests.back().timestamp_ms) +
            "; requests must be in arrival order";
    }
    if (!err.empty()) {
      return Status::InvalidArgument(std::string(source) + ":" + std::to_string(line_no) + ": " +
                                     err);
    }
    previous_line = line_no;
    trace.requests.push_back(std::move(req));
  }
  GiveEachBlockItsOwnId(trace);
  return trace;
}

Result<Trace> ReadMooncakeTrace(const std::string& path, uint32_t block_tokens) {
  // The whole Mooncake arXiv trace (23,608 requests) is 4.4 MB; a bound keeps
  // a wrong path (a device, a huge file) from taking all memory.
  constexpr size_t kMaxTraceBytes = size_t{1} << 30;
  // A trace too large for the memory there is says so rather than ending
  // the process (std::bad_alloc has no handler in the tools).
  try {
    std::string text;
    bool opened = false;
    const int err = internal::ReadFileText(path, kMaxTraceBytes, &text, &opened);
    if (!opened) return FromErrno(err, "open trace " + path);
    // A directory opens; it must not pass for an empty trace.
    if (err == EISDIR) {
      return Status::InvalidArgument("read trace " + path +
                                     ": is a directory; expected a JSONL trace file");
    }
    if (err == EFBIG) {
      return Status::InvalidArgument("read trace " + path + ": larger than " +
                                     std::to_string(kMaxTraceBytes >> 20) +
                                     " MiB; split it, or keep its first requests");
    }
    if (err != 0) return FromErrno(err, "read trace " + path);
    return ParseMooncakeTrace(text, path, block_tokens);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("read trace " + path + ": not enough memory to hold it");
  }
}

InfiniteCacheStats ComputeInfiniteCacheStats(std::span<const TraceRequest> requests,
                                             uint32_t block_tokens, CachedBlocks cached) {
  InfiniteCacheStats s;
  std::unordered_set<uint64_t> seen;
  std::unordered_set<uint64_t> stored;  // ids a cache of `cached` blocks holds
  for (const TraceRequest& req : requests) {
    ++s.requests;
    s.blocks += req.hash_ids.size();
    s.tokens += req.input_length;
    const size_t n =
        cached == CachedBlocks::kAll ? req.hash_ids.size() : FullBlocks(req, block_tokens);
    // The whole prefix must predate this request, so look before inserting.
    size_t hits = 0;
    while (hits < n && stored.count(req.hash_ids[hits]) != 0) {
      s.hit_tokens += BlockTokensAt(req, hits, block_tokens);
      ++hits;
    }
    s.hit_blocks += hits;
    seen.insert(req.hash_ids.begin(), req.hash_ids.end());
    stored.insert(req.hash_ids.begin(), req.hash_ids.begin() + n);
  }
  s.unique_blocks = seen.size();
  return s;
}

}  // namespace kvtier::bench
