// The YAML configuration of kvtier: a file (see config/examples/default.yaml
// for every key) turned into the option structs of options.h.
//
// Every error is InvalidArgument with a message of the form
//   "<file>:<line>:<column>: <what is wrong>; expected <what>"
// (1-based line and column). Errors caused by a command-line override name
// the override instead: "--set <path>=<value>: ...". A missing file gives
// "<path>: cannot open: <reason>". No exception leaves these functions.
//
// Overrides are strings "dotted.path=value" applied to the YAML tree before
// it is read, so an overridden value passes the same checks as one from the
// file. Path segments walk maps by key and lists either by the `name` of an
// element or by a numeric index: "tiers.host.capacity=8GiB",
// "tiers.0.capacity=1GiB", "model.layers=8", "mover.interval_ms=5". The value
// is itself YAML, so "tiers.host.admission=[always]" sets a list.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/export.h"
#include "kvtier/options.h"
#include "kvtier/status.h"

namespace kvtier {

struct KvtierConfig {
  ModelOptions model;
  // runtime.block_bytes is derived from the model (model.BlockBytes()).
  RuntimeOptions runtime;
  uint32_t gpu_pool_blocks = 512;  // simulated engine KV pool size, in blocks
  std::string source;              // the file (or source name) the config came from
};

// Reads and validates the YAML file at `path`, then applies `overrides`.
KVTIER_EXPORT Result<KvtierConfig> LoadConfigFile(const std::string& path,
                                                  std::span<const std::string> overrides = {});

// Same as LoadConfigFile for text already in memory; `source_name` stands for
// the file name in error messages and in KvtierConfig::source.
KVTIER_EXPORT Result<KvtierConfig> ParseConfig(std::string_view yaml_text,
                                               std::string_view source_name,
                                               std::span<const std::string> overrides = {});

// Parses a byte size: "123" (bytes), "4KiB", "512MiB", "64GiB", "1TiB",
// "2PiB" (powers of 1024), "4KB", "512MB", "64GB", "1TB", "1PB" (powers of
// 1000), "B" for bytes. A fraction is accepted only when it is a whole
// number of bytes ("1.5KiB" = 1536). Rejects negatives, overflow past
// 2^64 - 1, unknown units and anything else; the message ends in
// "; expected ...".
KVTIER_EXPORT Result<uint64_t> ParseByteSize(std::string_view text);

}  // namespace kvtier
