// The C API's runtime handle: opening it from a YAML config, keys, statistics
// and the host stand-in's pages.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "capi/c_api_internal.h"
#include "kvtier/config.h"
#include "kvtier/metrics.h"

namespace kvtier::capi {
namespace {

Result<KvtierConfig> ReadConfig(const char* path, const char* text, const char* const* overrides,
                                size_t num_overrides) {
  if ((path == nullptr) == (text == nullptr)) {
    return Status::InvalidArgument("exactly one of config_path and config_text must be set");
  }
  if (num_overrides > 0 && overrides == nullptr) {
    return Status::InvalidArgument("overrides is NULL");
  }
  std::vector<std::string> sets;
  for (size_t i = 0; i < num_overrides; ++i) {
    if (overrides[i] == nullptr) {
      return Status::InvalidArgument("overrides[" + std::to_string(i) + "] is NULL");
    }
    sets.emplace_back(overrides[i]);
  }
  return path != nullptr ? LoadConfigFile(path, sets) : ParseConfig(text, "config_text", sets);
}

// The layout of the engine's tensors: the config's model over the pool,
// checked against the tensors' shape when the caller gave it.
Result<KvLayout> CudaLayout(const KvtierConfig& config, const kvtier_cuda_cache& cache) {
  if (cache.shape == nullptr) return config.model.Layout(cache.num_blocks);
  KVTIER_ASSIGN_OR_RETURN(
      KvLayout given,
      KvLayoutFromShape(config.model.layout, std::span(cache.shape, cache.shape_rank),
                        cache.num_tensors, config.model.ElementBytes()));
  const KvLayout want = config.model.Layout(cache.num_blocks ? cache.num_blocks : given.num_blocks);
  if (given.Signature() != want.Signature() || given.num_blocks != want.num_blocks) {
    return Status::InvalidArgument("cuda tensors hold " + given.Signature() + " with " +
                                   std::to_string(given.num_blocks) +
                                   " blocks, but the config's model is " + want.Signature() +
                                   " with " + std::to_string(want.num_blocks) +
                                   " blocks; make the model section describe the engine's cache");
  }
  return want;
}

Result<std::unique_ptr<CopyEngine>> CudaEngine(const KvtierConfig& config,
                                               const kvtier_cuda_cache& cache) {
  if (cache.num_tensors > 0 && cache.tensors == nullptr) {
    return Status::InvalidArgument("cuda.tensors is NULL");
  }
  if (cache.shape_rank > 0 && cache.shape == nullptr) {
    return Status::InvalidArgument("cuda.shape is NULL");
  }
  CudaCopyEngineOptions options;
  KVTIER_ASSIGN_OR_RETURN(options.layout, CudaLayout(config, cache));
  options.tensors.assign(cache.tensors, cache.tensors + cache.num_tensors);
  options.device = cache.device;
  options.compute_stream = cache.stream;
  return CreateCudaCopyEngine(options);
}

Status Open(KvtierConfig config, const kvtier_cuda_cache* cuda, kvtier_log_fn log, void* log_user,
            kvtier_runtime** out) {
  if (log != nullptr) config.runtime.log = std::make_shared<CallbackLogSink>(log, log_user);
  std::shared_ptr<CopyEngine> engine;
  std::shared_ptr<HostCopyEngine> host;
  if (cuda == nullptr) {
    if (config.gpu_pool_blocks == 0) return Status::InvalidArgument("gpu_pool_blocks must be > 0");
    KVTIER_ASSIGN_OR_RETURN(host,
                            HostCopyEngine::Create(config.model.Layout(config.gpu_pool_blocks)));
    engine = host;
  } else {
    KVTIER_ASSIGN_OR_RETURN(engine, CudaEngine(config, *cuda));
  }
  const uint32_t engine_blocks = engine->layout().num_blocks;
  RuntimeOptions options = config.runtime;
  if (options.block_bytes == 0) options.block_bytes = config.model.BlockBytes();
  const uint64_t block_bytes = options.block_bytes;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime,
                          Runtime::Open(std::move(options), std::move(engine)));
  const NamespaceId ns = ComputeNamespaceId(config.model.Namespace());
  *out = new kvtier_runtime{std::move(runtime),
                            std::move(host),
                            ns,
                            KeyHasher(ns, config.runtime.hash),
                            block_bytes,
                            config.model.block_tokens,
                            engine_blocks,
                            config.runtime.state_blocks};
  return Status::Ok();
}

}  // namespace

