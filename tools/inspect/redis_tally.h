// RedisTally: what `kvtier-inspect redis summary` makes of a SCAN of a live
// server, kept apart from the connection so that the races of a live store
// can be played in tests. SCAN may return a key more than once, and a key may
// be deleted, expire or be evicted between SCAN and the read of its value;
// neither is damage. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/ns_key.h"

namespace kvtier::inspect {

struct RedisNsCount {
  uint64_t blocks = 0, sampled = 0, value_bytes = 0, payload_bytes = 0;
};

// One namespace's line of the summary.
struct RedisNsEstimate {
  std::string id;  // 16 hex digits
  uint64_t blocks = 0, sampled = 0, value_bytes = 0, payload_bytes = 0;
  bool estimated = false;  // bytes scaled from a sample (the global one when none of its own)
};

struct RedisEstimate {
  uint64_t value_bytes = 0, payload_bytes = 0;
  bool estimated = false;
  std::vector<RedisNsEstimate> namespaces;  // by id
};

class RedisTally {
 public:
  // `prefix`: the tier's key_prefix; `sample`: values to measure, 0 = all.
  RedisTally(std::string prefix, uint64_t sample) : prefix_(std::move(prefix)), sample_(sample) {}

  // A key SCAN returned (named "<prefix>:<16 hex>:<32 hex>" for a block).
  // True when its value is to be measured (AddMeasured); a repeat is ignored.
  bool AddKey(std::string_view name);
  // The STRLEN and GETRANGE 0 63 replies for a key AddKey chose. A value
  // that reads empty is of a key gone since SCAN: counted as vanished, not
  // as a block. A value whose header is not this key's (namespace and key)
  // or whose length is not the header's is a bad header, as the tier would
  // find it on a read.
  void AddMeasured(std::string_view name, uint64_t strlen, std::string_view head);

  RedisEstimate Estimate() const;

  uint64_t blocks() const { return blocks_; }
  uint64_t sampled() const { return sampled_; }
  uint64_t other_keys() const { return other_keys_; }
  uint64_t bad_headers() const { return bad_headers_; }
  uint64_t vanished() const { return vanished_; }
  uint64_t repeats() const { return repeats_; }

 private:
  std::string prefix_;
  uint64_t sample_;
  std::map<std::string, RedisNsCount> namespaces_;  // by namespace hex
  std::unordered_set<internal::NsKey, internal::NsKeyHash> seen_;
  uint64_t blocks_ = 0, chosen_ = 0, sampled_ = 0, other_keys_ = 0, bad_headers_ = 0;
  uint64_t vanished_ = 0, repeats_ = 0;
  uint64_t value_bytes_ = 0, payload_bytes_ = 0;  // of all sampled values
};

}  // namespace kvtier::inspect
