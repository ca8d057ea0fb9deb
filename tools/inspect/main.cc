// kvtier-inspect: look at a running runtime, a config file, a trace or a
// stored cache. See inspect.h for the exit codes.
#include <sys/un.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <limits>

#include "tools/bench/cli_checks.h"
#include "tools/inspect/inspect.h"

namespace {

using namespace kvtier::inspect;
// Every unsigned option takes the check of its type (kvtier-bench's): CLI11
// alone reads "-1" into a uint64_t as 2^64 - 1.
using kvtier::bench::kUnsigned32;
using kvtier::bench::kUnsigned64;

constexpr const char* kExitCodes =
    "Exit codes: 0 done (and what was inspected is fine); 1 what was inspected is bad or "
    "unreachable (invalid config, unreadable trace, no runtime on the socket, corrupt blocks); "
    "2 usage error, a store a live process holds (nvme without --read-only), or a command not "
    "available in this build.";

// Zero would mean no time at all (every request past its deadline, a watch
// that never sleeps) or no tokens per block.
const CLI::Range kPositive(uint32_t{1}, std::numeric_limits<uint32_t>::max(), "POSITIVE");

struct Flags {
  LiveFlags live;
  bool json = false;
  std::string file;
  std::vector<std::string> overrides;
  uint32_t block_tokens = 512;
  NvmeFlags nvme;
  RedisFlags redis;
};

// A Unix socket path fits sockaddr_un's sun_path with its terminating NUL:
// a longer one is a usage error (exit 2), as kvtier-bench's --admin-socket.
const CLI::Validator kSocketPath(
    [](std::string& path) -> std::string {
      constexpr size_t kMax = sizeof(sockaddr_un{}.sun_path) - 1;
      if (!path.empty() && path.size() <= kMax) return "";
      return "path of " + std::to_string(path.size()) + " bytes; expected 1 to " +
             std::to_string(kMax);
    },
    "PATH");

CLI::App* Live(CLI::App& app, const char* name, const char* help, Flags& f) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("--socket", f.live.socket, "the runtime's admin socket (runtime.admin_socket)")
      ->required()
      ->check(kSocketPath);
  cmd->add_option("--timeout-ms", f.live.timeout_ms, "per request")
      ->check(kUnsigned32)
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_flag("--json", f.json, "print JSON instead of tables");
  cmd->footer(kExitCodes);
  return cmd;
}

