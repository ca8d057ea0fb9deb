// The C API's engine calls: lookups (and pins), saves, loads, removes, and the
// GPU pool's admission and preemption.
#include <chrono>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "capi/c_api_internal.h"

namespace kvtier::capi {
namespace {

LookupOptions ToLookupOptions(const kvtier_hints* hints) {
  LookupOptions options;
  if (hints == nullptr) return options;
  options.session_id = hints->session_id;
  options.request_id = hints->request_id;
  if (hints->has_expected_reuse != 0) options.expected_reuse = hints->expected_reuse;
  return options;
}

SaveOptions ToSaveOptions(const kvtier_hints* hints) {
  SaveOptions options;
  if (hints == nullptr) return options;
  options.session_id = hints->session_id;
  if (hints->has_expected_reuse != 0) options.expected_reuse = hints->expected_reuse;
  options.bypass_admission = hints->bypass_admission != 0;
  return options;
}

Status CheckHints(const kvtier_hints* hints) {
  if (hints == nullptr || hints->has_expected_reuse == 0) return Status::Ok();
  const float r = hints->expected_reuse;
  if (!(r >= 0.0f && r <= 1.0f)) {
    return Status::InvalidArgument("hints.expected_reuse must be in [0, 1], got " +
                                   std::to_string(r));
  }
  return Status::Ok();
}

// What an on_layer reported through kvtier_layer_failed. `failed` is set
// first: without memory for the reason the failure still stands.
struct LayerFailure {
  bool failed = false;
  std::string why;
};
// The one of the on_layer running on this thread; set only while it runs.
thread_local LayerFailure* layer_failure = nullptr;

// Calls a C on_layer. A failure it reports is thrown, which ends the load's
// blocks Internal as a C++ on_layer that throws does.
void CallOnLayer(kvtier_layer_fn on_layer, void* user, uint32_t layer) {
  LayerFailure failure;
  // Restored however on_layer returns: a C++ function passed as one may throw.
  struct Restore {
    LayerFailure* outer;
    ~Restore() { layer_failure = outer; }
  } restore{std::exchange(layer_failure, &failure)};
  on_layer(user, layer);
  if (failure.failed) {
    if (failure.why.empty()) throw std::runtime_error("on_layer failed (no memory for its reason)");
    throw std::runtime_error(failure.why);
  }
}

// Writes a lookup's hit count, and the tier of each hit when `tiers` is set.
void ReportHits(const LookupResult& result, size_t* hit_blocks, uint8_t* tiers) {
  *hit_blocks = result.hit_blocks;
  if (tiers == nullptr) return;
  for (size_t i = 0; i < result.hit_blocks && i < result.tier.size(); ++i)
    tiers[i] = result.tier[i];
}

// The checks both lookups make, in order; the keys when they pass, with
// *hit_blocks 0 until the lookup answers.
Result<std::vector<BlockKey>> LookupKeys(const kvtier_runtime* rt, const kvtier_key* keys,
                                         size_t num_keys, const kvtier_hints* hints,
                                         size_t* hit_blocks) {
  KVTIER_RETURN_IF_ERROR(Live(rt));
  KVTIER_RETURN_IF_ERROR(Required(hit_blocks, "hit_blocks"));
  *hit_blocks = 0;
  KVTIER_RETURN_IF_ERROR(CheckHints(hints));
  return Keys(keys, num_keys);
}

// The engine blocks of a save or a load (NULL only when n is 0).
Result<std::span<const uint32_t>> Blocks(const uint32_t* blocks, size_t n) {
  if (n > 0 && blocks == nullptr) return Status::InvalidArgument("engine_blocks is NULL");
  // As for keys (Keys): more than an address space holds is a wrong count.
  if (n > SIZE_MAX / sizeof(uint32_t)) {
    return Status::InvalidArgument("the count of engine_blocks is " + std::to_string(n) +
                                   ", more than memory can hold");
  }
  return std::span<const uint32_t>(blocks, n);
}

}  // namespace
}  // namespace kvtier::capi

using kvtier::BlockKey;
using kvtier::Status;
using kvtier::capi::Guard;
using kvtier::capi::Required;

