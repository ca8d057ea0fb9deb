// kvtier-bench: trace replay against a configured Runtime, and the host tier
// against memcpy. Exit codes: 0 success, 1 a loaded block had wrong bytes,
// 2 bad usage, config or trace, 3 (replay) no wrong bytes but some loads,
// saves or lookups failed, 130 / 143 (replay) stopped by SIGINT / SIGTERM
// (ReplayExitCode).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "kvtier/config.h"
#include "tools/bench/cli_checks.h"
#include "tools/bench/growth_bench_cli.h"
#include "tools/bench/host_bench.h"
#include "tools/bench/nvme_bench_cli.h"
#include "tools/bench/redis_bench_cli.h"
#include "tools/bench/remote_bench_cli.h"
#include "tools/bench/replay.h"
#include "tools/bench/report.h"
#include "tools/bench/sweep_cli.h"

namespace {

using kvtier::bench::HostBenchOptions;
using kvtier::bench::kUnsigned32;
using kvtier::bench::kUnsigned64;
using kvtier::bench::ReplayOptions;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;

struct ReplayFlags {
  ReplayOptions options;
  bool generate = false;
  std::string gen_spec;
  std::string admin_socket;
  bool json = false;
};

struct HostFlags {
  std::vector<std::string> block_sizes = {"64KiB", "256KiB", "1MiB", "4MiB"};
  std::string total = "512MiB";
  uint32_t queue_depth = 16;
  uint32_t rounds = 3;
  bool json = false;
};

// A one-line bar on stderr, redrawn at most every percent.
void DrawProgress(uint64_t done, uint64_t total) {
  const uint64_t pct = total == 0 ? 100 : done * 100 / total;
  const uint64_t prev = total == 0 ? 100 : (done - 1) * 100 / total;
  if (done != total && pct == prev && done != 1) return;
  constexpr int kWidth = 40;
  const int fill = static_cast<int>(pct * kWidth / 100);
  std::fprintf(stderr, "\r[%s%s] %3llu%% %llu/%llu requests", std::string(fill, '=').c_str(),
               std::string(kWidth - fill, ' ').c_str(), static_cast<unsigned long long>(pct),
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
  if (done == total) std::fputc('\n', stderr);
}

// SIGINT or SIGTERM ends a replay after its request in progress, so that
// the runtime shuts down as at the end (the shutdown writeback runs, the
// admin socket file goes); a second one ends the process at once.
std::atomic<int> g_replay_signal{0};

void OnReplaySignal(int sig) { g_replay_signal.store(sig); }

void HandleReplaySignals() {
  struct sigaction sa {};
  sa.sa_handler = OnReplaySignal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// `text` as a YAML double-quoted scalar: a path given on the command line
// is taken as it is, not as YAML (where " #" starts a comment and "~" is
// null).
std::string YamlQuoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

int RunReplayCommand(ReplayFlags& flags) {
  ReplayOptions& options = flags.options;
  if (!flags.gen_spec.empty()) flags.generate = true;
  if (!flags.admin_socket.empty()) {
    options.overrides.push_back("runtime.admin_socket=" + YamlQuoted(flags.admin_socket));
  }
  if (flags.generate == !options.trace_path.empty()) {
    std::cerr << "kvtier-bench replay: give exactly one of --trace FILE and --generate/--gen\n";
    return kExitUsage;
  }
  if (flags.generate) {
    options.synthetic.emplace();
    kvtier::Status st = kvtier::bench::ApplySyntheticSpec(flags.gen_spec, &*options.synthetic);
    if (!st.ok()) {
      std::cerr << "kvtier-bench replay: --gen: " << st.message() << "\n";
      return kExitUsage;
    }
  }
  if (!flags.json && isatty(STDOUT_FILENO)) options.progress = DrawProgress;
  HandleReplaySignals();
  options.interrupt = &g_replay_signal;
  kvtier::Result<kvtier::bench::ReplayReport> report = kvtier::bench::RunReplay(options);
  if (!report.ok()) {
    std::cerr << "kvtier-bench replay: " << report.status().ToString() << "\n";
    return kExitUsage;
  }
  if (report->interrupted_by != 0 && options.progress) std::fputc('\n', stderr);  // the bar's line
  if (flags.json) {
    std::cout << kvtier::bench::ReplayReportJson(*report) << "\n";
  } else {
    std::cout << kvtier::bench::FormatReplayReport(*report);
  }
  return kvtier::bench::ReplayExitCode(*report);
}

int RunHostCommand(const HostFlags& flags) {
  HostBenchOptions options;
  options.block_sizes.clear();
  for (const std::string& text : flags.block_sizes) {
    kvtier::Result<uint64_t> size = kvtier::ParseByteSize(text);
    if (!size.ok()) {
      std::cerr << "kvtier-bench host: --block-sizes: " << size.status().message() << "\n";
      return kExitUsage;
    }
    options.block_sizes.push_back(*size);
  }
  kvtier::Result<uint64_t> total = kvtier::ParseByteSize(flags.total);
  if (!total.ok()) {
    std::cerr << "kvtier-bench host: --total: " << total.status().message() << "\n";
    return kExitUsage;
  }
  options.total_bytes = *total;
  options.queue_depth = flags.queue_depth;
  options.rounds = flags.rounds;
  if (kvtier::Status st = options.Validate(); !st.ok()) {
    std::cerr << "kvtier-bench host: " << st.message() << "\n";
    return kExitUsage;
  }
  auto rows = kvtier::bench::RunHostBench(options);
  if (!rows.ok()) {
    std::cerr << "kvtier-bench host: " << rows.status().ToString() << "\n";
    return kExitUsage;
  }
  std::cout << (flags.json ? kvtier::bench::HostBenchJson(*rows) + "\n"
                           : kvtier::bench::FormatHostBench(*rows));
  return kExitOk;
}

void AddReplay(CLI::App& app, ReplayFlags& f) {
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "replay a request trace against a runtime; exit 1: a loaded block had wrong bytes, "
      "2: bad arguments, config or trace, or a runtime that cannot open with them, 3: some "
      "loads, saves or lookups failed, 128+N: stopped by signal N");
  cmd->add_option("--config", f.options.config_path, "YAML config file")->required();
  cmd->add_option("--trace", f.options.trace_path, "Mooncake JSONL trace");
  cmd->add_flag("--generate", f.generate, "replay a synthetic agentic trace instead");
  cmd->add_option("--gen", f.gen_spec,
                  "generator options key=value,... (seed, sessions, steps, system_prompts, "
                  "system_prompt_blocks, initial_blocks, growth_blocks, growth_jitter, "
                  "output_tokens, session_stagger_ms, step_interval_ms, interval_jitter, "
                  "block_tokens); implies --generate");
  cmd->add_option("--set", f.options.overrides, "config override dotted.path=value (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--limit", f.options.limit, "replay at most N requests (0 = all)")
      ->check(kUnsigned64);
  cmd->add_option("--restart-at", f.options.restart_at,
                  "after N requests, shut the runtime down and open it again (0 = never); "
                  "the report adds the hits after the restart")
      ->check(kUnsigned64);
  cmd->add_option("--timeout-ms", f.options.timeout_ms, "deadline of each load (at most one day)")
      ->check(kUnsigned64)
      ->capture_default_str();
  cmd->add_option("--admin-socket", f.admin_socket,
                  "serve /stats and /metrics on this Unix socket during the replay "
                  "(same as --set runtime.admin_socket=PATH; see kvtier-inspect watch)");
  cmd->add_flag("--json", f.json, "print one JSON object");
}

void AddHost(CLI::App& app, HostFlags& f) {
  CLI::App* cmd = app.add_subcommand("host", "host tier write+read throughput vs memcpy");
  cmd->add_option("--block-sizes", f.block_sizes, "comma-separated block sizes")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--total", f.total, "bytes moved per measurement")->capture_default_str();
  cmd->add_option("--queue-depth", f.queue_depth, "blocks per batch")
      ->check(kUnsigned32)
      ->capture_default_str();
  cmd->add_option("--rounds", f.rounds, "alternating measurements; best kept")
      ->check(kUnsigned32)
      ->capture_default_str();
  cmd->add_flag("--json", f.json, "print one JSON object");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtier-bench: trace replay and tier throughput"};
  app.require_subcommand(1);
  ReplayFlags replay;
  HostFlags host;
  AddReplay(app, replay);
  AddHost(app, host);
  kvtier::bench::SweepFlags sweep;
  kvtier::bench::AddSweepCommand(app, sweep);
  kvtier::bench::RedisBenchFlags redis;
  kvtier::bench::AddRedisBenchCommand(app, redis);
  kvtier::bench::RemoteBenchFlags remote;
  kvtier::bench::AddRemoteBenchCommand(app, remote);
  kvtier::bench::NvmeBenchFlags nvme;
  kvtier::bench::AddNvmeBenchCommand(app, nvme);
  kvtier::bench::NvmePathFlags nvme_path;
  kvtier::bench::AddNvmePathCommand(app, nvme_path);
  kvtier::bench::GrowthBenchOptions growth;
  kvtier::bench::AddGrowthBenchCommand(app, growth);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help ends with exit code 0; every other parse error is a usage error.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (app.got_subcommand("replay")) return RunReplayCommand(replay);
  if (app.got_subcommand("nvme")) return kvtier::bench::RunNvmeBenchCommand(nvme);
  if (app.got_subcommand("nvme-path")) return kvtier::bench::RunNvmePathCommand(nvme_path);
  if (app.got_subcommand("sweep")) return kvtier::bench::RunSweepCommand(sweep);
  if (app.got_subcommand("redis")) return kvtier::bench::RunRedisBenchCommand(redis);
  if (app.got_subcommand("remote")) return kvtier::bench::RunRemoteBenchCommand(remote);
  if (app.got_subcommand("growth")) return kvtier::bench::RunGrowthBenchCommand(growth);
  return RunHostCommand(host);
}
