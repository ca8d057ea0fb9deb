#include "tools/inspect/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvtier::inspect {

std::string Table::Render() const {
  std::vector<size_t> width(headers_.size(), 0);
  auto widen = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], cells[i].size());
    }
  };
  widen(headers_);
  for (const auto& r : rows_) widen(r);
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string& c = i < cells.size() ? cells[i] : std::string();
      const std::string pad(width[i] - c.size(), ' ');
      if (i > 0) out += "  ";
      out += i == 0 ? c + pad : pad + c;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(headers_);
  for (const auto& r : rows_) out += line(r);
  return out;
}

std::string Bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  char buf[32];
  // floor, not a cast to uint64: a value past 2^64 (a document gone wrong)
  // must not make the cast undefined.
  if (unit == 0 || std::floor(bytes) == bytes) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", bytes, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, kUnits[unit]);
  }
  return buf;
}

std::string Percent(double part, double whole) {
  if (whole <= 0) return "-";
  return Fixed(100.0 * part / whole, 1) + "%";
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace kvtier::inspect
