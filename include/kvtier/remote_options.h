// Options that only a tier of type remote reads, kept in TierOptions::remote.
// Plain struct: every field has a default and a comment; TierOptions::Validate
// checks them when the tier's type is remote.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

struct RemoteTierOptions {
  // Checks the fields above; called by TierOptions::Validate for type remote.
  Status Validate() const { return Status::Ok(); }
};

}  // namespace kvtier
