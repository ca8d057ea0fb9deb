#include "kvtier/config.h"

#include <cerrno>
#include <string>
#include <system_error>

#include "config/config_reader.h"
#include "config/config_tree.h"
#include "core/file_text.h"

namespace kvtier {
namespace {

// A config is a few kilobytes; anything this large is the wrong file.
constexpr size_t kMaxConfigBytes = 16 * kMiB;

// Same text as strerror, without its shared static buffer.
std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

Result<std::string> ReadWholeFile(const std::string& path) {
  std::string text;
  bool opened = false;
  const int err = internal::ReadFileText(path, kMaxConfigBytes, &text, &opened);
  if (err == 0) return text;
  if (!opened) return Status::InvalidArgument(path + ": cannot open: " + ErrnoText(err));
  if (err == EFBIG) return Status::InvalidArgument(path + ": cannot read: larger than 16 MiB");
  return Status::InvalidArgument(path + ": cannot read: " + ErrnoText(err));
}

}  // namespace

Result<KvtierConfig> ParseConfig(std::string_view yaml_text, std::string_view source_name,
                                 std::span<const std::string> overrides) {
  KVTIER_ASSIGN_OR_RETURN(internal::ConfigNode root,
                          internal::ParseYamlTree(yaml_text, source_name));
  if (root.kind == internal::ConfigNode::Kind::kNull) {
    return internal::NodeError(std::string(source_name) + ":1:1", "the configuration is empty",
                               "a map with at least a 'tiers' list");
  }
  if (root.kind != internal::ConfigNode::Kind::kMap) {
    return internal::NodeError(root.where, "the configuration is " + internal::DescribeNode(root),
                               "a map with at least a 'tiers' list");
  }
  for (const std::string& o : overrides) {
    KVTIER_RETURN_IF_ERROR(internal::ApplyOverride(o, &root));
  }
  KvtierConfig config;
  KVTIER_RETURN_IF_ERROR(internal::ReadConfig(root, &config));
  config.source = std::string(source_name);
  return config;
}

Result<KvtierConfig> LoadConfigFile(const std::string& path,
                                    std::span<const std::string> overrides) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return ParseConfig(text, path, overrides);
}

}  // namespace kvtier
