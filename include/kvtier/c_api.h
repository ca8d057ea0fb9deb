/* The C API of kvtier: the runtime behind a stable C ABI, for engines that
 * are not written in C++ (a Python engine loads libkvtier.so with ctypes or
 * cffi; see python/kvtier).
 *
 * One kvtier_runtime serves one model: the YAML configuration it is opened
 * with (config/examples/default.yaml lists every key) names the model, hence
 * the namespace every call uses, the block geometry and the tiers.
 *
 * Errors: every call that can fail returns a kvtier_code (KVTIER_OK is 0) and
 * leaves a message for the calling thread, read with kvtier_last_error()
 * until that thread's next failing call (a successful call leaves it). No C++ exception leaves this
 * API; running out of memory is KVTIER_RESOURCE_EXHAUSTED. A NULL pointer where an argument is
 * required is KVTIER_INVALID_ARGUMENT, never a crash; a handle used after it was freed or closed is
 * undefined behaviour, as in any C API.
 *
 * Threads: any thread may call any function on a runtime, as on the C++
 * Runtime (include/kvtier/runtime.h, whose comments say what each call does
 * in detail); a completion handle may be waited on from any thread. Close a
 * runtime once, after its other calls have returned.
 *
 * Processes: a runtime serves the process that opened it. A child made by
 * fork() inherits its memory but none of its threads; there, calls on it
 * answer KVTIER_UNAVAILABLE, waits on its unfinished completions too, and
 * kvtier_close and kvtier_unpin return at once, leaving the parent's copy
 * alone. Open a runtime in each process that needs one.
 *
 * Keys: a kvtier_key is the 128-bit chained prefix key of one block; keys
 * passed to one call form a chain, keys[i] extending keys[i - 1]. Make them
 * with kvtier_key_chain (from token ids) or kvtier_key_from_engine_hash.
 */
#ifndef KVTIER_C_API_H_
#define KVTIER_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KVTIER_C_EXPORT
#else
#define KVTIER_C_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a declaration below changes incompatibly. */
#define KVTIER_C_API_VERSION 1

/* The codes of kvtier::StatusCode, same values. */
typedef enum kvtier_code {
  KVTIER_OK = 0,
  KVTIER_NOT_FOUND = 1,          /* a miss */
  KVTIER_INVALID_ARGUMENT = 2,   /* the caller passed something malformed */
  KVTIER_RESOURCE_EXHAUSTED = 3, /* no room, or out of memory */
  KVTIER_UNAVAILABLE = 4,        /* retryable: a server or device is down, or shut down */
  KVTIER_BUSY = 5,               /* the request queue is full; try again later */
  KVTIER_IO_ERROR = 6,
  KVTIER_CORRUPTION = 7,    /* stored bytes failed their check: never handed over */
  KVTIER_NOT_SUPPORTED = 8, /* compiled out, or the hardware is absent */
  KVTIER_CANCELLED = 9,
  KVTIER_DEADLINE_EXCEEDED = 10,
  KVTIER_INTERNAL = 11
} kvtier_code;

typedef struct kvtier_key {
  uint64_t hi;
  uint64_t lo;
} kvtier_key;

typedef struct kvtier_runtime kvtier_runtime;
typedef struct kvtier_completion kvtier_completion;
typedef struct kvtier_pin kvtier_pin;

/* Optional hints with a lookup or a save; NULL = none. Zero-initialise, then
 * set what is known. */
typedef struct kvtier_hints {
  uint64_t session_id;    /* conversation or agent session; 0 = none */
  uint64_t request_id;    /* lookups: the engine's request id; 0 = none. A repeated
                             lookup of one id is not another sighting for the policies */
  float expected_reuse;   /* chance the request's tail is used again, in [0, 1] ... */
  int has_expected_reuse; /* ... read only when this is non-zero */
  int bypass_admission;   /* saves: store whatever the hub's admission says */
} kvtier_hints;

/* The engine's KV cache on a GPU, for the CUDA copy engine: its tensors'
 * device pointers (one per layer, or the one cross-layer tensor, as the
 * model's `layout` says), laid out as include/kvtier/kv_layout.h describes. */
