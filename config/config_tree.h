// A plain tree of the YAML document in which every node remembers where it
// came from: "file:line:column" for nodes read from the file, "--set <override>"
// for nodes an override put there. Overrides edit this tree, then one reader
// (config_reader.cc) turns it into options, so every value gets the same
// checks and the same kind of error whatever its origin. yaml-cpp stays in
// config_tree.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::internal {

struct ConfigNode {
  enum class Kind { kNull, kScalar, kMap, kList };

  Kind kind = Kind::kNull;
  std::string text;     // kScalar: the scalar as written
  bool quoted = false;  // kScalar: written in quotes (a string, never a number)
  std::string where;    // "file:line:col" or "--set path=value"
  bool from_override = false;
  std::string key;                // the key of this node when it is a map value
  std::string key_where;          // where that key was written
  std::vector<ConfigNode> items;  // kMap: values in file order (each with `key`); kList

  // The map value under `name`, or null. REQUIRES: kind == kMap.
  const ConfigNode* Find(std::string_view name) const;
  ConfigNode* Find(std::string_view name);
};

// "a list", "a map", "nothing" or "the value 'x'", for error messages.
std::string DescribeNode(const ConfigNode& node);

// "<where>: <what>; expected <expected>" as InvalidArgument.
Status NodeError(const std::string& where, std::string_view what, std::string_view expected);

// Parses `yaml_text`; locations are "<source_name>:<line>:<col>", 1-based.
// Malformed YAML, more than one document, non-scalar map keys, duplicate keys
// nesting deeper than 64 levels and aliases that expand to more than 100,000
// values are errors.
Result<ConfigNode> ParseYamlTree(std::string_view yaml_text, std::string_view source_name);

// Applies one "dotted.path=value" override to `root` (see kvtier/config.h).
Status ApplyOverride(const std::string& override_text, ConfigNode* root);

}  // namespace kvtier::internal
