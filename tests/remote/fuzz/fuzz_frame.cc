// libFuzzer target for the memd frame decoder: any byte string is split into
// frames the way the server reads them (16-byte header, then the body the
// header announces) and every frame goes through the same checks the server
// applies. The decoder must never crash, read out of bounds or accept a body
// length past its cap.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "tiers/remote/remote_protocol.h"

namespace memd = kvtier::internal::memd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  constexpr uint64_t kMaxBlock = 1 << 20;
  while (in.size() >= memd::kFrameHeaderBytes) {
    auto h = memd::DecodeFrameHeader(in.first(memd::kFrameHeaderBytes), kMaxBlock);
    if (!h.ok()) break;
    const bool block = h->opcode == memd::Opcode::kPutData || h->opcode == memd::Opcode::kGetData;
    if (h->body_bytes > (block ? kMaxBlock : memd::kMaxControlBodyBytes)) std::abort();
    const size_t n = std::min<size_t>(in.size(), memd::kFrameHeaderBytes + h->body_bytes);
    (void)memd::CheckClientFrame(in.first(n), kMaxBlock);
    std::span<const std::byte> body =
        in.subspan(memd::kFrameHeaderBytes, n - memd::kFrameHeaderBytes);
    // The client-side decoders see server bytes: run them on the body too.
    (void)memd::DecodeChallenge(body);
    (void)memd::DecodeWelcome(body);
    (void)memd::DecodeError(body);
    (void)memd::DecodeStatusList(body);
    (void)memd::DecodeStats(body);
    in = in.subspan(n);
  }
  return 0;
}
