// Knobs for tests of the reuse learner whose rates must be exact.
#pragma once

#include "kvtier/policy.h"

namespace kvtier::testing {

// Every class judged from its first matured block, with no decay: the rates
// are exact fractions of the sequence a test builds.
inline PolicyKnobs ExactReuseKnobs() {
  PolicyKnobs k;
  k.reuse_min_samples = 1;
  k.reuse_half_life = 0;
  return k;
}

}  // namespace kvtier::testing
