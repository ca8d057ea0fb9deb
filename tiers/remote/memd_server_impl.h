// MemdServer's internals (memd_server.h), shared by the files that
// implement it:
//   memd_server.cc    the listener, RDMA setup, lease expiry, start and stop
//   memd_session.cc   one connection: reading frames, writing replies, closing
//   memd_dispatch.cc  the handshake and the requests a session serves
// Sessions and the listener run on the server's I/O thread; Start() and
// Stop() set up and tear down from the caller's.
// Only those files include this header (it pulls in Boost.Asio).
#pragma once

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "io/asio_loop.h"
#include "tiers/remote/memd_reservations.h"
#include "tiers/remote/memd_server.h"
#include "tiers/remote/rdma_session.h"
#include "tiers/remote/remote_auth.h"

namespace kvtier::internal::memd {

namespace asio = boost::asio;
using asio::ip::tcp;

// Reservations a connection may hold at once (PUT_BEGIN items not yet
// committed, TCP and RDMA together): four full batches. A PUT_BEGIN past
// that has every item refused with ResourceExhausted (memd_reservations.h),
// so one connection cannot pin the whole pool.
constexpr size_t kMaxReservedItems = 4 * kMaxBatchItems;
// The largest HELLO or AUTH body; checked from the header, so a peer that has
// not authenticated makes the server allocate no more than this.
constexpr uint32_t kMaxHandshakeBodyBytes = 64;
// Replies a connection may have queued or in flight before the server stops
// reading its requests (each GET_DATA pins a slot until it is sent): frames,
// and bytes of header, body and block data. Reading resumes below both.
constexpr size_t kMaxQueuedReplies = kMaxBatchItems;
constexpr uint64_t kMaxQueuedReplyBytes = 64ull << 20;
// Of those, the bytes of headers and bodies: memory of the server's own
// besides the pool, where block data is sent from the slots. Without it a
// connection sending STATS (a body per namespace) and reading nothing held
// up to kMaxQueuedReplyBytes of heap, and max_connections of them 16 GiB.
constexpr uint64_t kMaxQueuedHeapBytes = 1ull << 20;
// How long a connection that was sent an ERROR may take to read it before it
// is closed regardless.
constexpr uint64_t kCloseGraceMs = 1000;
// Connections over max_connections kept to be told why at their next
// handshake frame (MemdServer::Impl::TurnAway); past this many, closed
// unanswered. Each holds a descriptor until then (handshake_timeout_ms).
constexpr size_t kMaxTurnedAway = 32;

// Slots a connection may hold reserved at once: three quarters of the pool
// (at least one). A batch may fill most of a small pool, yet one connection
// cannot reserve every slot, nor evict more than that share of the stored
// blocks for its puts.
inline size_t MaxReservedSlots(uint64_t slot_count) {
  return std::max<size_t>(1, static_cast<size_t>(slot_count * 3 / 4));
}

// Milliseconds on the steady clock: the time leases are measured in.
uint64_t NowMs();

// Lets a kind of warning out at most once a second, whatever peers on the
// network do to cause it, and counts those held back in between.
class WarningGate {
 public:
  // True when a warning may go out at `now_ms`; *held then gets how many
  // were held back since the last one.
  bool Pass(uint64_t now_ms, uint64_t* held) {
    if (last_ms_ != 0 && now_ms - last_ms_ < kIntervalMs) {
      ++held_;
      return false;
    }
    *held = std::exchange(held_, 0);
    last_ms_ = now_ms;
    return true;
  }
  // " (N more since the last)" when some were held back.
  static std::string Held(uint64_t held) {
    return held == 0 ? "" : " (" + std::to_string(held) + " more since the last such warning)";
  }