int StatsText(const kvtier_runtime* rt, std::string (*render)(const RuntimeStats&), char* buffer,
              size_t capacity, size_t* length) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Live(rt));
    KVTIER_RETURN_IF_ERROR(Required(length, "length"));
    *length = 0;
    if (capacity > 0) KVTIER_RETURN_IF_ERROR(Required(buffer, "buffer"));
    const std::string text = render(rt->runtime->Stats());
    *length = text.size();
    if (capacity > 0) {
      const size_t n = std::min(text.size(), capacity - 1);
      std::memcpy(buffer, text.data(), n);
      buffer[n] = '\0';
    }
    return text.size() + 1 > capacity ? DoNotFit(text.size() + 1, "bytes", capacity) : Status::Ok();
  });
}

}  // namespace kvtier::capi

using kvtier::Status;
using kvtier::capi::Guard;
using kvtier::capi::Required;

extern "C" {

int kvtier_open(const char* config_path, const char* config_text, const char* const* overrides,
                size_t num_overrides, const kvtier_cuda_cache* cuda, kvtier_log_fn log,
                void* log_user, kvtier_runtime** out) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(out, "out"));
    *out = nullptr;
    KVTIER_ASSIGN_OR_RETURN(
        kvtier::KvtierConfig config,
        kvtier::capi::ReadConfig(config_path, config_text, overrides, num_overrides));
    return kvtier::capi::Open(std::move(config), cuda, log, log_user, out);
  });
}

void kvtier_close(kvtier_runtime* rt) {
  if (rt == nullptr) return;
  // A forked child has none of the runtime's threads to stop and may hold
  // its locks as a vanished thread left them: it leaves the parent's copy
  // alone rather than hang.
  if (kvtier::capi::Forked(rt->process)) return;
  Guard([&]() -> Status {
    {
      // Pins the engine still holds unpin through the runtime: release them
      // while it lives; kvtier_unpin then only frees them.
      std::lock_guard lock(rt->pins->mu);
      for (kvtier_pin* pin : rt->pins->live) pin->prefix = kvtier::PinnedPrefix();
      rt->pins->live.clear();
    }
    rt->runtime->Shutdown();
    return Status::Ok();
  });
  delete rt;
}

uint64_t kvtier_namespace(const kvtier_runtime* rt) { return rt ? rt->ns.value : 0; }
uint64_t kvtier_block_bytes(const kvtier_runtime* rt) { return rt ? rt->block_bytes : 0; }
uint32_t kvtier_block_tokens(const kvtier_runtime* rt) { return rt ? rt->block_tokens : 0; }
uint32_t kvtier_engine_blocks(const kvtier_runtime* rt) { return rt ? rt->engine_blocks : 0; }
uint32_t kvtier_state_blocks(const kvtier_runtime* rt) { return rt ? rt->state_blocks : 0; }

int kvtier_key_chain(const kvtier_runtime* rt, const kvtier_key* parent, const int32_t* tokens,
                     size_t num_tokens, kvtier_key* out, size_t capacity, size_t* count) {
  return kvtier_key_chain_extra(rt, parent, tokens, num_tokens, nullptr, 0, out, capacity, count);
}

