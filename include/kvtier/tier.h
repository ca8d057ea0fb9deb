// Tier: one storage level below the engine's KV cache (host DRAM, remote
// memory, NVMe, Redis). Every tier offers the same small batched, asynchronous
// interface and passes the same conformance suite.
//
// Like a block device, the public methods are non-virtual: they validate the
// batch, count, refuse work after Shutdown() and track in-flight batches, then
// call the protected Do* methods that a backend implements. What a backend can
// and cannot do is declared in TierCapabilities, never discovered by casting.
//
// Buffers: the ops span may be released once a call returns; the memory each
// op points to must stay valid until the returned Completion finishes.
// Thread safety: all public methods may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "kvtier/block_key.h"
#include "kvtier/completion.h"
#include "kvtier/env.h"
#include "kvtier/export.h"
#include "kvtier/options.h"
#include "kvtier/status.h"

namespace kvtier {

struct TierCapabilities {
  bool persistent = false;   // contents survive a process restart
  bool shared = false;       // other processes or hosts see the same blocks: when
                             // also checksummed, the runtime asks it on a lookup
                             // miss, as a local_index tier, to find the blocks
                             // they saved (one that fails or is late to answer
                             // is left out for 1 s)
  bool checksummed = false;  // blocks carry a BlockHeader; corruption is detected
  // Contains() answers from memory without I/O, so the runtime may ask it on
  // a lookup miss (how a restarted runtime finds what a persistent tier kept).
  bool local_index = false;
  uint32_t max_batch_blocks = 4096;  // larger batches are refused (InvalidArgument)
  uint64_t max_block_bytes = 0;      // largest payload; 0 = no limit beyond capacity
  // A copy neither written nor read for this long may be gone (a TTL): the
  // runtime writes such a block again before it lets its last other copy
  // go. 0: copies stay until removed or evicted.
  uint64_t expiry_ms = 0;
};

struct TierUsage {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t blocks = 0;
  // Blocks an earlier run stored that this run has not claimed yet (NVMe
  // after a restart): loadable once a lookup adopts them, and left out of
  // used_bytes and blocks meanwhile, since new writes may displace them.
  uint64_t unclaimed_blocks = 0;
  uint64_t unclaimed_bytes = 0;
};

// Counters kept by the Tier base class for every backend.
struct TierCounters {
  uint64_t read_blocks = 0;  // read ops attempted
  uint64_t read_hits = 0;    // read ops that returned data
  uint64_t bytes_read = 0;
  uint64_t write_blocks = 0;  // write ops that stored data
  uint64_t bytes_written = 0;
  uint64_t removed_blocks = 0;
  uint64_t errors = 0;       // results other than OK and NotFound
  uint64_t corruptions = 0;  // Corruption results
};

struct ReadOp {
  BlockKey key;
  std::span<std::byte> dst;  // receives the payload; must be >= its size
};

struct WriteOp {
  BlockKey key;
  std::span<const std::byte> src;  // payload; must be non-empty
  // PayloadChecksum(kXxh3_64, src) when the caller already has it (the
  // runtime takes it once, when a block first leaves the hub): a tier that
  // stores block headers uses it instead of hashing the payload again. A
  // wrong value makes later reads of the block fail as Corruption.
  std::optional<uint64_t> checksum;
};

class KVTIER_EXPORT Tier {
 public:
  Tier(const Tier&) = delete;
  Tier& operator=(const Tier&) = delete;
  // REQUIRES: Shutdown() was called (the destructor of a backend calls it).
  virtual ~Tier();

  const std::string& name() const { return name_; }
  const std::string& type() const { return type_; }
  const TierCapabilities& capabilities() const { return caps_; }

  // Per-op results: OK with the payload size as bytes; NotFound (a miss);
  // Corruption (stored bytes failed their check; nothing trustworthy was
  // copied); InvalidArgument (dst too small); or a backend error.
  Completion Read(NamespaceId ns, std::span<const ReadOp> ops);
  // Per-op results: OK; ResourceExhausted when the tier is full. Writing an
  // existing key replaces it. A batch holding an empty payload or one over
  // max_block_bytes is refused whole with InvalidArgument.
  Completion Write(NamespaceId ns, std::span<const WriteOp> ops);
  // Per-key results: OK (removed or absent).
  Completion Remove(NamespaceId ns, std::span<const BlockKey> keys);
  // Per-key results: OK when present, NotFound when absent. Moves no payload.
  Completion Contains(NamespaceId ns, std::span<const BlockKey> keys);

