// What the C API's translation units share: the handle structs behind the
// opaque C types, the guard that turns a Status or an exception into a
// kvtier_code, and argument helpers.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/c_api.h"
#include "kvtier/completion.h"
#include "kvtier/copy_engine.h"
#include "kvtier/env.h"
#include "kvtier/runtime.h"
#include "kvtier/status.h"

namespace kvtier::capi {

// Counts the fork()s this process descends from (a pthread_atfork child
// handler adds one): an object made under another count was inherited. Read
// on every call, so it is an atomic load, not a getpid() system call.
uint64_t ProcessGeneration();

// The pins of one runtime, shared with each pin so that a pin may outlive
// the runtime: closing releases every pin still held, under `mu`, before
// the runtime goes.
struct PinRegistry {
  std::mutex mu;
  std::unordered_set<kvtier_pin*> live;  // guarded by mu
};

}  // namespace kvtier::capi

struct kvtier_pin {
  std::shared_ptr<kvtier::capi::PinRegistry> registry;
  kvtier::PinnedPrefix prefix;  // guarded by registry->mu once registered
  uint64_t process = kvtier::capi::ProcessGeneration();
};

struct kvtier_runtime {
  std::unique_ptr<kvtier::Runtime> runtime;
  std::shared_ptr<kvtier::HostCopyEngine> host;  // null on the CUDA engine
  kvtier::NamespaceId ns;
  kvtier::KeyHasher hasher;
  uint64_t block_bytes = 0;
  uint32_t block_tokens = 0;
  uint32_t engine_blocks = 0;  // pages of the engine's pool
  uint32_t state_blocks = 0;   // pages of one state checkpoint
  // The process that opened it (its threads live only there): its pid for
  // messages, its generation for the check.
  pid_t pid = getpid();
  uint64_t process = kvtier::capi::ProcessGeneration();
  std::shared_ptr<kvtier::capi::PinRegistry> pins = std::make_shared<kvtier::capi::PinRegistry>();
};

struct kvtier_completion {
  kvtier::Completion completion;
  uint64_t process = kvtier::capi::ProcessGeneration();  // whose runtime does the work
};

namespace kvtier::capi {

// Records `status` as this thread's last error when it is not OK; returns
// its code as an int.
int Report(const Status& status) noexcept;

// Runs `body` (returning Status) and reports its outcome; an exception
// becomes ResourceExhausted (std::bad_alloc, std::length_error: a size no
// allocation can meet) or Internal.
template <typename Body>
int Guard(Body&& body) noexcept {
  try {
    return Report(body());
  } catch (const std::bad_alloc&) {
    return Report(Status::ResourceExhausted("out of memory"));
  } catch (const std::length_error& e) {
    return Report(DescribedStatus(StatusCode::kResourceExhausted, "out of memory", [&] {
      return Status::ResourceExhausted(std::string("out of memory: ") + e.what());
    }));
  } catch (const std::exception& e) {
    return Report(Status::Internal(e.what()));
  } catch (...) {
    return Report(Status::Internal("unknown exception"));
  }
}

// InvalidArgument("<what> is NULL") when `p` is null.
inline Status Required(const void* p, std::string_view what) {
  if (p != nullptr) return Status::Ok();
  std::string message(what);
  message += " is NULL";
  return Status::InvalidArgument(message);
}

// A runtime this process can use: not NULL, and not inherited through fork(),
// which copies the runtime's memory but none of its threads (a call would
// wait on workers that do not exist); Unavailable otherwise.
Status Live(const kvtier_runtime* rt);
// True in a process forked from the one that made an object of `process`.
inline bool Forked(uint64_t process) { return ProcessGeneration() != process; }

// Hands log lines at info and above to a C callback.
class CallbackLogSink final : public LogSink {
 public:
  CallbackLogSink(kvtier_log_fn fn, void* user) : fn_(fn), user_(user) {}
  void Log(LogLevel level, std::string_view message) override {
    if (level < LogLevel::kInfo) return;
    const std::string line(message);  // NUL-terminated for C
    fn_(user_, static_cast<int>(level), line.c_str());
  }

 private:
  kvtier_log_fn fn_;
  void* user_;
};

// ResourceExhausted("<needed> <what> do not fit in capacity <capacity>"): the
// answer of every call that fills a caller's array and reports the size it
// needed.
inline Status DoNotFit(size_t needed, std::string_view what, size_t capacity) {
  return Status::ResourceExhausted(std::to_string(needed) + " " + std::string(what) +
                                   " do not fit in capacity " + std::to_string(capacity));
}

// Renders the runtime's statistics with `render` into a caller's buffer, NUL
// terminated, as kvtier_stats_json describes.
int StatsText(const kvtier_runtime* rt, std::string (*render)(const RuntimeStats&), char* buffer,
              size_t capacity, size_t* length);

// The keys of a C array (NULL is accepted only when n is 0).
Result<std::vector<BlockKey>> Keys(const kvtier_key* keys, size_t n);
std::optional<BlockKey> Parent(const kvtier_key* parent);
kvtier_key ToC(const BlockKey& key);

}  // namespace kvtier::capi