void AddCommands(CLI::App& app, Flags& f) {
  Live(app, "stats", "counters, latencies and tiers of a running runtime", f);
  Live(app, "tiers", "one line per tier of a running runtime", f);
  Live(app, "top", "rates over an interval: busiest paths and tiers first", f)
      ->add_option("--interval-ms", f.live.interval_ms, "time between the two samples")
      ->check(kUnsigned32)
      ->check(kPositive)
      ->capture_default_str();
  CLI::App* watch = Live(app, "watch",
                         "refresh the tier table every interval; ends 0 when the runtime shuts "
                         "down, 1 when it stops answering without shutting down",
                         f);
  watch->add_option("--interval-ms", f.live.interval_ms, "refresh period")
      ->check(kUnsigned32)
      ->check(kPositive)
      ->capture_default_str();
  watch->add_option("--count", f.live.count, "stop after N refreshes (0: until interrupted)")
      ->check(kUnsigned64)
      ->capture_default_str();

  CLI::App* config = app.add_subcommand("config", "check or explain a YAML config");
  config->require_subcommand(1);
  config->footer(kExitCodes);
  for (auto [name, help] : {std::pair{"validate", "check a config; errors as file:line:column"},
                            std::pair{"explain",
                                      "the effective config, every default filled in, "
                                      "with the meaning of each key"}}) {
    CLI::App* c = config->add_subcommand(name, help);
    c->add_option("FILE", f.file, "YAML config")->required();
    c->add_option("--set", f.overrides, "override dotted.path=value (repeatable)")
        ->allow_extra_args(false);
    c->add_flag("--json", f.json, "print JSON");
    c->footer(kExitCodes);
  }

  CLI::App* trace = app.add_subcommand("trace",
                                       "requests, unique blocks, infinite-cache hit "
                                       "rate and reuse distances of a Mooncake trace");
  trace->add_option("FILE", f.file, "Mooncake JSONL trace")->required();
  trace->add_option("--block-tokens", f.block_tokens, "tokens per hash id")
      ->check(kUnsigned32)
      ->check(kPositive)
      ->capture_default_str();
  trace->add_flag("--json", f.json, "print JSON");
  trace->footer(kExitCodes);

  CLI::App* nvme = app.add_subcommand("nvme", "summary or checksum verification of an NVMe store");
  nvme->add_option("PATH", f.nvme.path, "the tier's data file or device")->required();
  nvme->add_option("ACTION", f.nvme.action, "summary or verify")
      ->required()
      ->check(CLI::IsMember({"summary", "verify"}));
  nvme->add_option("--index", f.nvme.index, "the tier's index directory (default PATH.index)");
  nvme->add_flag("--read-only", f.nvme.read_only,
                 "open even if a live process holds the store (it may change while read)");
  nvme->add_flag("--json", f.json, "print JSON");
  nvme->footer(kExitCodes);

  CLI::App* redis = app.add_subcommand("redis", "blocks and bytes per namespace in Redis (SCAN)");
  redis->add_option("URL", f.redis.url, "redis://[[user]:password@]host[:port][/db]")->required();
  redis->add_option("ACTION", f.redis.action, "summary")
      ->required()
      ->check(CLI::IsMember({"summary"}));
  redis->add_option("--prefix", f.redis.prefix, "the tier's key_prefix")
      ->check([](const std::string& p) {
        // As the config refuses it: every kvtier key is "<prefix>:...".
        return p.empty() ? std::string("an empty prefix; expected the tier's key_prefix")
                         : std::string();
      })
      ->capture_default_str();
  redis
      ->add_option("--sample", f.redis.sample,
                   "measure the values of the first N keys only (0: all)")
      ->check(kUnsigned64)
      ->capture_default_str();
  redis->add_option("--timeout-ms", f.redis.timeout_ms, "connect and per-command bound")
      ->check(kUnsigned32)
      ->check(kPositive)
      ->capture_default_str();
  redis->add_flag("--json", f.json, "print JSON");
  redis->footer(kExitCodes);
}

int Dispatch(CLI::App& app, const Flags& f) {
  const Output o{std::cout, std::cerr, f.json};
  if (app.got_subcommand("stats")) return RunStats(f.live, o);
  if (app.got_subcommand("tiers")) return RunTiers(f.live, o);
  if (app.got_subcommand("top")) return RunTop(f.live, o);
  if (app.got_subcommand("watch")) return RunWatch(f.live, o);
  if (CLI::App* config = app.get_subcommand("config"); config->parsed()) {
    return config->got_subcommand("validate") ? RunConfigValidate(f.file, f.overrides, o)
                                              : RunConfigExplain(f.file, f.overrides, o);
  }
  if (app.got_subcommand("trace")) return RunTrace(f.file, f.block_tokens, o);
  if (app.got_subcommand("nvme")) return RunNvme(f.nvme, o);
  return RunRedis(f.redis, o);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtier-inspect: look at a running kvtier runtime, a config, a trace or a store"};
  app.require_subcommand(1);
  app.footer(kExitCodes);
  Flags flags;
  AddCommands(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help exits 0
  }
  int rc = kExitBad;
  try {
    rc = Dispatch(app, flags);
  } catch (const std::exception& e) {  // a bug or an input no check foresaw
    std::cout.flush();
    std::cerr << "kvtier-inspect: internal error: " << e.what() << "\n";
    return kExitBad;
  }
  // A result that could not be written (a full disk, a closed pipe) is no
  // result.
  if (!std::cout.flush()) {
    std::cerr << "kvtier-inspect: cannot write the output to stdout\n";
    return kExitBad;
  }
  return rc;
}