  // The caller (the runtime, after adopting blocks a persistent tier kept
  // across a restart, or a shared tier holds from another process) now
  // accounts for `keys` and will evict them itself: a backend that sets
  // recovered blocks aside as free space (the NVMe tier leaves them out of
  // Usage() and drops them first) counts them as used from now on, and a
  // shared one counts blocks it did not write (Redis, kvtier-memd), taking
  // the caller's word that they are there. Synchronous and in memory; a
  // no-op for backends without such blocks and after Shutdown().
  void Claim(NamespaceId ns, std::span<const BlockKey> keys);

  virtual TierUsage Usage() const = 0;
  TierCounters Counters() const;

  // A hint: reads and writes will use buffers inside `memory` (the host
  // hub's arena). A backend may register it for faster I/O (the NVMe tier:
  // io_uring fixed buffers). Returns the bytes registered; 0 when the backend
  // registers nothing or the kernel refused (buffers then work unregistered).
  // `memory` must stay mapped until Shutdown(). Call before the I/O that uses it.
  uint64_t RegisterHostMemory(std::span<std::byte> memory) { return DoRegisterHostMemory(memory); }

  // Refuses new work (Unavailable), waits for in-flight batches and for
  // every Do* call to return (a backend may finish a batch before it lets go
  // of its own locks), then calls DoShutdown(). Idempotent.
  void Shutdown();

 protected:
  Tier(std::string name, std::string type, TierCapabilities caps);

  // Each Do* must eventually Set every item and Finish `done`, on any thread.
  virtual void DoRead(NamespaceId ns, std::span<const ReadOp> ops, CompletionSource done) = 0;
  virtual void DoWrite(NamespaceId ns, std::span<const WriteOp> ops, CompletionSource done) = 0;
  virtual void DoRemove(NamespaceId ns, std::span<const BlockKey> keys, CompletionSource done) = 0;
  virtual void DoContains(NamespaceId ns, std::span<const BlockKey> keys,
                          CompletionSource done) = 0;
  // Releases backend resources; called once, with nothing in flight.
  virtual void DoShutdown() {}
  virtual uint64_t DoRegisterHostMemory(std::span<std::byte> /*memory*/) { return 0; }
  virtual void DoClaim(NamespaceId /*ns*/, std::span<const BlockKey> /*keys*/) {}

 private:
  enum class OpKind { kRead, kWrite, kRemove, kContains };
  // Checks the batch; returns a finished completion when it must not run.
  std::optional<Completion> Refuse(size_t items, OpKind kind);
  // The source of a batch Refuse let through, its completion (`*c`)
  // counted and ending the batch's count when it finishes. Memory running
  // out undoes Refuse's counts and throws, so Shutdown cannot wait for them.
  CompletionSource Track(OpKind kind, size_t items, Completion* c);
  // Ends the count a call holds while its Do* runs (Refuse takes it).
  void EndCall();
  void Count(OpKind kind, const Completion& c);

  const std::string name_;
  const std::string type_;
  const TierCapabilities caps_;

  mutable std::mutex mu_;
  std::condition_variable drained_;
  uint64_t in_flight_ = 0;      // guarded by mu_
  bool shutting_down_ = false;  // guarded by mu_
  bool shut_down_ = false;      // guarded by mu_
  TierCounters counters_;       // guarded by mu_
};

// What a tier factory may use besides its options.
struct TierContext {
  uint64_t block_bytes = 0;  // payload size of one block
  std::shared_ptr<Clock> clock;
  std::shared_ptr<LogSink> log;
  // Called when the tier learns that copies it stored are gone without a
  // Remove (a kvtier-memd server restarted empty): the runtime forgets them,
  // so lookups stop reporting them and the copies it still has elsewhere
  // are written down again instead of dropped as backed. On any thread,
  // with none of the tier's locks held; may be empty.
  std::function<void(NamespaceId ns, std::span<const BlockKey> keys)> copies_lost;
};

// Builds a tier by its `type:` name. NotSupported for a type this build does
// not include (naming the CMake switch), InvalidArgument for an unknown type
// or bad options.
KVTIER_EXPORT Result<std::unique_ptr<Tier>> CreateTier(const TierOptions& options,
                                                       const TierContext& context);

}  // namespace kvtier
