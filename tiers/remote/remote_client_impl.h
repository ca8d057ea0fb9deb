// RemoteClient's internals (remote_client.h), shared by the files that
// implement it:
//   remote_client.cc       servers, channels, reconnect backoff, the public calls
//   remote_client_link.cc  one connection: connect, handshake, deadlines, abort
//   remote_client_tcp.cc   framing requests and reading replies on the socket
//   remote_client_rdma.cc  the RDMA handshake, granted writes, leased reads
// Links and channels live on the client's loop thread; the public calls
// come from any thread and post their requests to it (ClientImpl::Route).
// Only those files include this header (it pulls in Boost.Asio).
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <set>

#include "io/asio_loop.h"
#include "tiers/remote/rdma_link.h"
#include "tiers/remote/remote_auth.h"
#include "tiers/remote/remote_client.h"

namespace kvtier::internal::memd {

namespace asio = boost::asio;
using asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

// What a request waits for from the server. A reply it does not wait for
// (a second LEASE_REPLY, a STATUS_REPLY before PUT_COMMIT was written) is a
// protocol violation: the link is closed and the request fails once.
enum class Await : uint8_t {
  kNothing,     // not sent yet, or its RDMA operations are in flight
  kRdmaReply,   // PUT_GRANT or LEASE_REPLY, once
  kFinalReply,  // STATUS_REPLY, GET_DATA / GET_STATUS per item, STATS_REPLY
};

// One request to one server (a chunk of a caller's batch); each item
// finishes exactly once, by reply, failure or shutdown.
struct Request {
  Opcode op = Opcode::kStats;
  uint32_t id = 0;
  NamespaceId ns;
  std::vector<BlockKey> keys;
  std::vector<std::span<std::byte>> dsts;                         // GET
  std::vector<std::span<const std::byte>> srcs;                   // PUT payloads
  std::vector<std::array<std::byte, kBlockHeaderBytes>> headers;  // PUT: sent; GET: received
  std::vector<uint8_t> done;
  size_t remaining = 0;
  ItemDone cb;
  std::function<void(const Stats&)> on_stats;
  // When its reply is late (op_timeout_ms from submission, or from the
  // handshake's end for one that waited for it), and the latest
  // it may be while the connection keeps moving bytes: the deadline plus its
  // bytes and those queued ahead of it at kFloorBytesPerSecond (Link::Tick).
  SteadyClock::time_point deadline;
  SteadyClock::time_point cap;
  uint64_t bytes = 0;  // payload bytes it moves, counted in Link::owed_bytes_
  Await await = Await::kNothing;
  // Its frames queued or being written. Each holds a reference to the
  // request, and no reply is taken until they are all out: PUT_DATA points
  // into `headers` and the caller's `srcs`, which the caller may free once
  // the items have finished.
  uint32_t unsent = 0;
  // transport: rdma: lent to the batch that reads into `headers` and `dsts`
  // (RdmaLinkPath::ReadLeased); let go of when an item finishes, after which
  // a completion copies nothing into them.
  std::shared_ptr<const void> outputs;
  // transport: rdma PUT: items it counts against the link's begun-put
  // budget from its PUT_BEGIN until its STATUS_REPLY.
  size_t begun = 0;

  // Whether a reply of kind `a` is expected now.
  bool Awaits(Await a) const { return await == a && unsent == 0; }