typedef struct kvtier_cuda_cache {
  void* const* tensors; /* device pointers, not owned */
  uint32_t num_tensors;
  uint32_t num_blocks; /* pages in the engine's pool; 0: taken from `shape` */
  int device;          /* CUDA device ordinal */
  void* stream;        /* the engine's compute stream (cudaStream_t); NULL = legacy default */
  /* Optional: the physical shape of each tensor, outermost dimension first
   * (kv_layout.h lists it per layout), as the engine allocated it. Checked
   * against the config's model before anything is copied: a model section
   * that does not describe these tensors would copy the wrong bytes.
   * NULL: not checked. */
  const uint64_t* shape;
  uint32_t shape_rank;
} kvtier_cuda_cache;

/* ---- Versions -------------------------------------------------------------- */

/* KVTIER_C_API_VERSION of the loaded library: a binding that loads it at
 * run time (ctypes) compares this with the version it was written for. */
KVTIER_C_EXPORT int kvtier_c_api_version(void);
/* The library's version, "major.minor.patch". */
KVTIER_C_EXPORT const char* kvtier_version_string(void);

/* ---- Errors ---------------------------------------------------------------- */

/* The message of this thread's last failing call ("" if none), such as
 * "invalid_argument: keys is NULL". Valid until this thread's next failing
 * call. */
KVTIER_C_EXPORT const char* kvtier_last_error(void);
/* Stable lower-case name of a code ("not_found"); "unknown" for others. */
KVTIER_C_EXPORT const char* kvtier_code_name(int code);

/* ---- Runtime --------------------------------------------------------------- */

/* Log levels, as kvtier::LogLevel. */
typedef enum kvtier_log_level {
  KVTIER_LOG_DEBUG = 0,
  KVTIER_LOG_INFO = 1,
  KVTIER_LOG_WARNING = 2,
  KVTIER_LOG_ERROR = 3
} kvtier_log_level;
/* Receives a runtime's log lines at KVTIER_LOG_INFO and above (`message` is
 * valid during the call only), from any of its threads, from kvtier_open
 * until kvtier_close returns. Must not block long or call into kvtier. */
typedef void (*kvtier_log_fn)(void* user, int level, const char* message);

/* Opens a runtime from exactly one of `config_path` (a YAML file) and
 * `config_text` (YAML in memory), after applying `overrides` ("dotted.path=
 * value" strings, as kvtier-bench --set; NULL when num_overrides is 0).
 * `cuda` NULL: the host stand-in engine, a host-memory pool of the config's
 * gpu_pool_blocks pages shaped like the engine's cache (reached with
 * kvtier_host_block_write / _read), for tests and simulations. Otherwise the
 * CUDA engine over the given cache (KVTIER_NOT_SUPPORTED in a build without
 * CUDA). `log` NULL: log lines go to stderr. Config errors are
 * KVTIER_INVALID_ARGUMENT naming line and column. */
KVTIER_C_EXPORT int kvtier_open(const char* config_path, const char* config_text,
                                const char* const* overrides, size_t num_overrides,
                                const kvtier_cuda_cache* cuda, kvtier_log_fn log, void* log_user,
                                kvtier_runtime** out);
/* Finishes queued and in-flight work, stops the threads and frees the
 * runtime. NULL is ignored. Completions still held stay valid (free them). */
KVTIER_C_EXPORT void kvtier_close(kvtier_runtime* rt);

/* The model's namespace id, bytes per block and tokens per block, the
 * pages of the engine's pool (engine blocks are numbered below it), and the
 * pages one state checkpoint takes (runtime.state_blocks; 0: KV only). */
KVTIER_C_EXPORT uint64_t kvtier_namespace(const kvtier_runtime* rt);
KVTIER_C_EXPORT uint64_t kvtier_block_bytes(const kvtier_runtime* rt);
KVTIER_C_EXPORT uint32_t kvtier_block_tokens(const kvtier_runtime* rt);
KVTIER_C_EXPORT uint32_t kvtier_engine_blocks(const kvtier_runtime* rt);
KVTIER_C_EXPORT uint32_t kvtier_state_blocks(const kvtier_runtime* rt);

/* ---- Keys ------------------------------------------------------------------ */

