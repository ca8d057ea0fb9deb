#include "tiers/remote/remote_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "core/file_text.h"

namespace kvtier::internal::memd {
namespace {

Mac Proof(std::string_view secret, std::string_view label, const Nonce& first,
          const Nonce& second) {
  std::vector<unsigned char> msg(label.begin(), label.end());
  const auto* a = reinterpret_cast<const unsigned char*>(first.data());
  const auto* b = reinterpret_cast<const unsigned char*>(second.data());
  msg.insert(msg.end(), a, a + first.size());
  msg.insert(msg.end(), b, b + second.size());
  Mac out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(),
       reinterpret_cast<unsigned char*>(out.data()), &len);
  return out;
}

}  // namespace

Nonce RandomNonce() {
  Nonce n{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    // RAND_bytes fails only without an entropy source; fall back to the OS.
    std::random_device rd;
    for (auto& b : n) b = static_cast<std::byte>(rd());
  }
  return n;
}

uint64_t RandomId() {
  Nonce n = RandomNonce();
  uint64_t v = 0;
  std::memcpy(&v, n.data(), sizeof v);
  return v;
}

Mac ClientProof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return Proof(secret, "kvtier-memd client", server_nonce, client_nonce);
}

Mac ServerProof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return Proof(secret, "kvtier-memd server", client_nonce, server_nonce);
}

bool SameMac(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<std::string> ReadSecretFile(const std::string& path) {
  std::string s;
  bool opened = false;
  if (const int err = ReadFileText(path, 4096, &s, &opened); err == EFBIG) {
    return Status::InvalidArgument("secret file '" + path + "' exceeds 4 KiB");
  } else if (err != 0) {
    return Status::InvalidArgument("cannot read secret file '" + path + "': " +
                                   std::strerror(err));
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
  if (s.empty()) return Status::InvalidArgument("secret file '" + path + "' is empty");
  return s;
}

}  // namespace kvtier::internal::memd
