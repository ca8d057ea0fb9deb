// Every file in tests/config/bad/ must be rejected. Each starts with
//   # expect: <substring of the error message>
//   # line: <1-based line the error must point at>
// and the test checks the code, the "<file>:<line>:<col>: " prefix and the
// substring.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "kvtier/config.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

struct BadFile {
  std::string path;
  std::string expect;
  std::string line;
};

std::vector<BadFile> LoadBadFiles() {
  std::vector<BadFile> files;
  for (const auto& entry :
       fs::directory_iterator(fs::path(KVTIER_SOURCE_DIR) / "tests/config/bad")) {
    if (entry.path().extension() != ".yaml") continue;
    BadFile f;
    f.path = entry.path().string();
    std::ifstream in(f.path);
    std::string first, second;
    std::getline(in, first);
    std::getline(in, second);
    const std::string kExpect = "# expect: ";
    const std::string kLine = "# line: ";
    if (first.rfind(kExpect, 0) == 0) f.expect = first.substr(kExpect.size());
    if (second.rfind(kLine, 0) == 0) f.line = second.substr(kLine.size());
    files.push_back(f);
  }
  std::sort(files.begin(), files.end(),
            [](const BadFile& a, const BadFile& b) { return a.path < b.path; });
  return files;
}

TEST(BadConfigFilesTest, EveryBadFileFailsAtItsLineWithItsMessage) {
  const std::vector<BadFile> files = LoadBadFiles();
  ASSERT_GE(files.size(), 18u);
  for (const BadFile& f : files) {
    SCOPED_TRACE(f.path);
    // Every file is checked, so one run names all the files that pass wrongly.
    EXPECT_FALSE(f.expect.empty()) << "first line must be '# expect: ...'";
    EXPECT_FALSE(f.line.empty()) << "second line must be '# line: N'";
    Result<KvtierConfig> r = LoadConfigFile(f.path);
    if (r.ok()) {
      ADD_FAILURE() << "accepted";
      continue;
    }
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string msg(r.status().message());
    // The whole path, then 1-based line and column, then the description.
    const std::regex prefix(
        "^" + std::regex_replace(f.path, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") + ":" +
        f.line + ":[1-9][0-9]*: ");
    EXPECT_TRUE(std::regex_search(msg, prefix)) << msg;
    EXPECT_NE(msg.find(f.expect), std::string::npos) << msg;
    EXPECT_NE(msg.find("; expected "), std::string::npos) << msg;
  }
}

TEST(BadConfigFilesTest, MissingFileNamesThePathAndTheReason) {
  const std::string path = std::string(KVTIER_BINARY_DIR) + "/no/such/kvtier.yaml";
  Result<KvtierConfig> r = LoadConfigFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), path + ": cannot open: No such file or directory");
}

TEST(BadConfigFilesTest, DirectoryIsNotAConfig) {
  const std::string path = std::string(KVTIER_SOURCE_DIR) + "/tests/config/bad";
  Result<KvtierConfig> r = LoadConfigFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), path + ": cannot read: Is a directory");
}

}  // namespace
}  // namespace kvtier