extern "C" {

int kvtier_lookup(kvtier_runtime* rt, const kvtier_key* keys, size_t num_keys,
                  const kvtier_hints* hints, size_t* hit_blocks, uint8_t* tiers) {
  return Guard([&]() -> Status {
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> k,
                            kvtier::capi::LookupKeys(rt, keys, num_keys, hints, hit_blocks));
    KVTIER_ASSIGN_OR_RETURN(kvtier::LookupResult result,
                            rt->runtime->Lookup(rt->ns, k, kvtier::capi::ToLookupOptions(hints)));
    kvtier::capi::ReportHits(result, hit_blocks, tiers);
    return Status::Ok();
  });
}

int kvtier_lookup_and_pin(kvtier_runtime* rt, const kvtier_key* keys, size_t num_keys,
                          const kvtier_hints* hints, size_t* hit_blocks, uint8_t* tiers,
                          kvtier_pin** pin) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(pin, "pin"));
    *pin = nullptr;
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> k,
                            kvtier::capi::LookupKeys(rt, keys, num_keys, hints, hit_blocks));
    auto owned = std::make_unique<kvtier_pin>();
    owned->registry = rt->pins;
    KVTIER_ASSIGN_OR_RETURN(
        owned->prefix, rt->runtime->LookupAndPin(rt->ns, k, kvtier::capi::ToLookupOptions(hints)));
    kvtier::capi::ReportHits(owned->prefix.result(), hit_blocks, tiers);
    {
      std::lock_guard lock(rt->pins->mu);
      rt->pins->live.insert(owned.get());
    }
    *pin = owned.release();
    return Status::Ok();
  });
}

void kvtier_unpin(kvtier_pin* pin) {
  if (pin == nullptr) return;
  // In a forked child the runtime's lock may be held by a thread that does
  // not exist here: the pin's memory is left as the parent's copy.
  if (kvtier::capi::Forked(pin->process)) return;
  Guard([&]() -> Status {
    std::lock_guard lock(pin->registry->mu);
    if (pin->registry->live.erase(pin) != 0) pin->prefix = kvtier::PinnedPrefix();
    return Status::Ok();
  });
  delete pin;
}

int kvtier_save(kvtier_runtime* rt, const kvtier_key* parent, const kvtier_key* keys,
                const uint32_t* engine_blocks, size_t num_keys, const kvtier_hints* hints,
                kvtier_completion** out) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(out, "out"));
    *out = nullptr;
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_RETURN_IF_ERROR(kvtier::capi::CheckHints(hints));
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> k, kvtier::capi::Keys(keys, num_keys));
    KVTIER_ASSIGN_OR_RETURN(std::span<const uint32_t> b,
                            kvtier::capi::Blocks(engine_blocks, num_keys));
    *out = new kvtier_completion{rt->runtime->Save(rt->ns, kvtier::capi::Parent(parent), k, b,
                                                   kvtier::capi::ToSaveOptions(hints))};
    return Status::Ok();
  });
}

int kvtier_load(kvtier_runtime* rt, const kvtier_key* keys, const uint32_t* engine_blocks,
                size_t num_keys, int64_t timeout_ns, kvtier_layer_fn on_layer, void* user,
                kvtier_completion** out) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(out, "out"));
    *out = nullptr;
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> k, kvtier::capi::Keys(keys, num_keys));
    KVTIER_ASSIGN_OR_RETURN(std::span<const uint32_t> b,
                            kvtier::capi::Blocks(engine_blocks, num_keys));
    const std::chrono::nanoseconds timeout =
        timeout_ns < 0 ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds(timeout_ns);
    kvtier::LayerDone layer_done;
    if (on_layer != nullptr) {
      layer_done = [on_layer, user](uint32_t l) { kvtier::capi::CallOnLayer(on_layer, user, l); };
    }
    *out = new kvtier_completion{rt->runtime->Load(rt->ns, k, b, timeout, std::move(layer_done))};
    return Status::Ok();
  });
}

int kvtier_layer_failed(const char* why) {
  return Guard([&]() -> Status {
    kvtier::capi::LayerFailure* failure = kvtier::capi::layer_failure;
    if (failure == nullptr) {
      return Status::InvalidArgument("kvtier_layer_failed: no on_layer is running on this thread");
    }
    if (failure->failed) return Status::Ok();  // the first reason stands
    failure->failed = true;
    failure->why = why != nullptr && *why != 0 ? why : "no reason given";
    return Status::Ok();
  });
}