  void Init(size_t items, ItemDone fn) {
    done.assign(items, 0);
    remaining = items;
    cb = std::move(fn);
  }
  void Finish(size_t i, const Status& s, uint64_t bytes) {
    if (i >= done.size() || done[i]) return;
    done[i] = 1;
    outputs.reset();
    --remaining;
    cb(i, s, bytes);
  }
  void FailAll(const Status& s) {
    for (size_t i = 0; i < done.size(); ++i) Finish(i, s, 0);
  }
};
using RequestPtr = std::shared_ptr<Request>;

// A frame queued for the socket; a and b point into the buffers of
// `owner`, which counts the frame in its `unsent` until it is written.
struct OutFrame {
  FrameHeaderBytes header{};
  std::vector<std::byte> body;
  std::span<const std::byte> a, b;  // block header and payload of PUT_DATA
  RequestPtr owner;                 // null for frames of no request
};

class ClientImpl;
class Link;

struct Channel {
  std::shared_ptr<Link> link;
  SteadyClock::time_point next_attempt{};
  uint32_t backoff_ms = 0;
};

struct ServerState {
  size_t index = 0;
  std::string endpoint;  // as configured, "host:port"
  tcp::endpoint ep;      // the address last resolved
  bool named = false;    // the host is a name, looked up on each connect
  bool lookup_running = false;
  std::vector<Channel> channels;
  size_t next = 0;
  uint64_t instance = 0;
  bool seen = false;
  // Why the last connection attempt failed, as logged; empty once one
  // succeeds. A failed reconnect is logged only when its reason changes.
  std::string last_failure;
  // The last connection lost was given up for silence: no reply, or no
  // handshake, within its timeout (a server stopped or wedged keeps its
  // sockets open and answers nothing). Until a connection is ready again,
  // a request with no ready connection fails at once instead of waiting on
  // one still connecting, which would take the whole connect timeout.
  bool silent = false;
  // The slot size of the server's last refusal of a block too large for
  // it (Link::FitSlots), logged once for each size.
  uint64_t slot_refusal_logged = 0;
};

// One TCP connection: handshake, then pipelined requests. Lives in a
// shared_ptr held by its channel and by every pending handler.
class Link : public std::enable_shared_from_this<Link> {
 public:
  Link(ClientImpl& c, ServerState& s, Channel& ch);
  void Connect();
  void Submit(RequestPtr r);
  // Fails every pending request with `s`, or with what `status_of` gives
  // for its id, and drops the connection.
  void Abort(const Status& s, const std::function<Status(uint32_t id)>& status_of = {});
  bool dead() const { return dead_; }
  // Handshake done (RDMA set up too): a request submitted now goes out at once.
  bool ready() const { return ready_ && !dead_; }
  // The client registered `arena` after this link's RDMA path was made.
  void UseArena(std::shared_ptr<RdmaMemory> arena) {
    if (rdma_) rdma_->UseArena(std::move(arena));
  }

 private:
  void Handshake(const Challenge& c);
  void StartRdma(uint64_t instance);
  void Ready(uint64_t instance);
  bool OnRdmaReply(const FrameHeader& h, Request& r);
  void Granted(uint32_t id, const std::vector<bool>& granted, std::vector<Status> items);
  void Leased(uint32_t id, uint64_t lease, std::vector<Status> items, std::vector<uint64_t> bytes);
  void Control(Opcode op, Request* owner, uint32_t id, std::vector<std::byte> body);
  void ReadControl(std::function<void(const FrameHeader&)> then);
  void OnWelcome(const FrameHeader& h);
  void Enqueue(Request& r);
  // Enqueues `r`, or holds an RDMA PUT back while the link's begun items
  // would pass kMaxBegunPutItems. May finish and drop `r` (FitSlots).
  void Start(Request& r);
  // PUT `r`: fails with InvalidArgument each item that, with its block
  // header, exceeds the server's slot (slot_bytes_), and leaves only the
  // rest in `r`. Returns false when none is left; `r` is then finished and
  // gone.
  bool FitSlots(Request& r);
  // Enqueues the held PUTs that fit now, in order.
  void StartHeld();
  void Pump();
  void ReadHeader();
  void OnHeader();
  void OnGetData(Request& r, const FrameHeader& h);
  void OnControl(const FrameHeader& h);
  void Done(Request& r);
  Request* Find(uint32_t id, Opcode op, size_t item);
  void Push(OutFrame f, Request* owner);
  void Sent(size_t bytes);
  void Tick();
  // One tick's work: fails the requests past their deadlines (or the link,
  // when it never connected), and arms the next tick while any wait.
  void CheckDeadlines();
  void Bad(const std::string& why) { Abort(Status::IOError(Prefix() + "bad reply: " + why)); }
  std::string Prefix() const;
  bool Live(const boost::system::error_code& ec, const char* what);