 private:
  static constexpr uint64_t kIntervalMs = 1000;
  uint64_t held_ = 0;
  uint64_t last_ms_ = 0;  // 0: none yet
};

// Turns on TCP keepalive (probes after 30 s idle, every 10 s, 3 unanswered
// end it) and a 60 s TCP user timeout on an accepted socket: a peer that
// vanished without a FIN or RST releases its connection within about a
// minute. Failures are ignored: the socket still works without them.
void KeepPeerAlive(tcp::socket& sock);

class Session;

class MemdServer::Impl {
 public:
  Impl(MemdServerOptions options, std::unique_ptr<MemdPool> pool)
      : options_(std::move(options)),
        log_(options_.log ? options_.log : StderrLogSink()),
        pool_(std::move(pool)),
        instance_id_(RandomId()),
        loop_("memd", log_),
        acceptor_(loop_.context()),
        lease_timer_(loop_.context()),
        deadline_timer_(loop_.context()),
        accept_timer_(loop_.context()) {}

  Status Listen();
  void Accept();
  // An accept failed: out of descriptors or buffers, or something else that
  // retrying at once would only repeat. Logs (at most once a second) and
  // accepts again after kAcceptRetry, so the loop does not spin.
  void AcceptFailed(const boost::system::error_code& ec);
  // Keeps the opened device and registers the pool with it.
  Status UseRdma(std::unique_ptr<RdmaDevice> device);
  void ExpireLeases();
  // Closes the sessions whose handshake, put or ERROR is overdue, on a tick.
  void EnforceDeadlines();
  void Stop();
  void Forget(Session* s);
  // A new connection (already in sessions_) over max_connections: the
  // oldest connection still in its handshake gives way to it, so sockets
  // that never authenticate cannot lock clients out; with none, the new one
  // is refused. A refused or displaced connection is answered ERROR
  // (ResourceExhausted) at its next handshake frame, or closed at once when
  // kMaxTurnedAway of them are waiting for theirs already.
  void MakeRoomFor(Session* fresh);
  void TurnAway(Session* s, const std::string& why);

  const MemdServerOptions options_;
  std::shared_ptr<LogSink> log_;
  // Declared before the loop: sessions die with the loop's handlers, and the
  // pool must outlive them.
  std::unique_ptr<MemdPool> pool_;
  // transport: rdma. Sessions' queue pairs die before the region and the
  // device (sessions_ and the loop are declared after them).
  std::unique_ptr<RdmaDevice> rdma_;
  std::unique_ptr<RdmaMemory> pool_mr_;
  const uint64_t instance_id_;
  AsioLoop loop_;
  // Declared after the loop, so their sockets go before the io_context they
  // were opened on (a socket that outlives its io_context touches freed
  // reactor state when it is destroyed).
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;  // loop thread only
  // The sessions Stop closed, moved out of sessions_ (a copy could run out
  // of memory and leave them open, and the loop would never stop); kept
  // until the server goes, as sessions_ would have kept them.
  std::unordered_map<Session*, std::shared_ptr<Session>> closed_;  // loop thread only
  size_t turned_away_ = 0;  // of sessions_, those refused (not counted against the limit)
  tcp::acceptor acceptor_;
  asio::steady_timer lease_timer_;
  asio::steady_timer deadline_timer_;
  asio::steady_timer accept_timer_;
  // Loop thread only: warnings that peers can cause at will.
  WarningGate accept_warnings_, limit_warnings_, protocol_warnings_;
  uint16_t port_ = 0;
  std::once_flag stopped_;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(MemdServer::Impl& srv, tcp::socket sock)
      : srv_(srv),
        sock_(std::move(sock)),
        accepted_ms_(NowMs()),
        reservations_(*srv.pool_, kMaxReservedItems, MaxReservedSlots(srv.pool_->slot_count()),
                      NowMs) {
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? "unknown peer" : ep.address().to_string() + ":" + std::to_string(ep.port());
    sock_.set_option(tcp::no_delay(true), ec);
    KeepPeerAlive(sock_);
  }