int kvtier_save_state(kvtier_runtime* rt, const kvtier_key* boundary, const uint32_t* engine_blocks,
                      size_t num_blocks, const kvtier_hints* hints, kvtier_completion** out) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(out, "out"));
    *out = nullptr;
    KVTIER_RETURN_IF_ERROR(Required(boundary, "boundary"));
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_RETURN_IF_ERROR(kvtier::capi::CheckHints(hints));
    KVTIER_ASSIGN_OR_RETURN(std::span<const uint32_t> b,
                            kvtier::capi::Blocks(engine_blocks, num_blocks));
    *out = new kvtier_completion{rt->runtime->SaveState(rt->ns, *kvtier::capi::Parent(boundary), b,
                                                        kvtier::capi::ToSaveOptions(hints))};
    return Status::Ok();
  });
}

int kvtier_load_state(kvtier_runtime* rt, const kvtier_key* boundary, const uint32_t* engine_blocks,
                      size_t num_blocks, int64_t timeout_ns, kvtier_completion** out) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(out, "out"));
    *out = nullptr;
    KVTIER_RETURN_IF_ERROR(Required(boundary, "boundary"));
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_ASSIGN_OR_RETURN(std::span<const uint32_t> b,
                            kvtier::capi::Blocks(engine_blocks, num_blocks));
    const std::chrono::nanoseconds timeout =
        timeout_ns < 0 ? std::chrono::nanoseconds::max() : std::chrono::nanoseconds(timeout_ns);
    *out = new kvtier_completion{
        rt->runtime->LoadState(rt->ns, *kvtier::capi::Parent(boundary), b, timeout)};
    return Status::Ok();
  });
}

int kvtier_request_finished(kvtier_runtime* rt, const kvtier_key* keys, size_t num_keys,
                            uint32_t output_tokens) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> k, kvtier::capi::Keys(keys, num_keys));
    rt->runtime->RequestFinished(rt->ns, k, output_tokens);
    return Status::Ok();
  });
}

int kvtier_remove(kvtier_runtime* rt, const kvtier_key* keys, size_t num_keys) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> k, kvtier::capi::Keys(keys, num_keys));
    return rt->runtime->Remove(rt->ns, k);
  });
}

int kvtier_is_saved(kvtier_runtime* rt, const kvtier_key* keys, size_t num_keys, int* saved) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(saved, "saved"));
    *saved = 0;
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> k, kvtier::capi::Keys(keys, num_keys));
    *saved = rt->runtime->IsSaved(rt->ns, k) ? 1 : 0;
    return Status::Ok();
  });
}

int kvtier_report_engine_usage(kvtier_runtime* rt, uint32_t free_blocks, uint32_t total_blocks) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    return rt->runtime->ReportEngineUsage(free_blocks, total_blocks);
  });
}

int kvtier_track_request(kvtier_runtime* rt, uint64_t request_id, const kvtier_key* keys,
                         size_t num_keys, uint32_t engine_blocks) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockKey> k, kvtier::capi::Keys(keys, num_keys));
    return rt->runtime->TrackRequest(request_id, rt->ns, k, engine_blocks);
  });
}

void kvtier_untrack_request(kvtier_runtime* rt, uint64_t request_id) {
  Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    rt->runtime->UntrackRequest(request_id);
    return Status::Ok();
  });
}

int kvtier_should_admit(kvtier_runtime* rt, uint32_t blocks_needed) {
  int admit = 0;
  Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    admit = rt->runtime->ShouldAdmitNewRequest(blocks_needed) ? 1 : 0;
    return Status::Ok();
  });
  return admit;
}

int kvtier_propose_preemption(kvtier_runtime* rt, uint32_t blocks_to_free, uint64_t* request_ids,
                              size_t capacity, size_t* count) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(count, "count"));
    *count = 0;
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    if (capacity > 0) KVTIER_RETURN_IF_ERROR(Required(request_ids, "request_ids"));
    const std::vector<kvtier::PreemptionVictim> victims =
        rt->runtime->ProposePreemption(blocks_to_free);
    for (size_t i = 0; i < victims.size() && i < capacity; ++i) {
      request_ids[i] = victims[i].request_id;
    }
    *count = victims.size();
    return victims.size() > capacity ? kvtier::capi::DoNotFit(victims.size(), "victims", capacity)
                                     : Status::Ok();
  });
}

}  // extern "C"
