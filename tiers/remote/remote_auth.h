// The memd handshake's proofs: HMAC-SHA256 over both nonces and a role label,
// so a recorded proof replays neither in another session nor in the other
// direction, and the secret never travels.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "kvtier/status.h"
#include "tiers/remote/remote_protocol.h"

namespace kvtier::internal::memd {

using Nonce = std::array<std::byte, kNonceBytes>;
using Mac = std::array<std::byte, kMacBytes>;

// Cryptographically random nonce (OpenSSL RAND_bytes).
Nonce RandomNonce();
uint64_t RandomId();

// The client's proof: HMAC(secret, "kvtier-memd client" | server | client).
Mac ClientProof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce);
// The server's proof: HMAC(secret, "kvtier-memd server" | client | server).
Mac ServerProof(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce);
// Constant-time comparison.
bool SameMac(const Mac& a, const Mac& b);

// Reads a secret file: its bytes with one trailing newline removed.
// InvalidArgument when the file is missing, empty or longer than 4 KiB.
Result<std::string> ReadSecretFile(const std::string& path);

}  // namespace kvtier::internal::memd
