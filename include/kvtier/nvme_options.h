// Options that only a tier of type nvme reads, kept in TierOptions::nvme.
// Plain struct: every field has a default and a comment; TierOptions::Validate
// checks them when the tier's type is nvme.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

struct NvmeTierOptions {
  // Checks the fields above; called by TierOptions::Validate for type nvme.
  Status Validate() const { return Status::Ok(); }
};

}  // namespace kvtier