  void Start() { ReadHeader(); }
  void Close();
  // Answers the next handshake frame with ERROR (ResourceExhausted) `why`;
  // see MemdServer::Impl::MakeRoomFor.
  void TurnAway(std::string why) { turned_away_ = std::move(why); }
  bool turned_away() const { return !turned_away_.empty(); }
  // Still in its handshake, and not on its way out.
  bool handshaking() const { return phase_ != Phase::kReady && !closing_ && !closed_; }
  uint64_t accepted_ms() const { return accepted_ms_; }
  void ExpireLeases(uint64_t now_ms) {
    if (rdma_) rdma_->Expire(now_ms);
  }
  // Closes the session when its handshake or its oldest open put is past
  // its deadline, its replies made no write progress for reply_timeout_ms,
  // or an ERROR it was sent is not taken within kCloseGraceMs.
  void CheckDeadlines(uint64_t now_ms);
  size_t queued_replies() const { return queue_.size() + writing_.size(); }
  uint64_t queued_heap_bytes() const { return out_heap_bytes_; }

 private:
  enum class Phase { kHello, kAuth, kReady };
  struct Out {
    FrameHeaderBytes header{};
    std::vector<std::byte> body;
    std::span<const std::byte> data;  // slot bytes sent after the body
    int64_t pin = -1;                 // slot unpinned once sent
  };

  void ReadHeader();
  // The next request's header, unless replies are backlogged (Pump resumes).
  void ReadNext();
  bool Backlogged() const;
  void OnHeader();
  void ReadBody();
  void Dispatch();
  void ReadPutData();
  void Discard(size_t left);
  void Handshake();
  void Begin(const PutBegin& m);
  void Commit();
  void Get(const KeyBatch& m);
  bool WantsRdma(Opcode op) const;
  void HandleRdma();
  void Send(Opcode op, std::vector<std::byte> body, uint16_t item = 0);
  void Enqueue(Out out);
  // Unpins the slot a GET_DATA reply held (sent, or dropped).
  void Unpin(int64_t slot);
  void DropQueued();
  void Pump();
  void ProtocolError(StatusCode code, const std::string& why);
  void Expire(const std::string& why);
  bool Alive(const boost::system::error_code& ec, const char* what);

  MemdServer::Impl& srv_;
  tcp::socket sock_;
  std::string peer_;
  const uint64_t accepted_ms_;
  Phase phase_ = Phase::kHello;
  Nonce client_nonce_{}, server_nonce_{};
  FrameHeaderBytes in_header_{};
  FrameHeader frame_;
  std::vector<std::byte> body_;
  std::vector<std::byte> scratch_;
  std::deque<Out> queue_;
  std::vector<Out> writing_;
  // When the write of writing_ began or last moved bytes (NowMs).
  uint64_t write_progress_ms_ = 0;
  uint64_t out_bytes_ = 0;      // bytes of queue_ and writing_
  uint64_t out_heap_bytes_ = 0;  // of those, headers and bodies (not slot data)
  // The slots the GET_DATA replies of queue_ and writing_ pin, each with its
  // count of replies: at most MaxReservedSlots of the pool (past it, an
  // item is ResourceExhausted).
  std::unordered_map<uint32_t, uint32_t> pinned_slots_;
  bool read_paused_ = false;    // no read is pending: replies are backlogged
  bool reading_block_ = false;  // a PUT_DATA is being read into its slot
  // Puts of both paths. Declared before rdma_, which grants from it and
  // cancels its grants only once its queue pair is gone.
  MemdReservations reservations_;
  std::unique_ptr<RdmaSession> rdma_;  // created by the first RDMA frame
  std::string turned_away_;            // TurnAway's reason; empty: served
  bool closing_ = false;               // an ERROR is queued; close once it is sent
  uint64_t closing_since_ms_ = 0;
  bool closed_ = false;
};

}  // namespace kvtier::internal::memd