/* Keys of the full blocks of `tokens` (a trailing partial block gets none),
 * continuing `parent` (NULL: the sequence starts here). Writes
 * min(count, capacity) keys to `out` and the number of full blocks to
 * `*count`; KVTIER_RESOURCE_EXHAUSTED when capacity is smaller (call with
 * capacity 0 to size `out`). */
KVTIER_C_EXPORT int kvtier_key_chain(const kvtier_runtime* rt, const kvtier_key* parent,
                                     const int32_t* tokens, size_t num_tokens, kvtier_key* out,
                                     size_t capacity, size_t* count);
/* As kvtier_key_chain, with `extra` (`extra_bytes` bytes) mixed into every
 * key: whatever besides the token ids changes the KV, such as a LoRA
 * adapter's id or a tenant's cache salt, so that the same tokens under
 * another adapter never hit these blocks. No extra (0 bytes) gives
 * kvtier_key_chain's keys. The C++ KeyHasher::Next(parent, tokens, extra). */
KVTIER_C_EXPORT int kvtier_key_chain_extra(const kvtier_runtime* rt, const kvtier_key* parent,
                                           const int32_t* tokens, size_t num_tokens,
                                           const void* extra, size_t extra_bytes, kvtier_key* out,
                                           size_t capacity, size_t* count);
/* The key of a block named by an engine's own block hash bytes (vLLM's block
 * hash), continuing `parent` (NULL: first block). */
KVTIER_C_EXPORT int kvtier_key_from_engine_hash(const kvtier_runtime* rt, const kvtier_key* parent,
                                                const void* hash, size_t hash_bytes,
                                                kvtier_key* out);

/* Keys of `count` consecutive blocks named by engine hashes of `hash_bytes`
 * bytes each, laid end to end in `hashes`: out[0] continues `parent` (NULL:
 * first block) and out[i] continues out[i - 1]. The same keys as `count`
 * calls of kvtier_key_from_engine_hash, in one call. */
KVTIER_C_EXPORT int kvtier_keys_from_engine_hashes(const kvtier_runtime* rt,
                                                   const kvtier_key* parent, const void* hashes,
                                                   size_t hash_bytes, size_t count,
                                                   kvtier_key* out);

/* ---- Lookups, saves and loads ---------------------------------------------- */

/* How many leading keys are stored (`*hit_blocks`) and, when `tiers` is not
 * NULL (room for num_keys entries), the index of the fastest tier holding
 * each hit, 0 being the host hub. */
KVTIER_C_EXPORT int kvtier_lookup(kvtier_runtime* rt, const kvtier_key* keys, size_t num_keys,
                                  const kvtier_hints* hints, size_t* hit_blocks, uint8_t* tiers);
/* As kvtier_lookup, and keeps the hits from being evicted until
 * kvtier_unpin(*pin): for an engine that looks a request up when it is
 * scheduled and loads it later. `*pin` is set even with no hits. */
KVTIER_C_EXPORT int kvtier_lookup_and_pin(kvtier_runtime* rt, const kvtier_key* keys,
                                          size_t num_keys, const kvtier_hints* hints,
                                          size_t* hit_blocks, uint8_t* tiers, kvtier_pin** pin);
/* Releases the blocks and frees the pin. NULL is ignored. A pin may outlive
 * its runtime: kvtier_close releases every pin still held, and kvtier_unpin
 * then only frees it. */
KVTIER_C_EXPORT void kvtier_unpin(kvtier_pin* pin);
/* Copies engine_blocks[i] into the hub as keys[i] (keys[0] extending `parent`,
 * NULL for a chain's first block). The copy runs after this returns: keep the
 * pages unwritten until the completion is done (a kvtier_load into them is
 * refused with KVTIER_INVALID_ARGUMENT meanwhile). `*out` is a completion with
 * one result per key, to free with kvtier_completion_free. */
KVTIER_C_EXPORT int kvtier_save(kvtier_runtime* rt, const kvtier_key* parent,
                                const kvtier_key* keys, const uint32_t* engine_blocks,
                                size_t num_keys, const kvtier_hints* hints,
                                kvtier_completion** out);
/* Called with each layer index, in increasing order, once that layer of
 * every block being loaded has landed; on an internal thread, must not block
 * or call back into kvtier (kvtier_layer_failed excepted). */
