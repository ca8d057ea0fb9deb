// FaultInjectingTier: wraps any Tier and injects the failures a real backend
// shows: errors at a rate, errors after N operations, added latency (ops then
// complete on a background thread), corrupted bytes on read, failed removes,
// reads, writes and removes that never answer until released (CallStall), and
// Contains answers that are wrong, failed or never come (ContainsFaults).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kvtier/options.h"
#include "kvtier/tier.h"

namespace kvtier::testing {

// Holds a tier's calls of one kind unanswered while stalled (a hung device
// or server) until Release(), shared with the tier through FaultOptions.
// Thread-safe. REQUIRES: Release() before the tier shuts down while calls
// are held (the tier's Shutdown waits for them).
class CallStall {
 public:
  void Stall();
  // Ends the stall; the held calls then answer, in the order they came.
  void Release();
  uint64_t held() const;  // calls held now

  // For the tier: while stalled, keeps `done` to finish with `answer` at
  // Release() (true); false when the call is to run now.
  using Answer = std::function<void(CompletionSource&)>;
  bool HoldIfStalled(CompletionSource& done, Answer answer);

 private:
  struct Held {
    std::shared_ptr<CompletionSource> done;
    Answer answer;
  };

  mutable std::mutex mu_;
  bool stalled_ = false;    // guarded by mu_
  std::vector<Held> held_;  // guarded by mu_
};

// Faults of Contains that a test switches while the tier runs, shared with
// the tier through FaultOptions::contains. Thread-safe.
// REQUIRES: Clear() before the tier shuts down while calls are held (the
// tier's Shutdown waits for them).
class ContainsFaults {
 public:
  // Contains answers `error` for `key`, whatever the inner tier holds.
  void Fail(const BlockKey& key, StatusCode error = StatusCode::kIOError);
  // Contains answers OK for `key` whether or not the inner tier holds it:
  // an index that is wrong, or a block lost right after the answer.
  void ReportPresent(const BlockKey& key);
  // Contains calls from now on are held unanswered (a hung index or
  // server) until Clear().
  void Stall();
  // Ends every fault; the held calls then answer as the inner tier does.
  void Clear();
  // Contains calls the tier received, held or not.
  uint64_t calls() const;

  // For the tier: counts a call and, while stalled, keeps `done` to finish
  // with `answer` at Clear() (true); false when the call is to run now.
  bool HoldIfStalled(CompletionSource& done, CallStall::Answer answer);
  // For the tier: the injected answer for `key`, if any.
  std::optional<Status> Injected(const BlockKey& key) const;

 private:
  CallStall stall_;
  mutable std::mutex mu_;
  std::map<BlockKey, StatusCode> fail_;  // guarded by mu_
  std::set<BlockKey> present_;           // guarded by mu_
  uint64_t calls_ = 0;                   // guarded by mu_
};

struct FaultOptions {
  double error_rate = 0.0;              // fraction of ops failed with `error`
  uint64_t fail_after_ops = UINT64_MAX; // ops beyond this many fail with `error`
  StatusCode error = StatusCode::kIOError;
  std::chrono::microseconds latency{0}; // added before each batch completes
  bool corrupt_on_read = false;         // flip a byte of every successful read
  std::set<BlockKey> unreadable;        // reads of these keys fail with `error` (a bad sector)
  bool truncate_on_read = false;        // report one byte less than was read
  uint64_t fail_removes = 0;            // the first this many removed keys fail with `error`
                                        // and stay stored (the tier was unreachable)
  bool local_index = false;             // claim a local index, as a persistent tier does:
                                        // the runtime adopts what Contains finds
  uint32_t max_batch_blocks = 0;        // the batch limit declared; 0 = the inner tier's
  std::shared_ptr<ContainsFaults> contains;  // switchable Contains faults; null = none
  std::shared_ptr<CallStall> stall_reads;    // holds reads while stalled; null = never
  std::shared_ptr<CallStall> stall_writes;   // holds writes while stalled; null = never
  std::shared_ptr<CallStall> stall_removes;  // holds removes while stalled; null = never
  uint64_t seed = 42;
};

// The wrapper owns `inner` and shuts it down with itself.
std::unique_ptr<Tier> NewFaultInjectingTier(std::unique_ptr<Tier> inner, FaultOptions options);

// A RuntimeOptions::tier_factory building each tier with CreateTier and
// wrapping the one named `name` with `options`.
TierFactory FaultyTierFactory(std::string name, FaultOptions options);

}  // namespace kvtier::testing
