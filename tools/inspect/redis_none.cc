// redis in a build without the Redis tier (no hiredis).
#include "tools/inspect/inspect.h"

namespace kvtier::inspect {

int RunRedis(const RedisFlags& flags, const Output& o) {
  return NotAvailable("redis " + flags.action, o);
}

}  // namespace kvtier::inspect
