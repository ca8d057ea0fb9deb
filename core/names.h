// Small helpers for error messages that list the accepted names.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace kvtier::internal {

// "a, b, c"
inline std::string JoinNames(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

inline bool ContainsName(std::span<const std::string_view> names, std::string_view name) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace kvtier::internal
