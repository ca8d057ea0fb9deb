// The C API's completion handles.
#include <chrono>
#include <string>

#include "capi/c_api_internal.h"

using kvtier::Status;
using kvtier::capi::Guard;
using kvtier::capi::Required;

namespace {

// Unavailable for a completion still running in the process this one was
// forked from: no thread here will ever finish it.
Status Inherited(const kvtier_completion& c) {
  if (!kvtier::capi::Forked(c.process) || c.completion.Poll()) return Status::Ok();
  return Status::Unavailable(
      "completion still running in the process this one was forked from, waited on here");
}

}  // namespace

extern "C" {

int kvtier_completion_wait(const kvtier_completion* c, int64_t timeout_ns) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(c, "completion"));
    KVTIER_RETURN_IF_ERROR(Inherited(*c));
    if (timeout_ns < 0) return c->completion.Wait();
    return c->completion.WaitFor(std::chrono::nanoseconds(timeout_ns));
  });
}

int kvtier_completion_done(const kvtier_completion* c) {
  return c != nullptr && c->completion.Poll() ? 1 : 0;
}

size_t kvtier_completion_size(const kvtier_completion* c) {
  return c != nullptr ? c->completion.size() : 0;
}

int kvtier_completion_result(const kvtier_completion* c, size_t i, uint64_t* bytes) {
  if (bytes != nullptr) *bytes = 0;
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(c, "completion"));
    if (!c->completion.Poll()) return Status::InvalidArgument("the completion is not done yet");
    const size_t n = c->completion.size();
    // A call refused before its blocks could be listed (out of memory) has
    // none: each block it was asked for failed the way the call did.
    if (i >= n && n == 0 && !c->completion.status().ok()) return c->completion.status();
    if (i >= n) {
      return Status::InvalidArgument("result " + std::to_string(i) + " of a completion of " +
                                     std::to_string(c->completion.size()));
    }
    if (bytes != nullptr) *bytes = c->completion.bytes(i);
    return c->completion.result(i);
  });
}

uint32_t kvtier_completion_layers_done(const kvtier_completion* c) {
  return c != nullptr ? c->completion.layers_done() : 0;
}

int kvtier_completion_on_done(const kvtier_completion* c, kvtier_done_fn fn, void* user) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(c, "completion"));
    KVTIER_RETURN_IF_ERROR(Required(reinterpret_cast<const void*>(fn), "fn"));
    KVTIER_RETURN_IF_ERROR(Inherited(*c));
    c->completion.OnDone([fn, user] { fn(user); });
    return Status::Ok();
  });
}

void kvtier_completion_free(kvtier_completion* c) { delete c; }

}  // extern "C"
