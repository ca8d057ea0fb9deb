// Little-endian encoding helpers shared by the memd frame codecs
// (remote_protocol.cc, rdma_protocol.cc). Internal to tiers/remote.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::internal::memd::wire {

// Little-endian appends and bounded reads. The reader never reads past its
// span: every Get* checks the remaining length first and latches a failure.
class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<std::byte>(v)); }
  void U16(uint16_t v) { Le(v, 2); }
  void U32(uint32_t v) { Le(v, 4); }
  void U64(uint64_t v) { Le(v, 8); }
  void Bytes(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void Key(const BlockKey& k) {
    U64(k.hi);
    U64(k.lo);
  }
  std::vector<std::byte> Take() { return std::move(out_); }

 private:
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint8_t U8() { return static_cast<uint8_t>(Le(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Le(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Le(4)); }
  uint64_t U64() { return Le(8); }
  BlockKey Key() {
    BlockKey k;
    k.hi = U64();
    k.lo = U64();
    return k;
  }
  template <size_t N>
  void Bytes(std::array<std::byte, N>* out) {
    if (!Need(N)) return;
    std::memcpy(out->data(), in_.data() + pos_, N);
    pos_ += N;
  }
  std::string Text(size_t n) {
    if (!Need(n)) return {};
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  size_t remaining() const { return failed_ ? 0 : in_.size() - pos_; }
  // OK when every read fitted and nothing is left over.
  Status Done(const char* what) const {
    if (failed_) return Status::InvalidArgument(std::string(what) + " body is truncated");
    if (pos_ != in_.size()) {
      return Status::InvalidArgument(std::string(what) + " body has " +
                                     std::to_string(in_.size() - pos_) + " trailing bytes");
    }
    return Status::Ok();
  }

 private:
  bool Need(size_t n) {
    if (failed_ || in_.size() - pos_ < n) {
      failed_ = true;
      return false;
    }
    return true;
  }
  uint64_t Le(int n) {
    if (!Need(static_cast<size_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace kvtier::internal::memd::wire
