#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kvtier/config.h"

namespace kvtier {
namespace {

struct GoodCase {
  const char* text;
  uint64_t bytes;
};

TEST(ParseByteSizeTest, AcceptsUnitsAndPlainBytes) {
  const GoodCase cases[] = {
      {"0", 0},
      {"123", 123},
      {"123B", 123},
      {"4KiB", 4096},
      {"512MiB", 512ULL << 20},
      {"64GiB", 64ULL << 30},
      {"1TiB", 1ULL << 40},
      {"1PiB", 1ULL << 50},
      {"4KB", 4000},
      {"512MB", 512000000},
      {"64GB", 64000000000ULL},
      {"2TB", 2000000000000ULL},
      {"1PB", 1000000000000000ULL},
      {"1.5KiB", 1536},
      {"0.5GiB", 512ULL << 20},
      {"1.25KB", 1250},
      {"2.0MiB", 2ULL << 20},
      {" 8GiB ", 8ULL << 30},
      {"8 GiB", 8ULL << 30},
      {"18446744073709551615", UINT64_MAX},
      {"16383PiB", 16383ULL << 50},
  };
  for (const GoodCase& c : cases) {
    Result<uint64_t> r = ParseByteSize(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.bytes) << c.text;
  }
}

struct BadCase {
  const char* text;
  const char* what;  // substring of the message
};

TEST(ParseByteSizeTest, RejectsMalformedSizes) {
  const BadCase cases[] = {
      {"", "is empty"},
      {"   ", "is empty"},
      {"-1", "is negative"},
      {"-4GiB", "is negative"},
      {"GiB", "does not start with a number"},
      {"abc", "does not start with a number"},
      {"+5", "does not start with a number"},
      {"0.5", "is not a whole number of bytes"},
      {"1.1B", "is not a whole number of bytes"},
      {"0.3KiB", "is not a whole number of bytes"},
      {"1.", "has no digits after the decimal point"},
      {"1.0000000000000000001KiB", "has too many decimals"},
      {"4XB", "has an unknown unit 'XB'"},
      {"4gib", "has an unknown unit 'gib'"},
      {"4 K", "has an unknown unit 'K'"},
      {"4GiBx", "has an unknown unit 'GiBx'"},
      {"1e3", "has an unknown unit 'e3'"},
      {"18446744073709551616", "overflows 64 bits"},
      {"16384PiB", "overflows 64 bits"},
      {"99999999999999999999999", "overflows 64 bits"},
  };
  for (const BadCase& c : cases) {
    Result<uint64_t> r = ParseByteSize(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.text;
    const std::string msg(r.status().message());
    EXPECT_NE(msg.find(c.what), std::string::npos) << c.text << " -> " << msg;
    EXPECT_EQ(msg.rfind("byte size '" + std::string(c.text) + "' ", 0), 0u) << msg;
    EXPECT_NE(msg.find("; expected a whole number of bytes"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvtier
