// Base of the test engines that wrap a real IoEngine: every call goes to
// the inner engine unless the wrapper overrides it (Submit, usually).
#pragma once

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "io/io_engine.h"

namespace kvtier::testing {

class ForwardingIoEngine : public internal::IoEngine {
 public:
  explicit ForwardingIoEngine(std::unique_ptr<internal::IoEngine> inner)
      : inner_(std::move(inner)) {}

  Status Submit(std::vector<internal::IoRequest> requests) override {
    return inner_->Submit(std::move(requests));
  }
  void Shutdown() override { inner_->Shutdown(); }
  uint64_t RegisterBuffers(std::span<const iovec> ranges) override {
    return inner_->RegisterBuffers(ranges);
  }
  bool IsRegistered(const void* p, uint64_t len) const override {
    return inner_->IsRegistered(p, len);
  }
  Status RegisterFile(int fd) override { return inner_->RegisterFile(fd); }
  uint64_t FixedBufferIos() const override { return inner_->FixedBufferIos(); }

 protected:
  internal::IoEngine& inner() { return *inner_; }

 private:
  std::unique_ptr<internal::IoEngine> inner_;
};

}  // namespace kvtier::testing
