// The C API's versions, error reporting (a per-thread last message) and key
// helpers.
#include <pthread.h>

#include <atomic>
#include <string>

#include "capi/c_api_internal.h"
#include "kvtier/build_config.h"

namespace kvtier::capi {
namespace {

thread_local std::string last_error;

std::atomic<uint64_t> process_generation{0};
void OnForkChild() { process_generation.fetch_add(1, std::memory_order_relaxed); }
// Registered when the library loads, before any runtime can exist.
[[maybe_unused]] const int fork_handler = pthread_atfork(nullptr, nullptr, OnForkChild);

}  // namespace

uint64_t ProcessGeneration() { return process_generation.load(std::memory_order_relaxed); }

int Report(const Status& status) noexcept {
  if (!status.ok()) {
    try {
      last_error = status.ToString();
    } catch (...) {
      // No memory for the message: the code still tells what happened.
      last_error.clear();
    }
  }
  return static_cast<int>(status.code());
}

Status Live(const kvtier_runtime* rt) {
  KVTIER_RETURN_IF_ERROR(Required(rt, "runtime"));
  if (!Forked(rt->process)) return Status::Ok();
  return Status::Unavailable("runtime opened by process " + std::to_string(rt->pid) +
                             " used in process " + std::to_string(getpid()) +
                             " (a fork): open a runtime in each process");
}

Result<std::vector<BlockKey>> Keys(const kvtier_key* keys, size_t n) {
  if (n > 0 && keys == nullptr) return Status::InvalidArgument("keys is NULL");
  // More keys than an address space can hold can only be a wrong count
  // (such as a negative one cast to size_t).
  if (n > std::vector<BlockKey>().max_size()) {
    return Status::InvalidArgument("num_keys is " + std::to_string(n) +
                                   ", more keys than memory can hold");
  }
  std::vector<BlockKey> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = BlockKey{keys[i].hi, keys[i].lo};
  return out;
}

std::optional<BlockKey> Parent(const kvtier_key* parent) {
  if (parent == nullptr) return std::nullopt;
  return BlockKey{parent->hi, parent->lo};
}

kvtier_key ToC(const BlockKey& key) { return kvtier_key{key.hi, key.lo}; }

}  // namespace kvtier::capi

extern "C" {

int kvtier_c_api_version(void) { return KVTIER_C_API_VERSION; }
const char* kvtier_version_string(void) { return KVTIER_VERSION_STRING; }

const char* kvtier_last_error(void) { return kvtier::capi::last_error.c_str(); }

const char* kvtier_code_name(int code) {
  if (code < 0 || code > static_cast<int>(kvtier::StatusCode::kInternal)) return "unknown";
  // Names are string literals, so their data is NUL-terminated.
  return kvtier::StatusCodeName(static_cast<kvtier::StatusCode>(code)).data();
}

}  // extern "C"
