// Typed reads of single ConfigNode values. Each takes the dotted path of the
// value ("tiers.host.capacity") for its error message and reports at the
// node's own location, so an error always points at the offending value.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_tree.h"
#include "core/names.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// Fails unless `node` is a map whose keys are all in `allowed`; an unknown
// key is reported where the key is written.
Status CheckMap(const ConfigNode& node, std::string_view path,
                std::span<const std::string_view> allowed);

// A scalar (quoted or not). Empty values, lists and maps are errors.
Status ReadString(const ConfigNode& node, std::string_view path, std::string* out);

// Like ReadString, for the strings whose empty value means "off" or "the
// default": "" and a key written with no value both read as "".
Status ReadOptionalString(const ConfigNode& node, std::string_view path, std::string* out);

// An unquoted whole number in [min, max]; negatives, fractions and words are errors.
Status ReadUint(const ConfigNode& node, std::string_view path, uint64_t min, uint64_t max,
                uint64_t* out);
Status ReadU32(const ConfigNode& node, std::string_view path, uint32_t min, uint32_t* out,
               uint32_t max = std::numeric_limits<uint32_t>::max());

// An unquoted finite number.
Status ReadDouble(const ConfigNode& node, std::string_view path, double* out);

// true or false, unquoted.
Status ReadBool(const ConfigNode& node, std::string_view path, bool* out);

// A byte size as ParseByteSize accepts it ("512MiB", or a plain number).
Status ReadByteSize(const ConfigNode& node, std::string_view path, uint64_t* out);

// A list of strings, or (when `allow_single`) one string standing for a
// one-element list. `nodes`, when given, receives the node of each element.
Status ReadStringList(const ConfigNode& node, std::string_view path, bool allow_single,
                      std::vector<std::string>* out,
                      std::vector<const ConfigNode*>* nodes = nullptr);

// Of two optional nodes involved in a cross-field error, the one an override
// set (so the message names the override), else the first present one, else
// `fallback`.
const ConfigNode& Blame(const ConfigNode* a, const ConfigNode* b, const ConfigNode& fallback);

}  // namespace kvtier::internal