  ClientImpl& c_;
  ServerState& s_;
  Channel& ch_;
  tcp::socket sock_;
  asio::steady_timer timer_;
  bool ticking_ = false;
  bool ready_ = false;
  bool dead_ = false;
  SteadyClock::time_point connect_deadline_;
  Nonce client_nonce_{};
  uint64_t slot_bytes_ = 0;
  uint32_t next_id_;                        // never 0; wraps
  std::map<uint32_t, RequestPtr> pending_;  // by id
  // Every pending request by deadline, then id: ids wrap, so the smallest
  // id is not the oldest request.
  std::set<std::pair<SteadyClock::time_point, uint32_t>> deadlines_;
  uint64_t owed_bytes_ = 0;  // payload bytes of the pending requests
  // When a byte last went out or came in: a request past its deadline is
  // failed only once the connection has moved nothing for op_timeout_ms (or
  // at its cap).
  SteadyClock::time_point last_progress_;
  std::vector<uint32_t> waiting_;  // submitted while connecting
  // transport: rdma. The server holds a slot reservation for every item of
  // a PUT_BEGIN until its PUT_COMMIT and cuts off a connection that holds
  // more than kMaxBegunPutItems: PUTs past that wait here, their deadlines
  // running, until STATUS_REPLYs make room.
  std::deque<uint32_t> held_puts_;
  size_t begun_items_ = 0;
  std::deque<OutFrame> queue_;
  std::vector<OutFrame> writing_;
  std::vector<size_t> writing_ends_;  // where each frame of writing_ ends
  size_t writing_sent_ = 0;           // frames of writing_ wholly sent
  std::vector<std::byte> hs_out_;
  FrameHeaderBytes in_header_{};
  std::vector<std::byte> body_;
  std::unique_ptr<RdmaLinkPath> rdma_;  // transport: rdma, from the handshake on
};

// A server entry's addresses: by `resolve` when set, else by the system
// resolver (IPv4). InvalidArgument for an entry that is not host:port.
// Blocks for as long as the lookup takes (remote_client_lookup.cc).
Result<std::vector<tcp::endpoint>> LookUpEntry(const RemoteClientOptions::Resolve& resolve,
                                               const std::string& entry);
// The address Create starts a server entry with: looked up once, on the
// caller's thread; InvalidArgument when it does not resolve.
Result<tcp::endpoint> FirstAddress(const RemoteClientOptions& options, const std::string& entry);
// Whether an entry's host is a name rather than an IP literal.
bool IsNamedHost(const std::string& entry);

class ClientImpl final : public RemoteClient {
 public:
  ClientImpl(RemoteClientOptions o, std::shared_ptr<LogSink> log, RestartHook hook)
      : o_(std::move(o)), log_(std::move(log)), hook_(std::move(hook)), loop_("remote", log_) {}
  ~ClientImpl() override { Shutdown(); }

  size_t server_count() const override { return servers_.size(); }
  const std::string& endpoint(size_t i) const override { return servers_[i]->endpoint; }
  void Put(size_t server, NamespaceId ns, std::vector<PutOp> ops, ItemDone done) override;
  void Get(size_t server, NamespaceId ns, std::vector<std::span<std::byte>> dsts,
           std::vector<BlockKey> keys, ItemDone done) override;
  void Exists(size_t server, NamespaceId ns, std::vector<BlockKey> keys, ItemDone done) override {
    Keys(Opcode::kExists, server, ns, std::move(keys), std::move(done));
  }
  void Remove(size_t server, NamespaceId ns, std::vector<BlockKey> keys, ItemDone done) override {
    Keys(Opcode::kRemove, server, ns, std::move(keys), std::move(done));
  }
  Result<Stats> GetStats(size_t server) override;
  uint64_t RegisterHostMemory(std::span<std::byte> memory) override;
  void Shutdown() override;

  // A named server: looks its name up again on a thread of its own, one
  // lookup at a time per server, and keeps the answer for the next connect
  // (remote_client_lookup.cc). Loop thread.
  void LookUp(ServerState& s);
  void OnReady(ServerState& s, Channel& ch, Link* l, uint64_t instance);
  void OnDead(ServerState& s, Channel& ch, Link* l, bool was_ready, const Status& why);
  // Links made after this call number their requests from `id` (0 is
  // skipped), so tests can reach the wrap of the 32-bit id quickly.
  void TEST_StartRequestIdsAt(uint32_t id);
  // Runs `fn` on the loop's thread and waits for it.
  Status TEST_RunOnLoop(std::function<void()> fn) { return loop_.Call(std::move(fn)); }

  const RemoteClientOptions o_;
  std::shared_ptr<LogSink> log_;
  RestartHook hook_;
  // transport: rdma. Declared before servers_: queue pairs and staging
  // regions go before the device. Completions reach the loop through post_,
  // which drops them once the loop has stopped.
  std::unique_ptr<RdmaDevice> rdma_;
  std::shared_ptr<RdmaMemory> arena_;  // loop thread
  LoopGate gate_{[this](std::function<void()> fn) { loop_.Post(std::move(fn)); }};
  std::vector<std::unique_ptr<ServerState>> servers_;
  uint32_t first_request_id_ = 1;  // loop thread
  std::atomic<bool> stopped_{false};
  AsioLoop loop_;  // last: stopped and destroyed first

 private:
  void Keys(Opcode op, size_t server, NamespaceId ns, std::vector<BlockKey> keys, ItemDone done);
  void Route(size_t server, RequestPtr r);
  void RouteOnLoop(size_t server, const RequestPtr& r);  // on the loop thread
  // The answer of LookUp, on the loop thread: s.ep stays while the answer
  // still names it, else takes the answer's first address; a failed lookup
  // leaves it.
  void LookedUp(ServerState& s, Result<std::vector<tcp::endpoint>> found);
  // Starts connecting `ch` (no link, backoff passed); returns its link.
  std::shared_ptr<Link> Open(ServerState& s, Channel& ch);
};

}  // namespace kvtier::internal::memd
