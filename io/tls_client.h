// TLS on the client side of a TCP connection (OpenSSL), for tiers that talk
// to servers which only accept TLS, such as a managed Redis.
//
// TlsClientContext holds what every connection of a tier shares: the trusted
// CAs and, for mutual TLS, the client certificate; it checks them when it is
// made, so a bad file is an error at open, not on the first batch.
// TlsStream is one session over a socket its caller connected and owns. Its
// reads and writes never block and never raise SIGPIPE: each returns the
// bytes it moved, or which way the socket must become ready (the caller
// polls with its own deadline), or why the session ended.
//
// Thread safety: a context may be shared by any number of threads; a stream
// is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "kvtier/status.h"

struct ssl_ctx_st;
struct ssl_st;

namespace kvtier::internal {

// The socket under a stream, as its OpenSSL BIO sees it.
struct TlsSocket {
  int fd = -1;
  int last_errno = 0;  // of the BIO's last failed call; 0 after an EOF
};

struct TlsClientOptions {
  std::string ca_file;    // PEM bundle of trusted CAs; empty = the system's trust store
  std::string cert_file;  // PEM client certificate (chain) for mutual TLS; empty = none
  std::string key_file;   // PEM private key of cert_file, not encrypted; set with cert_file
};

class TlsClientContext {
 public:
  // InvalidArgument naming the file and OpenSSL's reason when a file cannot
  // be read, holds no certificate, or the key does not match the certificate.
  static Result<std::shared_ptr<TlsClientContext>> Create(const TlsClientOptions& options);
  ~TlsClientContext();
  TlsClientContext(const TlsClientContext&) = delete;
  TlsClientContext& operator=(const TlsClientContext&) = delete;

  ssl_ctx_st* get() const { return ctx_; }

 private:
  explicit TlsClientContext(ssl_ctx_st* ctx) : ctx_(ctx) {}
  ssl_ctx_st* ctx_;
};

class TlsStream {
 public:
  // How a read or write ended.
  enum class Io {
    kMoved,      // `bytes` (at least 1) were read or written
    kWantRead,   // nothing moved: retry once the socket is readable
    kWantWrite,  // nothing moved: retry once the socket is writable
    kClosed,     // the server ended the session (close_notify or EOF)
    kFailed,     // a TLS or socket error; `error` says which
  };
  struct IoResult {
    Io io = Io::kFailed;
    size_t bytes = 0;
    Status error;  // kFailed, and kClosed on a reset
  };

  // Runs the handshake on the connected socket `fd`, waiting with poll until
  // `deadline`. The server's certificate must chain to the context's CAs and
  // name `server_name`: a DNS name (sent as SNI too) or an IP address.
  // `where` names the server in errors. InvalidArgument when verification
  // fails or the server does not speak TLS (configuration errors, naming
  // the fix); Unavailable when the connection fails or the deadline passes.
  static Result<std::unique_ptr<TlsStream>> Connect(const TlsClientContext& context, int fd,
                                                    const std::string& server_name,
                                                    std::chrono::steady_clock::time_point deadline,
                                                    const std::string& where);
  // Sends close_notify when the session is still sound; never closes fd.
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  IoResult Read(void* out, size_t size);
  // Reads without consuming (to see whether an idle connection was closed).
  IoResult Peek(void* out, size_t size);
  // Writes at least one byte of `data` once it moves (a partial write).
  // REQUIRES: data not empty; after kWantRead/kWantWrite, the next call
  // passes the same bytes again (the buffer may move).
  IoResult Write(const void* data, size_t size);
  // Decrypted bytes already buffered, readable without waiting.
  size_t Pending() const;
  // The negotiated protocol, such as "TLSv1.3".
  std::string_view version() const;

 private:
  explicit TlsStream(int fd) { sock_.fd = fd; }
  IoResult Finish(int ret, size_t moved);

  ssl_st* ssl_ = nullptr;
  TlsSocket sock_;       // the BIO points here: a stream never moves
  bool failed_ = false;  // a fatal error or close: no close_notify
};

}  // namespace kvtier::internal
