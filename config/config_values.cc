#include "config/config_values.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "kvtier/config.h"

namespace kvtier::internal {
namespace {

using Kind = ConfigNode::Kind;

std::string Path(std::string_view path) { return std::string(path); }

// Shared shape check of the scalar readers: a value that is not a scalar, or
// (for numbers and booleans) a quoted one, is the wrong type.
Status RequireScalar(const ConfigNode& node, std::string_view path, std::string_view expected,
                     bool allow_quoted) {
  if (node.kind != Kind::kScalar || (node.quoted && !allow_quoted)) {
    return NodeError(node.where, Path(path) + " is " + DescribeNode(node), expected);
  }
  return Status::Ok();
}

}  // namespace

Status CheckMap(const ConfigNode& node, std::string_view path,
                std::span<const std::string_view> allowed) {
  if (node.kind != Kind::kMap) {
    return NodeError(node.where, Path(path) + " is " + DescribeNode(node),
                     "a map with keys from: " + JoinNames(allowed));
  }
  for (const ConfigNode& item : node.items) {
    bool known = false;
    for (std::string_view a : allowed) known = known || a == item.key;
    if (!known) {
      return NodeError(item.key_where, "unknown key '" + item.key + "' in " + Path(path),
                       "one of: " + JoinNames(allowed));
    }
  }
  return Status::Ok();
}

Status ReadString(const ConfigNode& node, std::string_view path, std::string* out) {
  KVTIER_RETURN_IF_ERROR(RequireScalar(node, path, "a string", /*allow_quoted=*/true));
  if (node.text.empty()) return NodeError(node.where, Path(path) + " is empty", "a string");
  *out = node.text;
  return Status::Ok();
}

Status ReadOptionalString(const ConfigNode& node, std::string_view path, std::string* out) {
  if (node.kind == Kind::kNull) {
    out->clear();
    return Status::Ok();
  }
  KVTIER_RETURN_IF_ERROR(RequireScalar(node, path, "a string", /*allow_quoted=*/true));
  *out = node.text;
  return Status::Ok();
}

Status ReadUint(const ConfigNode& node, std::string_view path, uint64_t min, uint64_t max,
                uint64_t* out) {
  const std::string expected =
      "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  KVTIER_RETURN_IF_ERROR(RequireScalar(node, path, expected, /*allow_quoted=*/false));
  const std::string& t = node.text;
  if (!t.empty() && t[0] == '-') {
    return NodeError(node.where, Path(path) + " is negative (" + t + ")", expected);
  }
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return NodeError(node.where, Path(path) + " " + t + " is too large", expected);
  }
  if (ec != std::errc() || end != t.data() + t.size()) {
    return NodeError(node.where, Path(path) + " is '" + t + "', not a whole number", expected);
  }
  if (value < min || value > max) {
    return NodeError(node.where, Path(path) + " is " + t + ", out of range", expected);
  }
  *out = value;
  return Status::Ok();
}

Status ReadU32(const ConfigNode& node, std::string_view path, uint32_t min, uint32_t* out,
               uint32_t max) {
  uint64_t v = 0;
  KVTIER_RETURN_IF_ERROR(ReadUint(node, path, min, max, &v));
  *out = static_cast<uint32_t>(v);
  return Status::Ok();
}

Status ReadDouble(const ConfigNode& node, std::string_view path, double* out) {
  constexpr std::string_view kExpected = "a number such as 0.85";
  KVTIER_RETURN_IF_ERROR(RequireScalar(node, path, kExpected, /*allow_quoted=*/false));
  const std::string& t = node.text;
  double value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(value)) {
    return NodeError(node.where, Path(path) + " is '" + t + "', not a number", kExpected);
  }
  *out = value;
  return Status::Ok();
}

Status ReadBool(const ConfigNode& node, std::string_view path, bool* out) {
  constexpr std::string_view kExpected = "true or false";
  KVTIER_RETURN_IF_ERROR(RequireScalar(node, path, kExpected, /*allow_quoted=*/false));
  if (node.text != "true" && node.text != "false") {
    return NodeError(node.where, Path(path) + " is '" + node.text + "'", kExpected);
  }
  *out = node.text == "true";
  return Status::Ok();
}

Status ReadByteSize(const ConfigNode& node, std::string_view path, uint64_t* out) {
  KVTIER_RETURN_IF_ERROR(
      RequireScalar(node, path, "a byte size such as 512MiB", /*allow_quoted=*/true));
  Result<uint64_t> size = ParseByteSize(node.text);
  if (!size.ok()) {
    // The message of ParseByteSize already ends in "; expected ...".
    return Status::InvalidArgument(node.where + ": " + Path(path) + ": " +
                                   std::string(size.status().message()));
  }
  *out = *size;
  return Status::Ok();
}

Status ReadStringList(const ConfigNode& node, std::string_view path, bool allow_single,
                      std::vector<std::string>* out, std::vector<const ConfigNode*>* nodes) {
  out->clear();
  if (nodes != nullptr) nodes->clear();
  if (allow_single && node.kind == Kind::kScalar) {
    out->emplace_back();
    if (nodes != nullptr) nodes->push_back(&node);
    return ReadString(node, path, &out->back());
  }
  if (node.kind != Kind::kList) {
    return NodeError(node.where, Path(path) + " is " + DescribeNode(node),
                     allow_single ? "a string or a list of strings" : "a list of strings");
  }
  for (size_t i = 0; i < node.items.size(); ++i) {
    out->emplace_back();
    if (nodes != nullptr) nodes->push_back(&node.items[i]);
    KVTIER_RETURN_IF_ERROR(
        ReadString(node.items[i], Path(path) + "." + std::to_string(i), &out->back()));
  }
  return Status::Ok();
}

const ConfigNode& Blame(const ConfigNode* a, const ConfigNode* b, const ConfigNode& fallback) {
  if (a != nullptr && a->from_override) return *a;
  if (b != nullptr && b->from_override) return *b;
  if (a != nullptr) return *a;
  if (b != nullptr) return *b;
  return fallback;
}

}  // namespace kvtier::internal
