// Plain-text tables for the human output of kvtier-inspect.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvtier::inspect {

// Columns padded to their widest cell; the first column is left-aligned,
// the others right-aligned (they hold numbers).
class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// "1.5 MiB", "256 MiB", "12 B".
std::string Bytes(double bytes);
// "12.3%" of part/whole, "-" when whole is 0.
std::string Percent(double part, double whole);
// printf("%.*f").
std::string Fixed(double v, int digits);

}  // namespace kvtier::inspect
