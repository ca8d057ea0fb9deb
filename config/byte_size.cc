#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "kvtier/config.h"

namespace kvtier {
namespace {

using u128 = unsigned __int128;

constexpr std::string_view kExpected =
    "; expected a whole number of bytes with an optional unit: B, KiB, MiB, GiB, TiB, PiB "
    "(powers of 1024) or KB, MB, GB, TB, PB (powers of 1000), e.g. 512MiB";

// 10^18 still fits in 64 bits and is far beyond any meaningful precision.
constexpr size_t kMaxFractionDigits = 18;

struct Unit {
  std::string_view name;
  uint64_t multiplier;
};

constexpr uint64_t kKB = 1000;
constexpr std::array<Unit, 12> kUnits = {{
    {"", 1},
    {"B", 1},
    {"KiB", kKiB},
    {"MiB", kMiB},
    {"GiB", kGiB},
    {"TiB", kTiB},
    {"PiB", 1024 * kTiB},
    {"KB", kKB},
    {"MB", kKB* kKB},
    {"GB", kKB* kKB* kKB},
    {"TB", kKB* kKB* kKB* kKB},
    {"PB", kKB* kKB* kKB* kKB* kKB},
}};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status SizeError(std::string_view text, std::string_view what) {
  return Status::InvalidArgument("byte size '" + std::string(text) + "' " + std::string(what) +
                                 std::string(kExpected));
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) return SizeError(text, "is empty");
  if (s.front() == '-') return SizeError(text, "is negative");
  size_t i = 0;
  u128 whole = 0;
  for (; i < s.size() && IsDigit(s[i]); ++i) {
    whole = whole * 10 + static_cast<unsigned>(s[i] - '0');
    if (whole > std::numeric_limits<uint64_t>::max()) return SizeError(text, "overflows 64 bits");
  }
  if (i == 0) return SizeError(text, "does not start with a number");
  u128 frac = 0;
  u128 frac_scale = 1;
  if (i < s.size() && s[i] == '.') {
    size_t start = ++i;
    for (; i < s.size() && IsDigit(s[i]); ++i) {
      if (i - start >= kMaxFractionDigits) return SizeError(text, "has too many decimals");
      frac = frac * 10 + static_cast<unsigned>(s[i] - '0');
      frac_scale *= 10;
    }
    if (i == start) return SizeError(text, "has no digits after the decimal point");
  }
  std::string_view unit = Trim(s.substr(i));
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == unit) found = &u;
  }
  if (found == nullptr) return SizeError(text, "has an unknown unit '" + std::string(unit) + "'");
  // whole < 2^64 and multiplier <= 2^50, so the products fit in 128 bits.
  u128 frac_bytes = frac * found->multiplier;
  if (frac_bytes % frac_scale != 0) return SizeError(text, "is not a whole number of bytes");
  u128 total = whole * found->multiplier + frac_bytes / frac_scale;
  if (total > std::numeric_limits<uint64_t>::max()) return SizeError(text, "overflows 64 bits");
  return static_cast<uint64_t>(total);
}

}  // namespace kvtier
