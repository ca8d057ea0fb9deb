// kvtier-inspect run as a user runs it: against a live runtime, config files,
// the shipped trace; output fields and exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvtier/config.h"
#include "tests/inspect/inspect_test_util.h"

namespace kvtier::testing {
namespace {

using nlohmann::json;

struct CliRun {
  int rc = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Example(const std::string& name) {
  return std::string(KVTIER_SOURCE_DIR) + "/config/examples/" + name;
}

class InspectCli : public ::testing::Test {
 protected:
  CliRun Inspect(const std::string& args) {
    const std::string cmd = std::string("timeout 30 ") + KVTIER_INSPECT_BIN + " " + args + " >" +
                            dir_.File("out") + " 2>" + dir_.File("err") + " </dev/null";
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = Slurp(dir_.File("out"));
    r.err = Slurp(dir_.File("err"));
    return r;
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_.File(name)) << text;
    return dir_.File(name);
  }
  std::string Socket() const { return dir_.File("admin.sock"); }

  TempDir dir_;
};

TEST_F(InspectCli, StatsAgainstALiveRuntime) {
  auto s = OpenScenario(Socket());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RunScenario(*s);

  CliRun r = Inspect("stats --json --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["lookup_hit_blocks"], 4);
  EXPECT_EQ(j["saved_blocks"], 4);
  EXPECT_EQ(j["load_failures"], 2);
  EXPECT_EQ(j["tiers"].size(), 2u);

  r = Inspect("stats --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* want : {"\nhit blocks            4 (66.7%)\n",
                           "\nmiss blocks                   2\n",
                           "\nhit tokens                   32\n",
                           "\nload latency: 2 requests, mean 0.000 ms, p50 <= 0.050 ms, "
                           "p99 <= 0.050 ms\n",
                           "\nhost  cold       1   4 KiB\n",
                           "\nload  not_found       2\n"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n--- in ---\n" << r.out;
  }
}

TEST_F(InspectCli, TiersTopAndWatch) {
  auto s = OpenScenario(Socket());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RunScenario(*s);

  CliRun r = Inspect("tiers --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')),
            "tier  type  capacity    used   used%  blocks  unclaimed  hits    read  written  "
            "evicted  demoted  admitted  refused  errors  corrupt");
  // The hub's read: four blocks loaded and one demoted.
  EXPECT_NE(r.out.find("\nhost  host    16 KiB  16 KiB  100.0%       4          0     3  20 KiB   "
                       "20 KiB        1        1         0        0       0        0\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\ncold  host    32 KiB   4 KiB   12.5%       1          0     1   4 KiB   "
                       " 4 KiB        0        0         1        0       0        0\n"),
            std::string::npos)
      << r.out;

  r = Inspect("tiers --json --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["tiers"][1]["hit_blocks"], 1);

  r = Inspect("top --json --interval-ms 50 --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  json t = json::parse(r.out);
  EXPECT_GT(t["interval_s"].get<double>(), 0.04);
  EXPECT_EQ(t["moves"].size(), 4u);
  EXPECT_EQ(t["moves"][0]["bytes_per_s"], 0.0);  // nothing moved between the samples
  r = Inspect("top --interval-ms 50 --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\ngpu -> host  "), std::string::npos) << r.out;

  r = Inspect("watch --json --count 3 --interval-ms 20 --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream lines(r.out);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    EXPECT_EQ(json::parse(line)["loaded_blocks"], 4);
  }
  EXPECT_EQ(n, 3);
  r = Inspect("watch --count 2 --interval-ms 20 --socket " + Socket());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("(refresh 2)\nlookups 1, hit blocks 4 of 6 (66.7%), saved 4, loaded 4\n"),
            std::string::npos)
      << r.out;
}

TEST_F(InspectCli, NoRuntimeOnTheSocketIsExitCode1) {
  for (const char* cmd : {"stats", "tiers", "top", "watch --count 1"}) {
    CliRun r = Inspect(std::string(cmd) + " --socket " + dir_.File("nobody.sock"));
    EXPECT_EQ(r.rc, 1) << cmd;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "kvtier-inspect: unavailable: admin socket " + dir_.File("nobody.sock") +
                         ": cannot connect: No such file or directory (is a runtime running "
                         "with runtime.admin_socket set?)\n")
        << cmd;
  }
}

TEST_F(InspectCli, ConfigValidate) {
  CliRun r = Inspect("config validate " + Example("default.yaml"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, Example("default.yaml") + ": valid; block 64 KiB; tiers: host (host, 256 MiB)\n");
  r = Inspect("config validate --json " + Example("default.yaml") +
              " --set runtime.admin_socket=/tmp/k.sock");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["block_bytes"], 65536);

  const std::string bad = Write("bad.yaml",
                                "tiers:\n"
                                "  - name: host\n"
                                "    type: host\n"
                                "    capacity: 8XiB\n");
  r = Inspect("config validate " + bad);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  ASSERT_EQ(r.err.rfind(bad + ":4:15: tiers.host.capacity: byte size '8XiB' has an unknown unit", 0),
            0u)
      << r.err;
  EXPECT_EQ(r.err, std::string(LoadConfigFile(bad).status().message()) + "\n");

  const std::string unknown = Write("unknown.yaml", "runtime:\n  admin_sockett: /tmp/x\n");
  r = Inspect("config validate --json " + unknown);
  EXPECT_EQ(r.rc, 1);
  json j = json::parse(r.out);
  EXPECT_EQ(j["valid"], false);
  EXPECT_EQ(j["error"].get<std::string>().rfind(unknown + ":2:3: ", 0), 0u) << j["error"];

  r = Inspect("config validate " + dir_.File("absent.yaml"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind(dir_.File("absent.yaml") + ": cannot open", 0), 0u) << r.err;
}

TEST_F(InspectCli, ConfigExplainFillsEveryDefault) {
  const std::string minimal = Write("min.yaml",
                                    "tiers:\n"
                                    "  - name: host\n"
                                    "    type: host\n"
                                    "    capacity: 1GiB\n");
  CliRun r = Inspect("config explain " + minimal);
  ASSERT_EQ(r.rc, 0) << r.err;
  // Columns are as wide as the longest key and value: the key of the longest
  // policy knob, "tiers.host.policy.marconi_continue_threshold", sets the first.
  const std::string pad(46, ' ');
  auto line = [&](const std::string& key, const std::string& value) {
    return "\n" + key + pad.substr(key.size()) + value + " ";
  };
  for (const std::string& want :
       {line("model.preset", "tiny"), line("runtime.worker_threads", "3"),
        line("runtime.admin_socket", "\"\""), line("tiers.host.capacity", "1GiB"),
        line("tiers.host.watermarks.high", "0.95"), line("tiers.host.admission", "[always]"),
        line("tiers.host.policy.reuse_ratio", "0.7"),
        std::string("# Unix socket serving GET /stats and /metrics; empty = off\n")}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n--- in ---\n" << r.out;
  }
  r = Inspect("config explain --json " + minimal + " --set mover.interval_ms=7");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  std::map<std::string, std::string> values;
  for (const json& k : j["keys"]) {
    EXPECT_FALSE(k["meaning"].get<std::string>().empty()) << k;
    values[k["key"]] = k["value"];
  }
  EXPECT_EQ(values.size(), j["keys"].size()) << "keys are unique";
  EXPECT_EQ(values["mover.interval_ms"], "7");
  EXPECT_EQ(values["model.block_tokens"], "512");
  EXPECT_EQ(values["hashing.algorithm"], "xxh3_128");
  EXPECT_EQ(values["tiers.host.mlock"], "true");
  EXPECT_EQ(values["runtime.gpu_watermark"], "0.01");

  r = Inspect("config explain " + Write("b.yaml", "model: [1]\n"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("b.yaml:1:"), std::string::npos) << r.err;
  // With --json a failure is a document too, as validate's.
  r = Inspect("config explain --json " + dir_.File("b.yaml"));
  EXPECT_EQ(r.rc, 1);
  j = json::parse(r.out);
  EXPECT_EQ(j["valid"], false);
  EXPECT_EQ(j["file"], dir_.File("b.yaml"));
  EXPECT_NE(j["error"].get<std::string>().find("b.yaml:1:"), std::string::npos) << r.out;
}

TEST_F(InspectCli, TraceOfTheShippedArxivTrace) {
  const std::string trace =
      std::string(KVTIER_SOURCE_DIR) + "/traces/mooncake_arxiv_trace_first1000.jsonl";
  CliRun r = Inspect("trace " + trace);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("trace: " + trace + "\nmeasure ", 0), 0u) << r.out;
  for (const char* want : {"\nrequests                                 1000\n",
                           "\nblocks                                  19686\n",
                           "\nunique blocks                           12207\n",
                           "\nblocks under an id used for another         0\n",
                           "\ninfinite-cache block hit rate          0.3799\n",
                           "\ninfinite-cache full-block hits           7468\n",
                           "\ninfinite-cache full-block token hits  3823616\n",
                           "\ncold (first use)     12207  62.0%           -\n"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n--- in ---\n" << r.out;
  }
  r = Inspect("trace --json " + trace);
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["requests"], 1000);
  EXPECT_EQ(j["blocks"], 19686);
  EXPECT_EQ(j["unique_blocks"], 12207);
  EXPECT_EQ(j["renamed_blocks"], 0);
  EXPECT_EQ(j["infinite_cache_hit_blocks"], 7479);
  EXPECT_EQ(j["infinite_cache_full_hit_blocks"], 7468);
  EXPECT_EQ(j["infinite_cache_full_hit_tokens"], 3823616);
  EXPECT_NEAR(j["infinite_cache_full_block_hit_rate"].get<double>(), 7468.0 / 19686, 1e-12);
  uint64_t total = j["reuse_distance"]["cold"];
  for (const json& b : j["reuse_distance"]["buckets"]) total += b["accesses"].get<uint64_t>();
  EXPECT_EQ(total, 19686u) << "every access is cold or has a distance";
}

TEST_F(InspectCli, TraceReuseDistancesOfAHandBuiltTrace) {
  // Blocks: A B | A C | A B, B partial (488 tokens) both times. Distances:
  // A cold, B cold, A 1 (B between), C cold, A 1 (C), B 2 (A and C).
  const std::string t = Write("t.jsonl",
                              "{\"timestamp\":0,\"input_length\":1000,\"output_length\":1,"
                              "\"hash_ids\":[1,2]}\n"
                              "{\"timestamp\":1,\"input_length\":1024,\"output_length\":1,"
                              "\"hash_ids\":[1,3]}\n"
                              "{\"timestamp\":2,\"input_length\":1000,\"output_length\":1,"
                              "\"hash_ids\":[1,2]}\n");
  CliRun r = Inspect("trace --json " + t);
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["reuse_distance"]["cold"], 3);
  EXPECT_EQ(j["reuse_distance"]["buckets"],
            json::parse(R"([{"min":0,"max":0,"accesses":0},{"min":1,"max":1,"accesses":2},
                            {"min":2,"max":3,"accesses":1}])"));
  EXPECT_EQ(j["infinite_cache_hit_blocks"], 3);
  EXPECT_EQ(j["infinite_cache_hit_tokens"], 512 + 1000);
  // Full blocks: B is partial, so only A hits.
  EXPECT_EQ(j["infinite_cache_full_hit_blocks"], 2);
  EXPECT_EQ(j["infinite_cache_full_hit_tokens"], 512 + 512);
  r = Inspect("trace " + Write("bad.jsonl", "{\"timestamp\": -1}\n"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("bad.jsonl:1: "), std::string::npos) << r.err;
}

// File names and config text are bytes: one that is not UTF-8 comes out of
// --json as U+FFFD, in a document that parses, never as an abort.
TEST_F(InspectCli, JsonOutputReplacesBytesThatAreNotUtf8) {
  const std::string kReplaced = "\xef\xbf\xbd";
  CliRun r = Inspect("config validate --json '" + Write("c.yaml", "runtime:\n  \xff: 1\n") + "'");
  EXPECT_EQ(r.rc, 1) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
  EXPECT_EQ(j["valid"], false);
  EXPECT_NE(j["error"].get<std::string>().find(kReplaced), std::string::npos) << j["error"];

  const std::string t = Write("t\xff.jsonl",
                              "{\"timestamp\":0,\"input_length\":512,\"output_length\":1,"
                              "\"hash_ids\":[1]}\n");
  r = Inspect("trace --json '" + t + "'");
  EXPECT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
  EXPECT_EQ(j["trace"], dir_.File("t" + kReplaced + ".jsonl"));
  EXPECT_EQ(j["requests"], 1);
}

// The stores themselves: inspect_nvme_test.cc and inspect_redis_test.cc.
TEST_F(InspectCli, Usage) {
  CliRun r = Inspect("nvme /tmp/store frobnicate");
  EXPECT_EQ(r.rc, 2);
  r = Inspect("redis redis://127.0.0.1:6379 frobnicate");
  EXPECT_EQ(r.rc, 2);
  r = Inspect("");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(Inspect("stats").rc, 2) << "--socket is required";
  for (const char* cmd : {"", "stats", "tiers", "top", "watch", "config", "config validate",
                          "config explain", "trace", "nvme", "redis"}) {
    r = Inspect(std::string(cmd) + " --help");
    EXPECT_EQ(r.rc, 0) << cmd;
    EXPECT_NE(r.out.find("Exit codes: 0 done"), std::string::npos) << cmd << r.out;
    EXPECT_NE(r.out.find("a store a live process holds"), std::string::npos) << cmd << r.out;
  }
}

}  // namespace
}  // namespace kvtier::testing