typedef void (*kvtier_layer_fn)(void* user, uint32_t layer);
/* Called from inside a kvtier_layer_fn, on the thread running it: the
 * engine's work for this layer failed. The load's copied blocks end
 * KVTIER_INTERNAL ("on_layer failed: <why>"; why may be NULL), and on_layer
 * is not called for later layers, as with a C++ on_layer that throws. Returns
 * KVTIER_OK; KVTIER_INVALID_ARGUMENT when no on_layer is running on this
 * thread. */
KVTIER_C_EXPORT int kvtier_layer_failed(const char* why);
/* Copies keys[i] into engine_blocks[i], reading lower tiers first.
 * `timeout_ns` (< 0: no deadline) bounds the waits for hub room and for reads
 * from lower tiers: a block still waiting for those at the deadline ends
 * KVTIER_DEADLINE_EXCEEDED. Room held by other requests' pins on other keys
 * is waited for at most a second; a block whose room never came ends
 * KVTIER_RESOURCE_EXHAUSTED when the deadline is later. A block already in the host tier, and any
 * copy into engine pages once issued, is not cut short (Runtime::Load in runtime.h). The engine
 * recomputes every block whose result is not KVTIER_OK. `on_layer` may be NULL. */
KVTIER_C_EXPORT int kvtier_load(kvtier_runtime* rt, const kvtier_key* keys,
                                const uint32_t* engine_blocks, size_t num_keys, int64_t timeout_ns,
                                kvtier_layer_fn on_layer, void* user, kvtier_completion** out);
/* Hybrid models (runtime.state_blocks > 0 in the config): copies the
 * `num_blocks` engine blocks (state_blocks of them) holding the recurrent
 * state at the end of the stored block `boundary` into kvtier as its state
 * checkpoint. Lookups then answer only prefixes whose last block has one
 * (Runtime::SaveState in runtime.h). One result per block, as kvtier_save. */
KVTIER_C_EXPORT int kvtier_save_state(kvtier_runtime* rt, const kvtier_key* boundary,
                                      const uint32_t* engine_blocks, size_t num_blocks,
                                      const kvtier_hints* hints, kvtier_completion** out);
/* Copies the state checkpoint of `boundary` into engine_blocks (state_blocks
 * of them), as kvtier_load: KVTIER_NOT_FOUND per block when none is stored. */
KVTIER_C_EXPORT int kvtier_load_state(kvtier_runtime* rt, const kvtier_key* boundary,
                                      const uint32_t* engine_blocks, size_t num_blocks,
                                      int64_t timeout_ns, kvtier_completion** out);
/* The request whose lookup named `keys` has finished with `output_tokens`
 * generated tokens (the `reuse` policies learn from it). */
KVTIER_C_EXPORT int kvtier_request_finished(kvtier_runtime* rt, const kvtier_key* keys,
                                            size_t num_keys, uint32_t output_tokens);
/* Drops keys from every tier (KVTIER_INVALID_ARGUMENT while a stored child is
 * kept; KVTIER_BUSY while one is in use). Waits at most 1 s for the lower
 * tiers: KVTIER_DEADLINE_EXCEEDED names one that had not answered, whose
 * copies go when it does; the keys are gone from lookups either way. */
KVTIER_C_EXPORT int kvtier_remove(kvtier_runtime* rt, const kvtier_key* keys, size_t num_keys);
/* `*saved` = 1 when every key is stored in some tier, else 0. */
KVTIER_C_EXPORT int kvtier_is_saved(kvtier_runtime* rt, const kvtier_key* keys, size_t num_keys,
                                    int* saved);

/* ---- Completions ----------------------------------------------------------- */

/* Waits until every block has its result, at most `timeout_ns` (< 0: no
 * limit). Returns KVTIER_DEADLINE_EXCEEDED while still running (the work goes
 * on), else the first block's failure, or KVTIER_OK when all succeeded. */
KVTIER_C_EXPORT int kvtier_completion_wait(const kvtier_completion* c, int64_t timeout_ns);
/* 1 once every block has its result, else 0. Never blocks. */
KVTIER_C_EXPORT int kvtier_completion_done(const kvtier_completion* c);
KVTIER_C_EXPORT size_t kvtier_completion_size(const kvtier_completion* c);
/* Block i's result and, if `bytes` is not NULL, its byte count.
 * KVTIER_INVALID_ARGUMENT (with `*bytes` 0) for i out of range or a
 * completion not done yet; a call refused before it could list its blocks
 * (size 0, out of memory) answers every i with its refusal. */
