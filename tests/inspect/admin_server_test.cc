// The admin endpoint of a live runtime: what it serves, both request forms,
// how it treats the socket path, and running out of descriptors.
#include "core/admin_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kvtier/metrics.h"
#include "tests/inspect/inspect_test_util.h"
#include "tests/support/returns_within.h"
#include "tools/inspect/admin_client.h"

namespace kvtier::internal {
// Stops a server without joining its thread, so that a test can order the
// stop before requests the thread has yet to take.
class AdminServerTestPeer {
 public:
  static void RequestStop(AdminServer& s) { s.RequestStop(); }
};
}  // namespace kvtier::internal

namespace kvtier::testing {
namespace {

using inspect::FetchAdmin;
using internal::UniqueFd;
constexpr auto kTimeout = std::chrono::milliseconds(5000);

UniqueFd Connect(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  return fd;
}

// Sends `request` as is and reads until the server closes.
std::string RawRequest(const std::string& path, const std::string& request) {
  UniqueFd fd = Connect(path);
  EXPECT_EQ(write(fd.get(), request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd.get(), buf, sizeof(buf))) > 0;) out.append(buf, n);
  return out;
}

TEST(AdminEndpoint, ServesStatsAndMetricsOfTheRuntime) {
  TempDir dir;
  auto s = OpenScenario(dir.File("admin.sock"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  RunScenario(*s);
  const RuntimeStats st = s->runtime->Stats();  // nothing runs between here and the fetches

  auto stats = FetchAdmin(dir.File("admin.sock"), "/stats", kTimeout);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(*stats, RenderStatsJson(st) + "\n");
  auto doc = nlohmann::json::parse(*stats);
  EXPECT_EQ(doc["lookup_hit_blocks"], 4);
  EXPECT_EQ(doc["tiers"][1]["name"], "cold");
  EXPECT_EQ(doc["moves"][2]["from"], "host");
  EXPECT_EQ(doc["moves"][2]["to"], "cold");
  EXPECT_EQ(doc["errors"][0]["code"], "not_found");

  auto metrics = FetchAdmin(dir.File("admin.sock"), "/metrics", kTimeout);
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  EXPECT_EQ(*metrics, RenderPrometheusText(st));
  EXPECT_NE(metrics->find("\nkvtier_moved_bytes_total{from=\"gpu\",to=\"host\"} 16384\n"),
            std::string::npos);

  auto missing = FetchAdmin(dir.File("admin.sock"), "/nope", kTimeout);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "admin socket " + dir.File("admin.sock") +
                                            ": unknown path /nope; expected /stats, /metrics "
                                            "or /health");
}

TEST(AdminEndpoint, PlainLineRequestsGetTheBodyAlone) {
  TempDir dir;
  auto s = OpenScenario(dir.File("a.sock"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(RawRequest(dir.File("a.sock"), "GET /health\n"),
            "ok\npaths: /stats /metrics /health\n");
  // No newline: the end of the client's stream ends the request.
  UniqueFd fd = Connect(dir.File("a.sock"));
  ASSERT_EQ(write(fd.get(), "GET /health", 11), 11);
  shutdown(fd.get(), SHUT_WR);
  char buf[256];
  ssize_t n = read(fd.get(), buf, sizeof(buf));
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0), "ok\npaths: /stats /metrics /health\n");
  EXPECT_EQ(RawRequest(dir.File("a.sock"), "POST /stats HTTP/1.1\r\nHost: x\r\n\r\n"),
            "HTTP/1.0 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 33\r\nConnection: close\r\n\r\nmethod POST not allowed; use GET\n");
  EXPECT_EQ(RawRequest(dir.File("a.sock"), "hello\n"), "bad request: expected 'GET /path'\n");
}

// A malformed HTTP request is a 400, not a 404 (kvtier-inspect took it for
// an unknown path); one whose head is too long gets a 431 it can read, where
// closing with its bytes unread reset the connection with no status at all.
TEST(AdminEndpoint, MalformedAndOversizedRequestsGetTheirStatus) {
  TempDir dir;
  auto s = OpenScenario(dir.File("a.sock"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(RawRequest(dir.File("a.sock"), "GET  /stats HTTP/1.0\r\n\r\n"),
            "HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 34\r\nConnection: close\r\n\r\nbad request: expected 'GET /path'\n");
  const std::string big = "GET /stats HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n";
  const std::string reply = RawRequest(dir.File("a.sock"), big);
  EXPECT_EQ(reply.rfind("HTTP/1.0 431 Request Header Fields Too Large\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("request head over 8192 bytes"), std::string::npos) << reply;
  // Still serving.
  auto stats = FetchAdmin(dir.File("a.sock"), "/health", kTimeout);
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
}

// Clients are answered one at a time: three that connect and never send
// used to hold the next one 3 s, past kvtier-inspect's 2 s wait.
TEST(AdminEndpoint, AFewSilentClientsDoNotOutlastInspectsWait) {
  TempDir dir;
  auto s = OpenScenario(dir.File("a.sock"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(Connect(dir.File("a.sock")));
  auto health = FetchAdmin(dir.File("a.sock"), "/health", std::chrono::milliseconds(2000));
  EXPECT_TRUE(health.ok()) << health.status().ToString();
}

TEST(AdminEndpoint, StalledClientDoesNotBlockOthersOrTheEngine) {
  TempDir dir;
  auto s = OpenScenario(dir.File("a.sock"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  UniqueFd stalled = Connect(dir.File("a.sock"));  // sends nothing
  RunScenario(*s);                                 // the engine's calls go on meanwhile
  auto stats = FetchAdmin(dir.File("a.sock"), "/stats", kTimeout);  // served once it times out
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*stats)["saved_blocks"], 4);
  char c;
  EXPECT_EQ(read(stalled.get(), &c, 1), 0);  // the server dropped it
}

TEST(AdminEndpoint, SocketPathRules) {
  TempDir dir;
  const std::string path = dir.File("a.sock");
  {
    auto first = OpenScenario(path);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    auto second = OpenScenario(path);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().ToString(),
              "unavailable: admin socket " + path +
                  " is in use (another runtime, in this process or another, listens there)");
    EXPECT_TRUE(FetchAdmin(path, "/health", kTimeout).ok());  // the first still serves
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "Shutdown removes the socket file";

  // A socket file nobody listens on (a crashed process) is replaced.
  ASSERT_TRUE(LeaveStaleSocket(path));
  ASSERT_EQ(access(path.c_str(), F_OK), 0);
  {
    auto s = OpenScenario(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(FetchAdmin(path, "/health", kTimeout).ok());
  }

  std::ofstream(dir.File("plain")) << "not a socket";
  auto not_socket = OpenScenario(dir.File("plain"));
  ASSERT_FALSE(not_socket.ok());
  EXPECT_EQ(not_socket.status().ToString(),
            "invalid_argument: admin socket " + dir.File("plain") + " exists and is not a socket");

  auto too_long = OpenScenario(dir.File(std::string(120, 'x')));
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);

  auto unreachable = FetchAdmin(dir.File("none.sock"), "/stats", kTimeout);
  EXPECT_EQ(unreachable.status().code(), StatusCode::kUnavailable);
}

// Two runtimes starting at once on the path of a stale socket file: each
// probe found it stale, and the second's unlink took the first's new socket
// from it, so both started and one could not be reached. Exactly one starts.
TEST(AdminEndpoint, TwoStartingOnAStaleSocketAtOnceStartOne) {
  TempDir dir;
  const std::string path = dir.File("race.sock");
  auto handler = [](std::string_view) { return internal::AdminResponse{.body = "up\n"}; };
  for (int round = 0; round < 300; ++round) {
    ASSERT_TRUE(LeaveStaleSocket(path));
    std::atomic<int> ready{0};
    auto start = [&] {
      ++ready;
      while (ready.load() < 2) {
      }
      return internal::AdminServer::Start(path, handler, nullptr);
    };
    auto other = std::async(std::launch::async, start);
    auto mine = start();
    auto theirs = other.get();
    ASSERT_EQ(mine.ok() + theirs.ok(), 1) << "round " << round;
    ASSERT_EQ(access(path.c_str(), F_OK), 0) << "round " << round << ": the socket lost its name";
    const Status refused = mine.ok() ? theirs.status() : mine.status();
    EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.ToString();
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the last one removes its file";
}

// Something else holds the socket directory's lock for as long as it runs
// (`flock DIR command` around the engine): the start waits its turn for a
// while, then goes on. It used to wait for the lock for good.
TEST(AdminEndpoint, ADirectoryLockedForGoodDoesNotHoldTheStart) {
  TempDir dir;
  const std::string path = dir.File("locked.sock");
  const int held = open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX), 0);
  auto handler = [](std::string_view) { return internal::AdminResponse{.body = "up\n"}; };
  auto started = std::async(std::launch::async,
                            [&] { return internal::AdminServer::Start(path, handler, nullptr); });
  const bool ready = started.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  close(held);  // lets a start still waiting go on, so the test ends either way
  ASSERT_TRUE(ready) << "the start waited for the directory's lock";
  auto server = started.get();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto got = FetchAdmin(path, "/", std::chrono::seconds(2));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "up\n");
}

// A listener that accepts nothing (a stuck process) with its backlog full:
// opening a runtime on its path must not hang in the stale-socket probe,
// and a fetch must end at its deadline.
TEST(AdminEndpoint, AFullBacklogNeitherHangsOpenNorFetch) {
  TempDir dir;
  const std::string path = dir.File("stuck.sock");
  UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener.get(), 0), 0);
  std::vector<UniqueFd> pending;
  for (int i = 0; i < 64; ++i) {
    UniqueFd c(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (connect(c.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      ASSERT_EQ(errno, EAGAIN) << std::strerror(errno);
      break;
    }
    pending.push_back(std::move(c));
  }
  ASSERT_LT(pending.size(), 64u) << "the backlog never filled";

  // Shared, so that a call left behind by a failure has somewhere to write.
  auto second = std::make_shared<Result<Scenario>>(Status::Ok());
  ASSERT_TRUE(ReturnsWithin([second, path] { *second = OpenScenario(path); },
                            std::chrono::seconds(5), "Runtime::Open on the stuck socket"));
  ASSERT_FALSE(second->ok());
  EXPECT_EQ(second->status().ToString(),
            "unavailable: admin socket " + path +
                " is in use (another runtime, in this process or another, listens there)");
  auto stuck = std::make_shared<Result<std::string>>(Status::Ok());
  ASSERT_TRUE(ReturnsWithin(
      [stuck, path] { *stuck = FetchAdmin(path, "/health", std::chrono::milliseconds(200)); },
      std::chrono::seconds(5)))
      << "FetchAdmin hung past its deadline";
  EXPECT_EQ(stuck->status().code(), StatusCode::kDeadlineExceeded) << stuck->status().ToString();
}

// Out of descriptors with a client queued, accept fails and the listener
// stays readable: the server thread waits between tries instead of spinning
// on a core, and serves the client once a descriptor is free again.
TEST(AdminEndpoint, OutOfDescriptorsTheServerWaitsInsteadOfSpinning) {
  TempDir dir;
  const std::string path = dir.File("fd.sock");
  auto server = internal::AdminServer::Start(
      path, [](std::string_view) { return internal::AdminResponse{.body = "up\n"}; }, nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(old.rlim_cur, 256);
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) GTEST_SKIP() << "cannot lower RLIMIT_NOFILE";
  UniqueFd client = Connect(path);  // queued until accept finds a descriptor
  // Sent at once: the server may also accept before the descriptors run out,
  // and then waits only 250 ms for a request.
  ASSERT_EQ(send(client.get(), "GET /health\n", 12, MSG_NOSIGNAL), 12);
  std::vector<UniqueFd> hog;
  for (int fd; (fd = dup(client.get())) >= 0;) hog.emplace_back(fd);
  const bool exhausted = errno == EMFILE;
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // only the server runs
  getrusage(RUSAGE_SELF, &after);
  hog.clear();
  setrlimit(RLIMIT_NOFILE, &old);
  ASSERT_TRUE(exhausted);
  auto cpu_ms = [](const rusage& r) {
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000.0 +
           (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1000.0;
  };
  // A spinning thread burns most of the 500 ms even on a loaded machine;
  // waiting 100 ms between tries costs well under a millisecond.
  EXPECT_LT(cpu_ms(after) - cpu_ms(before), 50.0) << "the server thread spins on accept";
  const timeval bound{5, 0};  // a server that never serves fails the test, not hangs it
  ASSERT_EQ(setsockopt(client.get(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound)), 0);
  std::string out;
  char buf[64];
  for (ssize_t n; (n = read(client.get(), buf, sizeof(buf))) > 0;) out.append(buf, n);
  EXPECT_EQ(out, "up\n");
}

// A stop while one request is being answered and another waits in the
// queue, already sent: both are answered, so a `watch` following a runtime
// to its end sees the last refresh instead of a dropped connection.
TEST(AdminEndpoint, RequestsAlreadySentAreAnsweredAtShutdown) {
  TempDir dir;
  const std::string path = dir.File("stop.sock");
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  auto server = internal::AdminServer::Start(
      path,
      [&](std::string_view p) {
        if (p == "/slow") {
          entered.set_value();
          released.wait();
        }
        return internal::AdminResponse{.body = std::string(p) + " done\n"};
      },
      nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::future<void> slow_entered = entered.get_future();
  std::string slow;
  std::thread first([&] { slow = RawRequest(path, "GET /slow\n"); });
  // No ASSERT until `first` is joined: the handler must be released.
  EXPECT_EQ(slow_entered.wait_for(kTimeout), std::future_status::ready);
  UniqueFd queued = Connect(path);  // in the listener's queue: the thread is busy
  EXPECT_EQ(write(queued.get(), "GET /queued\n", 12), 12);
  const timeval bound{5, 0};
  EXPECT_EQ(setsockopt(queued.get(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound)), 0);
  internal::AdminServerTestPeer::RequestStop(**server);  // the stop comes first
  release.set_value();
  std::string out;
  char buf[64];
  for (ssize_t n; (n = read(queued.get(), buf, sizeof(buf))) > 0;) out.append(buf, n);
  first.join();
  EXPECT_EQ(slow, "/slow done\n");
  EXPECT_EQ(out, "/queued done\n");
  server->reset();
  EXPECT_EQ(FetchAdmin(path, "/health", kTimeout).status().code(), StatusCode::kUnavailable);
}

// Clients that keep connecting while the server stops: the stop ends within
// its grace. It served them for as long as they kept the listener's queue
// from emptying, and the runtime's Shutdown waited with it.
TEST(AdminEndpoint, ClientsThatKeepConnectingDoNotHoldTheStop) {
  TempDir dir;
  const std::string path = dir.File("busy.sock");
  // Each reply takes a while, so the clients keep the queue from emptying.
  auto server = internal::AdminServer::Start(
      path,
      [](std::string_view) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return internal::AdminResponse{.body = "ok\n"};
      },
      nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&] {
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path.data(), path.size());
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!stop.load() && std::chrono::steady_clock::now() < give_up) {
        UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
          (void)send(fd.get(), "GET /health\n", 12, MSG_NOSIGNAL);
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  server->reset();  // RequestStop, then join: what the runtime's Shutdown does first
  const auto took = std::chrono::steady_clock::now() - start;
  stop = true;
  for (std::thread& t : clients) t.join();
  // The grace is 200 ms, plus one client's reply; far less than the clients'
  // 20 s on a loaded machine.
  EXPECT_LT(took, std::chrono::seconds(3));
}

// A server that closes without a byte of reply is going away: Unavailable,
// which `watch` takes as the end of the runtime it follows.
TEST(AdminEndpoint, ClosedWithoutAReplyIsUnavailable) {
  TempDir dir;
  const std::string path = dir.File("closing.sock");
  UniqueFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener.get(), 4), 0);
  std::thread closer([&] {  // takes the whole request, then closes
    pollfd p{listener.get(), POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return;
    UniqueFd conn(accept(listener.get(), nullptr, nullptr));
    const timeval bound{5, 0};
    setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
    std::string request;
    char buf[256];
    for (ssize_t n; request.find("\r\n\r\n") == std::string::npos &&
                    (n = read(conn.get(), buf, sizeof(buf))) > 0;) {
      request.append(buf, n);
    }
  });
  auto r = FetchAdmin(path, "/stats", kTimeout);
  closer.join();
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_EQ(r.status().message(),
            "admin socket " + path + ": the runtime closed the connection without answering");
}

// A reply that runs out of memory (or a handler that throws) is answered
// with a fixed 500 instead of ending the process, and the next is served.
TEST(AdminEndpoint, AHandlerThatRunsOutOfMemoryGetsA500AndTheServerGoesOn) {
  TempDir dir;
  const std::string path = dir.File("oom.sock");
  auto server = internal::AdminServer::Start(
      path,
      [](std::string_view p) {
        if (p == "/oom") throw std::bad_alloc();
        if (p == "/throw") throw std::runtime_error("handler bug");
        return internal::AdminResponse{.body = "up\n"};
      },
      nullptr);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  for (const char* p : {"/oom", "/throw"}) {
    auto failed = FetchAdmin(path, p, kTimeout);
    ASSERT_FALSE(failed.ok()) << p;
    EXPECT_NE(failed.status().message().find(
                  "HTTP 500: admin endpoint: out of memory, or its handler threw; retry"),
              std::string::npos)
        << failed.status().ToString();
    auto up = FetchAdmin(path, "/health", kTimeout);
    ASSERT_TRUE(up.ok()) << up.status().ToString();
    EXPECT_EQ(*up, "up\n");
  }
}

TEST(AdminEndpoint, ParsesRequestLines) {
  std::string method, path;
  bool http = false;
  EXPECT_TRUE(internal::ParseAdminRequest("GET /stats\n", &method, &path, &http));
  EXPECT_EQ(method, "GET");
  EXPECT_EQ(path, "/stats");
  EXPECT_FALSE(http);
  EXPECT_TRUE(internal::ParseAdminRequest("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", &method,
                                          &path, &http));
  EXPECT_EQ(path, "/metrics");
  EXPECT_TRUE(http);
  EXPECT_FALSE(internal::ParseAdminRequest("GET stats\n", &method, &path, &http));
  EXPECT_FALSE(internal::ParseAdminRequest("GET /a SPDY/3\n", &method, &path, &http));
  EXPECT_FALSE(internal::ParseAdminRequest("\n", &method, &path, &http));
}

}  // namespace
}  // namespace kvtier::testing
