// Checks of command-line values shared by the tools' CLI11 front ends
// (kvtier-bench, kvtier-inspect). Header-only: CLI11 belongs to the
// executables, never to the libraries.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>

namespace kvtier::bench {

// CLI11 reads an unsigned option with strtoull, which takes "-1" as 2^64 - 1
// and saturates past the range: a uint64_t option took both ("replay
// everything", "refresh forever"). A uint32_t one refuses them only by luck
// of the cast back. Every unsigned option takes the check of its type:
// digits only, within the type.
template <class T>
CLI::Validator UnsignedCheck() {
  static_assert(std::numeric_limits<T>::is_integer && !std::numeric_limits<T>::is_signed &&
                (sizeof(T) == 4 || sizeof(T) == 8));
  return CLI::Validator(
      [](std::string& text) -> std::string {
        T v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
          return "'" + text + "' is not a whole number from 0 to " +
                 std::to_string(std::numeric_limits<T>::max());
        }
        return "";
      },
      sizeof(T) == 8 ? "UINT64" : "UINT32");
}

inline const CLI::Validator kUnsigned64 = UnsignedCheck<uint64_t>();
inline const CLI::Validator kUnsigned32 = UnsignedCheck<uint32_t>();

}  // namespace kvtier::bench