int kvtier_key_chain_extra(const kvtier_runtime* rt, const kvtier_key* parent,
                           const int32_t* tokens, size_t num_tokens, const void* extra,
                           size_t extra_bytes, kvtier_key* out, size_t capacity, size_t* count) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(rt, "runtime"));
    KVTIER_RETURN_IF_ERROR(Required(count, "count"));
    *count = 0;
    if (num_tokens > 0) KVTIER_RETURN_IF_ERROR(Required(tokens, "tokens"));
    if (capacity > 0) KVTIER_RETURN_IF_ERROR(Required(out, "out"));
    if (extra_bytes > 0) KVTIER_RETURN_IF_ERROR(Required(extra, "extra"));
    const std::span<const std::byte> salt(static_cast<const std::byte*>(extra), extra_bytes);
    const size_t block_tokens = rt->block_tokens;
    const size_t blocks = num_tokens / block_tokens;
    std::optional<kvtier::BlockKey> prev = kvtier::capi::Parent(parent);
    for (size_t i = 0; i < blocks && i < capacity; ++i) {
      prev =
          rt->hasher.Next(prev ? &*prev : nullptr,
                          std::span<const int32_t>(tokens + i * block_tokens, block_tokens), salt);
      out[i] = kvtier::capi::ToC(*prev);
    }
    *count = blocks;
    return blocks > capacity ? kvtier::capi::DoNotFit(blocks, "keys", capacity) : Status::Ok();
  });
}

int kvtier_key_from_engine_hash(const kvtier_runtime* rt, const kvtier_key* parent,
                                const void* hash, size_t hash_bytes, kvtier_key* out) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(rt, "runtime"));
    KVTIER_RETURN_IF_ERROR(Required(out, "out"));
    if (hash_bytes > 0) KVTIER_RETURN_IF_ERROR(Required(hash, "hash"));
    const std::optional<kvtier::BlockKey> p = kvtier::capi::Parent(parent);
    *out = kvtier::capi::ToC(rt->hasher.NextFromEngineHash(
        p ? &*p : nullptr,
        std::span<const std::byte>(static_cast<const std::byte*>(hash), hash_bytes)));
    return Status::Ok();
  });
}

int kvtier_keys_from_engine_hashes(const kvtier_runtime* rt, const kvtier_key* parent,
                                   const void* hashes, size_t hash_bytes, size_t count,
                                   kvtier_key* out) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(Required(rt, "runtime"));
    if (count == 0) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(Required(out, "out"));
    if (hash_bytes > 0) KVTIER_RETURN_IF_ERROR(Required(hashes, "hashes"));
    const auto* bytes = static_cast<const std::byte*>(hashes);
    std::optional<kvtier::BlockKey> prev = kvtier::capi::Parent(parent);
    for (size_t i = 0; i < count; ++i) {
      prev = rt->hasher.NextFromEngineHash(
          prev ? &*prev : nullptr,
          std::span<const std::byte>(bytes == nullptr ? nullptr : bytes + i * hash_bytes,
                                     hash_bytes));
      out[i] = kvtier::capi::ToC(*prev);
    }
    return Status::Ok();
  });
}

int kvtier_stats_json(const kvtier_runtime* rt, char* buffer, size_t capacity, size_t* length) {
  return kvtier::capi::StatsText(rt, kvtier::RenderStatsJson, buffer, capacity, length);
}

int kvtier_metrics_text(const kvtier_runtime* rt, char* buffer, size_t capacity, size_t* length) {
  return kvtier::capi::StatsText(rt, kvtier::RenderPrometheusText, buffer, capacity, length);
}

int kvtier_host_block_write(kvtier_runtime* rt, uint32_t engine_block, const void* data,
                            size_t bytes) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_RETURN_IF_ERROR(Required(data, "data"));
    if (!rt->host) return Status::NotSupported("the runtime runs on the CUDA engine");
    return rt->host->WriteBlock(
        engine_block, std::span<const std::byte>(static_cast<const std::byte*>(data), bytes));
  });
}

int kvtier_host_block_read(kvtier_runtime* rt, uint32_t engine_block, void* data, size_t bytes) {
  return Guard([&]() -> Status {
    KVTIER_RETURN_IF_ERROR(kvtier::capi::Live(rt));
    KVTIER_RETURN_IF_ERROR(Required(data, "data"));
    if (!rt->host) return Status::NotSupported("the runtime runs on the CUDA engine");
    return rt->host->ReadBlock(engine_block,
                               std::span<std::byte>(static_cast<std::byte*>(data), bytes));
  });
}

}  // extern "C"
