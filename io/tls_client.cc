#include "io/tls_client.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

namespace kvtier::internal {
namespace {

// The reason of the oldest error in this thread's OpenSSL queue, which is
// then emptied; `fallback` when the queue holds none.
std::string TakeTlsError(const std::string& fallback) {
  const unsigned long first = ERR_get_error();
  ERR_clear_error();
  if (first == 0) return fallback;
  if (const char* reason = ERR_reason_error_string(first)) {
    std::string text = reason;
    // The server refused us for want of a client certificate.
    if (text.find("certificate required") != std::string::npos) {
      text += " (the server wants a client certificate: set tls_cert_file and tls_key_file)";
    }
    return text;
  }
  char buf[256];
  ERR_error_string_n(first, buf, sizeof buf);
  return buf;
}

// The BIO under a stream: non-blocking reads and writes, never SIGPIPE.
// OpenSSL's own socket BIO writes with write(2), which raises SIGPIPE on a
// connection the server reset and would kill a process that kept the default
// handler; the caller does all the waiting, with its own deadline.
int SocketWrite(BIO* bio, const char* data, size_t size, size_t* written) {
  auto* s = static_cast<TlsSocket*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  s->last_errno = 0;
  for (;;) {
    const ssize_t n = send(s->fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      *written = static_cast<size_t>(n);
      return 1;
    }
    if (errno == EINTR) continue;
    s->last_errno = errno;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return 0;
  }
}

int SocketRead(BIO* bio, char* out, size_t size, size_t* got) {
  auto* s = static_cast<TlsSocket*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  s->last_errno = 0;
  *got = 0;
  for (;;) {
    const ssize_t n = recv(s->fd, out, size, MSG_DONTWAIT);
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return 1;
    }
    if (n == 0) return 0;  // EOF: no retry flag
    if (errno == EINTR) continue;
    s->last_errno = errno;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
    return 0;
  }
}

long SocketCtrl(BIO* /*bio*/, int cmd, long /*num*/, void* /*ptr*/) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;  // sends are never buffered here
}

// Made once and kept for the life of the process (it owns no resource).
BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kvtier socket");
    if (m != nullptr) {
      BIO_meth_set_write_ex(m, SocketWrite);
      BIO_meth_set_read_ex(m, SocketRead);
      BIO_meth_set_ctrl(m, SocketCtrl);
    }
    return m;
  }();
  return method;
}

// An encrypted key would make OpenSSL ask for its passphrase on the terminal.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*userdata*/) { return 0; }

Status FileError(const std::string& what, const std::string& file, const std::string& reason) {
  return Status::InvalidArgument(what + " '" + file + "': " + reason);
}

// The file can be opened for reading: errno's words otherwise, which say
// more than OpenSSL's "system lib".
Status CheckReadable(const std::string& what, const std::string& file) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) return FileError(what, file, std::strerror(errno));
  std::fclose(f);
  return Status::Ok();
}

bool IsIpAddress(const std::string& name) {
  in6_addr v6{};
  in_addr v4{};
  return inet_pton(AF_INET, name.c_str(), &v4) == 1 || inet_pton(AF_INET6, name.c_str(), &v6) == 1;
}

struct SslCtxDeleter {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};

}  // namespace

TlsClientContext::~TlsClientContext() { SSL_CTX_free(ctx_); }

Result<std::shared_ptr<TlsClientContext>> TlsClientContext::Create(
    const TlsClientOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return Status::InvalidArgument(
        "tls_cert_file and tls_key_file go together; expected both or neither");
  }
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, SslCtxDeleter> ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx || SocketBioMethod() == nullptr) {
    return Status::Internal("TLS: cannot set up OpenSSL: " + TakeTlsError("out of memory"));
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  // Partial writes let a send report progress a record at a time; the
  // buffer of a retried write may move (the caller's piece list is rebuilt).
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // A server that closes without close_notify has ended the session; every
  // reply is length-framed, so a cut one is caught by the reader anyway.
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_default_passwd_cb(ctx.get(), NoPassphrase);
  if (options.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      return Status::InvalidArgument("TLS: the system's trust store cannot be loaded: " +
                                     TakeTlsError("unknown error") + "; set tls_ca_file");
    }
  } else {
    KVTIER_RETURN_IF_ERROR(CheckReadable("tls_ca_file", options.ca_file));
    if (SSL_CTX_load_verify_locations(ctx.get(), options.ca_file.c_str(), nullptr) != 1) {
      return FileError("tls_ca_file", options.ca_file,
                       TakeTlsError("no certificate found") + "; expected PEM certificates");
    }
  }
  if (!options.cert_file.empty()) {
    KVTIER_RETURN_IF_ERROR(CheckReadable("tls_cert_file", options.cert_file));
    KVTIER_RETURN_IF_ERROR(CheckReadable("tls_key_file", options.key_file));
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), options.cert_file.c_str()) != 1) {
      return FileError("tls_cert_file", options.cert_file,
                       TakeTlsError("no certificate found") + "; expected a PEM certificate");
    }
    // Loading the key also checks it against the certificate.
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), options.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx.get()) != 1) {
      const std::string reason = TakeTlsError("no key found");
      return FileError("tls_key_file", options.key_file,
                       reason + (reason.find("mismatch") != std::string::npos
                                     ? " (it is not the key of tls_cert_file)"
                                     : "; expected a PEM private key without a passphrase"));
    }
  }
  return std::shared_ptr<TlsClientContext>(new TlsClientContext(ctx.release()));
}

