#include "config/config_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kvtier::internal {
namespace {

// Aliases can make a node contain itself; a config is never this deep.
constexpr int kMaxDepth = 64;

// The most values a document's aliases may add. yaml-cpp keeps an alias as a
// second reference to the anchored node and Convert copies the node at each
// reference, so aliases of aliases multiply: a few hundred bytes written as
// nine levels of ten aliases each would become 10^9 ConfigNodes. Real
// configs alias a policy block of a dozen values into a few tiers; 100,000
// copied values are a few tens of MB of ConfigNodes at most and convert in a
// fraction of a second.
constexpr uint64_t kMaxAliasValues = 100000;

constexpr std::string_view kOverrideForm = "path=value, e.g. tiers.host.capacity=8GiB";

// Where nodes of one parse come from: a file (positions from yaml-cpp marks)
// or an override (one label for every node).
struct Origin {
  std::string source;  // file name, or "--set <override>"
  bool is_override = false;
};

std::string MarkWhere(const Origin& origin, const YAML::Mark& mark, const std::string& fallback) {
  if (origin.is_override) return origin.source;
  if (mark.is_null() || mark.line < 0 || mark.column < 0) return fallback;
  // yaml-cpp marks are 0-based; editors count from 1.
  return origin.source + ":" + std::to_string(mark.line + 1) + ":" +
         std::to_string(mark.column + 1);
}

// Counts, from the parser's events, the values the aliases of one document
// expand to, in time linear in the text whatever the aliases do, and keeps
// the first alias that takes the count past kMaxAliasValues. Map keys count
// as values too.
class AliasBudget final : public YAML::EventHandler {
 public:
  bool exceeded() const { return exceeded_; }
  // Where the alias that exceeded the budget is written.
  const YAML::Mark& mark() const { return mark_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { Leaf(anchor); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Leaf(anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (exceeded_) return;  // stop counting: sizes could grow without bound
    // An alias to a node still open (a cycle) counts one value; Convert's
    // depth limit rejects it.
    const uint64_t size = anchor < sizes_.size() && sizes_[anchor] != 0 ? sizes_[anchor] : 1;
    total_ += size;
    added_ += size;
    if (added_ > kMaxAliasValues) {
      exceeded_ = true;
      mark_ = mark;
    }
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct OpenNode {
    YAML::anchor_t anchor;
    uint64_t total_before;
  };
  void Leaf(YAML::anchor_t anchor) {
    ++total_;
    Record(anchor, 1);
  }
  void Open(YAML::anchor_t anchor) { open_.push_back({anchor, total_++}); }
  void Close() {
    if (open_.empty()) return;
    const OpenNode o = open_.back();
    open_.pop_back();
    Record(o.anchor, total_ - o.total_before);
  }
  // Anchors are numbered 1, 2, ... in the order they are written.
  void Record(YAML::anchor_t anchor, uint64_t size) {
    if (anchor == YAML::NullAnchor) return;
    if (sizes_.size() <= anchor) sizes_.resize(anchor + 1, 0);
    sizes_[anchor] = size;
  }

  uint64_t total_ = 0;           // values so far, aliases expanded
  uint64_t added_ = 0;           // of which copies made by aliases
  std::vector<uint64_t> sizes_;  // by anchor: the values of the anchored node
  std::vector<OpenNode> open_;
  bool exceeded_ = false;
  YAML::Mark mark_;
};

// Rejects a first document whose aliases expand past kMaxAliasValues, before
// Convert copies them. REQUIRES: `text` parses (YAML::LoadAll succeeded).
Status CheckAliasBudget(std::string_view text, const Origin& origin,
                        const std::string& first_line) {
  std::istringstream in{std::string(text)};
  YAML::Parser parser(in);
  AliasBudget budget;
  parser.HandleNextDocument(budget);
  if (!budget.exceeded()) return Status::Ok();
  return NodeError(MarkWhere(origin, budget.mark(), first_line),
                   "aliases expand to more than " + std::to_string(kMaxAliasValues) + " values",
                   "aliases that repeat a block a few times, not aliases of aliases that "
                   "multiply it");
}

// The standard tags of numbers and booleans (!!int, !!float, !!bool): their
// scalars read as plain ones. Other tags (!!str, quotes' "!") make strings.
bool IsValueTag(const std::string& tag) {
  return tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
         tag == "tag:yaml.org,2002:bool";
}

Status Convert(const YAML::Node& y, const Origin& origin, const std::string& parent_where,
               int depth, ConfigNode* out);

Status ConvertMap(const YAML::Node& y, const Origin& origin, int depth, ConfigNode* out) {
  // A hash set, not ConfigNode::Find: a map of n keys is checked in O(n).
  std::unordered_set<std::string> seen;
  for (auto it = y.begin(); it != y.end(); ++it) {
    // Copies: yaml-cpp's iterator hands out a temporary proxy pair.
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    std::string key_where = MarkWhere(origin, key.Mark(), out->where);
    if (!key.IsScalar()) {
      return NodeError(key_where, "a map key is not a plain name", "keys that are strings");
    }
    const std::string& name = key.Scalar();
    if (!seen.insert(name).second) {
      return NodeError(key_where, "duplicate key '" + name + "'", "each key at most once per map");
    }
    ConfigNode child;
    KVTIER_RETURN_IF_ERROR(Convert(value, origin, key_where, depth + 1, &child));
    // An empty value ("password:") is marked where the next token starts,
    // often the next line: its errors point at its key instead.
    if (child.kind == ConfigNode::Kind::kNull) child.where = key_where;
    child.key = name;
    child.key_where = std::move(key_where);
    out->items.push_back(std::move(child));
  }
  return Status::Ok();
}

Status Convert(const YAML::Node& y, const Origin& origin, const std::string& parent_where,
               int depth, ConfigNode* out) {
  out->where = MarkWhere(origin, y.Mark(), parent_where);
  out->from_override = origin.is_override;
  if (depth > kMaxDepth) {
    return NodeError(out->where, "nesting is deeper than " + std::to_string(kMaxDepth) + " levels",
                     "a shallow configuration (are aliases referring to themselves?)");
  }
  switch (y.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out->kind = ConfigNode::Kind::kNull;
      return Status::Ok();
    case YAML::NodeType::Scalar:
      out->kind = ConfigNode::Kind::kScalar;
      out->text = y.Scalar();
      // yaml-cpp tags plain scalars "?"; quoted, block and !!str scalars get
      // another tag. Those are strings even when they look like numbers,
      // unless the tag asks for a number or a boolean (!!int 4).
      out->quoted = y.Tag() != "?" && !IsValueTag(y.Tag());
      return Status::Ok();
    case YAML::NodeType::Sequence:
      out->kind = ConfigNode::Kind::kList;
      for (const YAML::Node& item : y) {
        ConfigNode child;
        KVTIER_RETURN_IF_ERROR(Convert(item, origin, out->where, depth + 1, &child));
        out->items.push_back(std::move(child));
      }
      return Status::Ok();
    case YAML::NodeType::Map:
      out->kind = ConfigNode::Kind::kMap;
      return ConvertMap(y, origin, depth, out);
  }
  return NodeError(out->where, "unrecognised YAML node", "a scalar, list or map");
}

// Parses `text` and converts its single document; yaml-cpp exceptions become
// statuses here and nowhere else.
Result<ConfigNode> ParseTree(std::string_view text, const Origin& origin) {
  const std::string first_line = origin.is_override ? origin.source : origin.source + ":1:1";
  try {
    std::vector<YAML::Node> docs = YAML::LoadAll(std::string(text));
    ConfigNode root;
    if (docs.size() > 1) {
      return NodeError(MarkWhere(origin, docs[1].Mark(), first_line),
                       "a second YAML document starts here", "a single document");
    }
    if (docs.empty()) {
      root.where = first_line;
      root.from_override = origin.is_override;
      return root;
    }
    // Only an alias ('*name') can make the tree larger than the text.
    if (text.find('*') != std::string_view::npos) {
      KVTIER_RETURN_IF_ERROR(CheckAliasBudget(text, origin, first_line));
    }
    KVTIER_RETURN_IF_ERROR(Convert(docs[0], origin, first_line, 0, &root));
    return root;
  } catch (const YAML::Exception& e) {
    return NodeError(MarkWhere(origin, e.mark, first_line), "malformed YAML: " + e.msg,
                     "well-formed YAML");
  } catch (const std::exception& e) {
    return NodeError(first_line, std::string("cannot read YAML: ") + e.what(), "readable YAML");
  }
}

// The element of `list` whose `name` is `segment`, else the one at index
// `segment`, else null. Names win so a tier may be called "0".
ConfigNode* FindListItem(ConfigNode* list, std::string_view segment) {
  for (ConfigNode& item : list->items) {
    if (item.kind != ConfigNode::Kind::kMap) continue;
    const ConfigNode* name = item.Find("name");
    if (name != nullptr && name->kind == ConfigNode::Kind::kScalar && name->text == segment) {
      return &item;
    }
  }
  size_t index = 0;
  auto [end, ec] = std::from_chars(segment.data(), segment.data() + segment.size(), index);
  if (ec != std::errc() || end != segment.data() + segment.size()) return nullptr;
  return index < list->items.size() ? &list->items[index] : nullptr;
}

Status MissingListItem(const std::string& where, const ConfigNode& list, std::string_view walked,
                       std::string_view segment) {
  std::string names;
  for (const ConfigNode& item : list.items) {
    const ConfigNode* name = item.kind == ConfigNode::Kind::kMap ? item.Find("name") : nullptr;
    if (name == nullptr || name->kind != ConfigNode::Kind::kScalar) continue;
    names += names.empty() ? "" : ", ";
    names += name->text;
  }
  const std::string range = list.items.empty()
                                ? std::string("nothing (the list is empty)")
                                : "an index from 0 to " + std::to_string(list.items.size() - 1);
  const std::string expected = names.empty() ? range : "one of the names " + names + " or " + range;
  if (list.key == "tiers" && walked == "tiers") {
    return NodeError(where, "no tier named '" + std::string(segment) + "'", expected);
  }
  return NodeError(
      where, "no entry '" + std::string(segment) + "' in '" + std::string(walked) + "'", expected);
}

// Splits "a.b.c" into segments; empty segments are an error.
Result<std::vector<std::string>> SplitPath(const std::string& where, std::string_view path) {
  std::vector<std::string> segments;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string_view seg = path.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (seg.empty()) {
      return NodeError(where, "override path '" + std::string(path) + "' has an empty segment",
                       kOverrideForm);
    }
    segments.emplace_back(seg);
    if (dot == std::string_view::npos) return segments;
    start = dot + 1;
  }
}

}  // namespace

const ConfigNode* ConfigNode::Find(std::string_view name) const {
  for (const ConfigNode& item : items) {
    if (item.key == name) return &item;
  }
  return nullptr;
}

ConfigNode* ConfigNode::Find(std::string_view name) {
  for (ConfigNode& item : items) {
    if (item.key == name) return &item;
  }
  return nullptr;
}

std::string DescribeNode(const ConfigNode& node) {
  switch (node.kind) {
    case ConfigNode::Kind::kNull:
      return "empty";
    case ConfigNode::Kind::kList:
      return "a list";
    case ConfigNode::Kind::kMap:
      return "a map";
    case ConfigNode::Kind::kScalar:
      break;
  }
  return node.quoted ? "the string \"" + node.text + "\"" : "'" + node.text + "'";
}

Status NodeError(const std::string& where, std::string_view what, std::string_view expected) {
  return Status::InvalidArgument(where + ": " + std::string(what) + "; expected " +
                                 std::string(expected));
}

Result<ConfigNode> ParseYamlTree(std::string_view yaml_text, std::string_view source_name) {
  return ParseTree(yaml_text, Origin{std::string(source_name), false});
}

Status ApplyOverride(const std::string& override_text, ConfigNode* root) {
  const std::string where = "--set " + override_text;
  const size_t eq = override_text.find('=');
  if (eq == std::string::npos) return NodeError(where, "the override has no '='", kOverrideForm);
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> segments,
                          SplitPath(where, std::string_view(override_text).substr(0, eq)));
  KVTIER_ASSIGN_OR_RETURN(
      ConfigNode value,
      ParseTree(std::string_view(override_text).substr(eq + 1), Origin{where, true}));
  ConfigNode* cur = root;
  std::string walked;
  for (const std::string& seg : segments) {
    if (cur->kind == ConfigNode::Kind::kNull) cur->kind = ConfigNode::Kind::kMap;  // "mover:"
    ConfigNode* next = nullptr;
    if (cur->kind == ConfigNode::Kind::kMap) {
      next = cur->Find(seg);
      if (next == nullptr) {
        // A new key; the reader rejects it later if the schema has no such key.
        ConfigNode added;
        added.key = seg;
        added.key_where = where;
        added.where = where;
        added.from_override = true;
        cur->items.push_back(std::move(added));
        next = &cur->items.back();
      }
    } else if (cur->kind == ConfigNode::Kind::kList) {
      next = FindListItem(cur, seg);
      if (next == nullptr) return MissingListItem(where, *cur, walked, seg);
    } else {
      return NodeError(where, "'" + walked + "' is a single value, it has no '" + seg + "'",
                       "a path through maps and lists");
    }
    walked += (walked.empty() ? "" : ".") + seg;
    cur = next;
  }
  // Keep the key (and where it was written); replace the value.
  value.key = std::move(cur->key);
  value.key_where = std::move(cur->key_where);
  *cur = std::move(value);
  return Status::Ok();
}

}  // namespace kvtier::internal
