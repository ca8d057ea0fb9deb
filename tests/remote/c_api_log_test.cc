// The C API's log callback gets the runtime's warnings: a remote tier with
// one live kvtier-memd and one server that refuses connections opens, and
// says so through the callback instead of stderr.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/c_api.h"
#include "tests/support/memd_server.h"

namespace kvtier::testing {
namespace {

// A loopback port nothing listens on: bound, read, closed.
uint16_t ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

struct Lines {
  std::mutex mu;
  std::vector<std::pair<int, std::string>> all;
};

TEST(CApiLogTest, TierWarningsReachTheCallback) {
  auto live = MemdProcess::Start();
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  const uint16_t closed = ClosedPort();
  ASSERT_NE(closed, 0);
  const std::string down = "127.0.0.1:" + std::to_string(closed);
  const std::string yaml =
      "model:\n  preset: tiny\n  block_tokens: 16\n"
      "engine:\n  pool_blocks: 16\n"
      "tiers:\n"
      "  - {name: host, type: host, capacity: 1MiB, hugepages: false, mlock: false}\n"
      "  - name: remote\n    type: remote\n    capacity: 16MiB\n"
      "    servers: [\"" +
      (*live)->endpoint() + "\", \"" + down +
      "\"]\n"
      "    secret_file: " +
      (*live)->secret_file() + "\n";
  Lines lines;
  auto collect = [](void* user, int level, const char* message) {
    auto* l = static_cast<Lines*>(user);
    std::lock_guard lock(l->mu);
    l->all.emplace_back(level, message);
  };
  kvtier_runtime* rt = nullptr;
  ASSERT_EQ(kvtier_open(nullptr, yaml.c_str(), nullptr, 0, nullptr, collect, &lines, &rt),
            KVTIER_OK)
      << kvtier_last_error();
  kvtier_close(rt);
  std::lock_guard lock(lines.mu);
  bool warned = false;
  for (const auto& [level, message] : lines.all) {
    if (level == KVTIER_LOG_WARNING && message.find(down) != std::string::npos) warned = true;
  }
  EXPECT_TRUE(warned) << "no warning naming " << down << " among " << lines.all.size() << " lines";
}

}  // namespace
}  // namespace kvtier::testing