TlsStream::~TlsStream() {
  if (ssl_ == nullptr) return;
  if (!failed_) {
    // One try, without waiting: the server may be gone, which is fine.
    ERR_clear_error();
    SSL_shutdown(ssl_);
    ERR_clear_error();
  }
  SSL_free(ssl_);  // frees the BIO too
}

Result<std::unique_ptr<TlsStream>> TlsStream::Connect(
    const TlsClientContext& context, int fd, const std::string& server_name,
    std::chrono::steady_clock::time_point deadline, const std::string& where) {
  ERR_clear_error();
  const std::string op = "TLS handshake with " + where;
  std::unique_ptr<TlsStream> stream(new TlsStream(fd));
  stream->failed_ = true;  // until the handshake completes
  stream->ssl_ = SSL_new(context.get());
  BIO* bio = stream->ssl_ != nullptr ? BIO_new(SocketBioMethod()) : nullptr;
  if (bio == nullptr) return Status::Internal(op + ": " + TakeTlsError("out of memory"));
  BIO_set_data(bio, &stream->sock_);
  BIO_set_init(bio, 1);
  SSL* ssl = stream->ssl_;
  SSL_set_bio(ssl, bio, bio);  // the SSL owns the BIO from here
  bool named = true;
  if (IsIpAddress(server_name)) {
    named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name.c_str()) == 1;
  } else {
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    named = SSL_set_tlsext_host_name(ssl, server_name.c_str()) == 1 &&
            SSL_set1_host(ssl, server_name.c_str()) == 1;
  }
  if (!named) {
    ERR_clear_error();
    return Status::InvalidArgument(op + ": '" + server_name +
                                   "' is neither a host name nor an IP address");
  }
  const std::string hint = " (does the server take TLS on this port?)";
  const auto budget_ms =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
          .count();
  for (;;) {
    ERR_clear_error();
    const int ret = SSL_connect(ssl);
    if (ret == 1) break;
    const int err = SSL_get_error(ssl, ret);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
              .count();
      pollfd pfd{fd, static_cast<short>(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
      const int ready =
          left > 0 ? poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, INT_MAX))) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        return Status::Unavailable(op + ": timed out after " + std::to_string(budget_ms) + " ms" +
                                   hint);
      }
      if (ready < 0) return Status::Unavailable(FromErrno(errno, op).message());
      continue;
    }
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      ERR_clear_error();
      const bool name =
          verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH;
      return Status::InvalidArgument(
          op + ": certificate verify failed: " + X509_verify_cert_error_string(verify) +
          (name ? " (the certificate does not name '" + server_name + "'; set tls_server_name)"
                : " (check tls_ca_file)"));
    }
    if (err == SSL_ERROR_SYSCALL) {
      const int e = stream->sock_.last_errno;
      ERR_clear_error();
      if (e != 0) return Status::Unavailable(FromErrno(e, op).message());
      return Status::Unavailable(op + ": connection closed by the server" + hint);
    }
    return Status::InvalidArgument(op + " failed: " + TakeTlsError("unknown error") + hint);
  }
  stream->failed_ = false;
  return stream;
}

TlsStream::IoResult TlsStream::Finish(int ret, size_t moved) {
  if (ret == 1) return {Io::kMoved, moved, Status::Ok()};
  const int err = SSL_get_error(ssl_, ret);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      return {Io::kWantRead, 0, Status::Ok()};
    case SSL_ERROR_WANT_WRITE:
      return {Io::kWantWrite, 0, Status::Ok()};
    case SSL_ERROR_ZERO_RETURN:
      failed_ = true;
      return {Io::kClosed, 0, Status::Ok()};
    case SSL_ERROR_SYSCALL: {
      failed_ = true;
      const int e = sock_.last_errno;
      ERR_clear_error();
      if (e == 0) return {Io::kClosed, 0, Status::Ok()};
      Status st = FromErrno(e, "TLS");
      return {e == ECONNRESET || e == EPIPE ? Io::kClosed : Io::kFailed, 0, std::move(st)};
    }
    default:
      failed_ = true;
      return {Io::kFailed, 0, Status::Unavailable("TLS: " + TakeTlsError("unknown error"))};
  }
}

TlsStream::IoResult TlsStream::Read(void* out, size_t size) {
  ERR_clear_error();
  size_t got = 0;
  const int ret = SSL_read_ex(ssl_, out, size, &got);
  return Finish(ret, got);
}

TlsStream::IoResult TlsStream::Peek(void* out, size_t size) {
  ERR_clear_error();
  size_t got = 0;
  const int ret = SSL_peek_ex(ssl_, out, size, &got);
  return Finish(ret, got);
}

TlsStream::IoResult TlsStream::Write(const void* data, size_t size) {
  ERR_clear_error();
  size_t written = 0;
  const int ret = SSL_write_ex(ssl_, data, size, &written);
  return Finish(ret, written);
}

size_t TlsStream::Pending() const { return static_cast<size_t>(SSL_pending(ssl_)); }

std::string_view TlsStream::version() const { return SSL_get_version(ssl_); }

}  // namespace kvtier::internal
