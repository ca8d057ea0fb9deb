// `kvtier-bench remote` in a build without Boost (no kvtier-memd).
#include "tools/bench/remote_bench.h"

namespace kvtier::bench {

Result<RemoteBenchResult> RunRemoteBench(const RemoteBenchOptions&) {
  return Status::NotSupported("kvtier-bench remote needs the remote tier (Boost.Asio)");
}
std::string FormatRemoteBench(const RemoteBenchResult&) { return ""; }

}  // namespace kvtier::bench
