// The message of a config that must be refused as InvalidArgument.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "kvtier/config.h"

namespace kvtier {

inline std::string ErrorOf(std::string_view yaml) {
  Result<KvtierConfig> r = ParseConfig(yaml, "t.yaml");
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

}  // namespace kvtier