KVTIER_C_EXPORT int kvtier_completion_result(const kvtier_completion* c, size_t i, uint64_t* bytes);
/* Loads: layers landed for every block being copied. */
KVTIER_C_EXPORT uint32_t kvtier_completion_layers_done(const kvtier_completion* c);
/* Runs fn(user) once, when the results are final: on the thread that
 * finishes the work, before any kvtier_completion_wait returns and after
 * every fn registered before it, or before this returns if the completion
 * is done already. Like on_layer it must not block or call back into
 * kvtier, except to read this completion: on fn's thread it is done already
 * (kvtier_completion_done says 1, kvtier_completion_wait and _result answer
 * at once; other threads see it done once fn and its peers have returned).
 * It is for waking an event loop, which then reads the results. It runs even
 * if the handle is freed first. */
typedef void (*kvtier_done_fn)(void* user);
KVTIER_C_EXPORT int kvtier_completion_on_done(const kvtier_completion* c, kvtier_done_fn fn,
                                              void* user);
/* Frees the handle, not the work: a save or load still running finishes.
 * NULL is ignored. */
KVTIER_C_EXPORT void kvtier_completion_free(kvtier_completion* c);

/* ---- GPU pool: admission and preemption ------------------------------------ */

KVTIER_C_EXPORT int kvtier_report_engine_usage(kvtier_runtime* rt, uint32_t free_blocks,
                                               uint32_t total_blocks);
KVTIER_C_EXPORT int kvtier_track_request(kvtier_runtime* rt, uint64_t request_id,
                                         const kvtier_key* keys, size_t num_keys,
                                         uint32_t engine_blocks);
KVTIER_C_EXPORT void kvtier_untrack_request(kvtier_runtime* rt, uint64_t request_id);
/* 1 when a new request needing `blocks_needed` blocks may start (also before
 * any usage report), else 0 (also for a NULL runtime). */
KVTIER_C_EXPORT int kvtier_should_admit(kvtier_runtime* rt, uint32_t blocks_needed);
/* Tracked requests to preempt, cheapest to restore first: writes up to
 * `capacity` ids to `request_ids` and the number proposed to `*count`
 * (KVTIER_RESOURCE_EXHAUSTED when capacity is smaller; those past it are
 * still counted as proposed). Save a victim's whole chain with
 * bypass_admission and wait for it before freeing its pages. */
KVTIER_C_EXPORT int kvtier_propose_preemption(kvtier_runtime* rt, uint32_t blocks_to_free,
                                              uint64_t* request_ids, size_t capacity,
                                              size_t* count);

/* ---- Statistics and the host stand-in --------------------------------------- */

/* The runtime's statistics as JSON (the admin endpoint's GET /stats), NUL
 * terminated: writes min(length + 1, capacity) bytes and the length without
 * the NUL to `*length`; KVTIER_RESOURCE_EXHAUSTED when it does not fit. */
KVTIER_C_EXPORT int kvtier_stats_json(const kvtier_runtime* rt, char* buffer, size_t capacity,
                                      size_t* length);
/* The same statistics in the Prometheus text format (the admin endpoint's
 * GET /metrics), for an engine that serves them with its own; sized and
 * terminated as kvtier_stats_json. */
KVTIER_C_EXPORT int kvtier_metrics_text(const kvtier_runtime* rt, char* buffer, size_t capacity,
                                        size_t* length);
/* Writes or reads engine block `engine_block` of the host stand-in, in the
 * canonical host format (`bytes` must be kvtier_block_bytes long).
 * KVTIER_NOT_SUPPORTED for a runtime on the CUDA engine. */
KVTIER_C_EXPORT int kvtier_host_block_write(kvtier_runtime* rt, uint32_t engine_block,
                                            const void* data, size_t bytes);
KVTIER_C_EXPORT int kvtier_host_block_read(kvtier_runtime* rt, uint32_t engine_block, void* data,
                                           size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* KVTIER_C_API_H_ */
