// kvtier-memd's YAML file (tools/memd/memd_config.h): every error names the
// file, and where a value is at fault its line and column. (The binary's
// command line is in memd_cli_test.cc.)
#include "tools/memd/memd_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "tests/support/scratch_dir.h"

namespace kvtier::memd_tool {
namespace {

using internal::memd::MemdServerOptions;

class MemdConfig : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    return scratch_.Write(name, text);
  }
  // Loads `text` from m.yaml; the message of the error, or "" when it loads.
  std::string Error(const std::string& text) {
    MemdServerOptions o;
    std::string secret;
    Status s = LoadMemdConfig(Write("m.yaml", text), &o, &secret);
    if (s.ok()) return "";
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return std::string(s.message());
  }

  testing::ScratchDir scratch_{"kvtier_memd_config_"};
  const std::string dir_ = scratch_.path();
};

TEST_F(MemdConfig, ReadsEveryKey) {
  MemdServerOptions o;
  std::string secret;
  const std::string path = Write("m.yaml",
                                 "listen: \"127.0.0.1:0\"\n"
                                 "pool_size: 64MiB\n"
                                 "slot_size: 1MiB\n"
                                 "secret_file: /etc/s\n"
                                 "transport: rdma\n"
                                 "hugepages: false\n"
                                 "watermarks: {high: 0.9, low: 0.5}\n"
                                 "max_connections: 7\n"
                                 "lease_ms: 100\n"
                                 "handshake_timeout_ms: 200\n"
                                 "put_timeout_ms: 300\n"
                                 "reply_timeout_ms: 400\n");
  ASSERT_TRUE(LoadMemdConfig(path, &o, &secret).ok());
  EXPECT_EQ(o.listen, "127.0.0.1:0");
  EXPECT_EQ(o.pool.pool_bytes, 64u << 20);
  EXPECT_EQ(o.pool.slot_bytes, 1u << 20);
  EXPECT_EQ(secret, "/etc/s");
  EXPECT_EQ(o.transport, "rdma");
  EXPECT_FALSE(o.pool.hugepages);
  EXPECT_DOUBLE_EQ(o.pool.high_watermark, 0.9);
  EXPECT_DOUBLE_EQ(o.pool.low_watermark, 0.5);
  EXPECT_EQ(o.max_connections, 7u);
  EXPECT_EQ(o.lease_ms, 100u);
  EXPECT_EQ(o.handshake_timeout_ms, 200u);
  EXPECT_EQ(o.put_timeout_ms, 300u);
  EXPECT_EQ(o.reply_timeout_ms, 400u);
}

TEST_F(MemdConfig, FilesThatCannotBeRead) {
  MemdServerOptions o;
  std::string secret;
  Status s = LoadMemdConfig(dir_, &o, &secret);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), dir_ + ": cannot read config file: Is a directory");
  s = LoadMemdConfig(dir_ + "/missing.yaml", &o, &secret);
  EXPECT_EQ(s.message(),
            dir_ + "/missing.yaml: cannot read config file: No such file or directory");
  s = LoadMemdConfig(Write("big.yaml", std::string(2 << 20, '#')), &o, &secret);
  EXPECT_EQ(s.message(), dir_ + "/big.yaml: cannot read config file: larger than 1 MiB");

  // An empty file sets nothing: every default stays.
  const MemdServerOptions defaults;
  ASSERT_TRUE(LoadMemdConfig(Write("empty.yaml", ""), &o, &secret).ok());
  EXPECT_EQ(o.listen, defaults.listen);
  EXPECT_EQ(o.pool.pool_bytes, defaults.pool.pool_bytes);
  EXPECT_EQ(secret, "");
}

TEST_F(MemdConfig, TheDocumentMustBeAMap) {
  EXPECT_EQ(Error("7\n"),
            dir_ + "/m.yaml:1:1: the document is '7'; expected a map of kvtier-memd settings");
  EXPECT_EQ(Error("- listen\n"),
            dir_ + "/m.yaml:1:1: the document is a list; expected a map of kvtier-memd settings");
  EXPECT_NE(Error("listen: [\n").find(dir_ + "/m.yaml:"), std::string::npos);
}

TEST_F(MemdConfig, BadValuesNameTheirPlace) {
  const std::string f = dir_ + "/m.yaml:";
  const std::string map = "; expected a map of high and/or low, like {high: 0.95, low: 0.85}";
  EXPECT_EQ(Error("watermarks: 0.9\n"), f + "1:13: watermarks is '0.9'" + map);
  EXPECT_EQ(Error("watermarks:\n"), f + "1:1: watermarks is empty" + map);
  EXPECT_EQ(Error("listen: x\nwatermarks: {high: 0.5, low: 0.9}\n"),
            f + "2:13: watermarks are high 0.5, low 0.9; expected 0 < low < high <= 1");
  // Only high given: checked against the default low (0.85).
  EXPECT_EQ(Error("watermarks:\n  high: 0.8\n"),
            f + "2:3: watermarks are high 0.8, low 0.85; expected 0 < low < high <= 1");
  EXPECT_EQ(Error("watermarks: {middle: 0.5}\n"),
            f + "1:14: unknown key 'watermarks.middle'; expected high or low");
  EXPECT_EQ(Error("slot_size: 0\n"),
            f + "1:12: slot_size is 0 bytes; expected more than the 64-byte block header and at "
                "most 1GiB + 64");
  EXPECT_EQ(Error("slot_size: 2GiB\n").rfind(f + "1:12: slot_size is 2147483648 bytes", 0), 0u);
  EXPECT_EQ(Error("transport: udp\n"),
            f + "1:12: transport 'udp' is unknown; expected tcp or rdma");
  EXPECT_EQ(Error("lease_ms: 60001\n"),
            f + "1:11: lease_ms is 60001, out of range; expected a whole number from 1 to 60000");
  EXPECT_EQ(Error("pool_size: lots\n").rfind(f + "1:12: ", 0), 0u);
  EXPECT_EQ(Error("max_connections: 0\n").rfind(f + "1:18: ", 0), 0u);
  EXPECT_EQ(Error("reply_timeout_ms: 0\n").rfind(f + "1:19: ", 0), 0u);
  // Past 32 bits the same range is named (it said 1 to 4294967295).
  EXPECT_EQ(Error("max_connections: 99999999999\n"),
            f + "1:18: max_connections is 99999999999, out of range; expected a whole number from "
                "1 to 65536");
  EXPECT_EQ(
      Error("max_connections: 65537\n"),
      f + "1:18: max_connections is 65537, out of range; expected a whole number from 1 to 65536");
  EXPECT_EQ(Error("hugepages: maybe\n").rfind(f + "1:12: ", 0), 0u);
  EXPECT_EQ(Error("listne: x\n").rfind(f + "1:1: unknown key 'listne'", 0), 0u);
}

}  // namespace
}  // namespace kvtier::memd_tool
