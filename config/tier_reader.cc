#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/backend_keys.h"
#include "config/config_reader.h"
#include "config/config_values.h"
#include "config/policy_keys.h"
#include "core/tier_stores.h"

namespace kvtier::internal {
namespace {

// The keys of every tier; each type adds its own (backend_keys.h).
constexpr std::array<std::string_view, 7> kTierKeys = {
    "name", "type", "capacity", "watermarks", "eviction", "admission", "policy"};
constexpr std::array<std::string_view, 2> kWatermarkKeys = {"high", "low"};
// Whether a type's backend is compiled in is the tier registry's business,
// not the config's: it answers NotSupported when the runtime starts.
constexpr std::array<std::string_view, 4> kTierTypes = {"host", "nvme", "redis", "remote"};
constexpr uint64_t kPiB = 1024 * kTiB;

bool Known(std::span<const std::string_view> names, std::string_view name) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

Status ReadTierName(const ConfigNode& node, size_t index, std::string* name) {
  const ConfigNode* p = node.Find("name");
  if (p == nullptr) {
    return NodeError(node.where, "tier " + std::to_string(index) + " has no 'name'",
                     "a unique name, e.g. 'name: host'");
  }
  KVTIER_RETURN_IF_ERROR(ReadString(*p, "tiers." + std::to_string(index) + ".name", name));
  for (char c : *name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
      return NodeError(p->where, "tier name '" + *name + "' has a character outside [a-z0-9_-]",
                       "lower-case letters, digits, '_' and '-'");
    }
  }
  // Stats and metrics call the engine's own pool "gpu".
  if (*name == "gpu") {
    return NodeError(p->where, "tier name 'gpu' is reserved for the engine's GPU pool",
                     "another name, e.g. 'name: host'");
  }
  return Status::Ok();
}

// name, type and capacity: the keys every tier must have.
Status ReadTierRequired(const ConfigNode& node, size_t index, TierOptions* t) {
  KVTIER_RETURN_IF_ERROR(ReadTierName(node, index, &t->name));
  const std::string path = "tiers." + t->name;
  const ConfigNode* type = node.Find("type");
  if (type == nullptr) {
    return NodeError(node.where, path + " has no 'type'", "one of: " + JoinNames(kTierTypes));
  }
  KVTIER_RETURN_IF_ERROR(ReadString(*type, path + ".type", &t->type));
  if (!Known(kTierTypes, t->type)) {
    return NodeError(type->where, "unknown tier type '" + t->type + "'",
                     "one of: " + JoinNames(kTierTypes));
  }
  const ConfigNode* cap = node.Find("capacity");
  if (cap == nullptr) {
    return NodeError(node.where, path + " has no 'capacity'", "a size such as 'capacity: 8GiB'");
  }
  KVTIER_RETURN_IF_ERROR(ReadByteSize(*cap, path + ".capacity", &t->capacity_bytes));
  if (t->capacity_bytes == 0) {
    return NodeError(cap->where, path + ".capacity is 0", "a capacity of at least 1 byte");
  }
  if (t->capacity_bytes > kPiB) {
    return NodeError(cap->where, path + ".capacity " + cap->text + " is absurd", "at most 1PiB");
  }
  return Status::Ok();
}

Status ReadWatermarks(const ConfigNode& node, const std::string& path, WatermarkOptions* wm) {
  if (node.kind == ConfigNode::Kind::kNull) return Status::Ok();
  KVTIER_RETURN_IF_ERROR(CheckMap(node, path, kWatermarkKeys));
  const ConfigNode* high = node.Find("high");
  const ConfigNode* low = node.Find("low");
  if (high != nullptr) KVTIER_RETURN_IF_ERROR(ReadDouble(*high, path + ".high", &wm->high));
  if (low != nullptr) KVTIER_RETURN_IF_ERROR(ReadDouble(*low, path + ".low", &wm->low));
  Status s = wm->Validate();
  if (!s.ok()) {
    // A value outside (0, 1] is wrong on its own; otherwise blame the pair.
    const ConfigNode* alone = nullptr;
    if (!(wm->high > 0.0 && wm->high <= 1.0)) alone = high;
    if (alone == nullptr && !(wm->low > 0.0 && wm->low <= 1.0)) alone = low;
    const ConfigNode& at = alone != nullptr ? *alone : Blame(low, high, node);
    return Status::InvalidArgument(at.where + ": " + path + ": " + std::string(s.message()));
  }
  return Status::Ok();
}

// With frequency admission the sketch's aging period must stay within its
// limit (PolicyKnobs::SketchAgingLimit). Four values decide it; an override
// of any of them is blamed first, else the period, else the admission item.
Status CheckSketchAging(const ConfigNode& tier, const std::string& path, const PolicyKnobs& k,
                        const ConfigNode* frequency) {
  if (frequency == nullptr || k.sketch_aging_period <= k.SketchAgingLimit()) return Status::Ok();
  const ConfigNode* policy = tier.Find("policy");
  if (policy != nullptr && policy->kind != ConfigNode::Kind::kMap) policy = nullptr;
  const ConfigNode* involved[4] = {};
  const std::string_view keys[3] = {"sketch_aging_period", "frequency_threshold", "sketch_width"};
  for (int i = 0; i < 3; ++i) involved[i] = policy != nullptr ? policy->Find(keys[i]) : nullptr;
  involved[3] = tier.Find("admission");
  const ConfigNode* at = involved[0] != nullptr ? involved[0] : frequency;
  for (const ConfigNode* p : involved) {
    if (p != nullptr && p->from_override) {
      at = p;
      break;
    }
  }
  const std::string limit = std::to_string(k.SketchAgingLimit());
  return NodeError(at->where,
                   path + ".policy.sketch_aging_period " + std::to_string(k.sketch_aging_period) +
                       " is longer than " + limit +
                       " (sketch_width x frequency_threshold / 4) for frequency admission: "
                       "counters would fill until blocks never seen pass",
                   "at most " + limit + ", or 0 for " + limit);
}

// marconi_checkpoints_only steers marconi admission only: set on a tier
// without it, it would read as if checkpoints were judged while every one
// is kept. The knob is blamed, or the admission list when an override set it.
Status CheckCheckpointsOnly(const ConfigNode& tier, const std::string& path, const TierOptions& t) {
  if (!t.policy.marconi_checkpoints_only ||
      std::find(t.admission.begin(), t.admission.end(), "marconi") != t.admission.end()) {
    return Status::Ok();
  }
  const ConfigNode* policy = tier.Find("policy");
  const ConfigNode* knob = policy != nullptr ? policy->Find("marconi_checkpoints_only") : nullptr;
  const ConfigNode* admission = tier.Find("admission");
  const ConfigNode* at = knob;
  if (at == nullptr || (admission != nullptr && admission->from_override)) at = admission;
  const std::string where = at != nullptr ? at->where : tier.where;
  const std::string list = admission != nullptr ? ".admission" : ".admission (default [always])";
  return NodeError(where,
                   path + ".policy.marconi_checkpoints_only is true but " + path + list +
                       " has no marconi, so it would change nothing",
                   "marconi in the admission list, such as 'admission: [marconi]', or the knob "
                   "false");
}

// watermarks, eviction, admission and the policies' knobs.
Status ReadTierPolicies(const ConfigNode& node, const std::string& path, TierOptions* t) {
  if (const ConfigNode* p = node.Find("watermarks")) {
    KVTIER_RETURN_IF_ERROR(ReadWatermarks(*p, path + ".watermarks", &t->watermarks));
  }
  KVTIER_RETURN_IF_ERROR(ReadPolicyKeys(node, path, t));
  if (const ConfigNode* p = node.Find("eviction")) {
    KVTIER_RETURN_IF_ERROR(ReadString(*p, path + ".eviction", &t->eviction));
    if (!Known(EvictionPolicyNames(), t->eviction)) {
      return NodeError(p->where, "unknown eviction policy '" + t->eviction + "'",
                       "one of: " + JoinNames(EvictionPolicyNames()));
    }
  }
  const ConfigNode* frequency = nullptr;  // the admission list's "frequency"
  if (const ConfigNode* p = node.Find("admission")) {
    std::vector<const ConfigNode*> items;
    KVTIER_RETURN_IF_ERROR(
        ReadStringList(*p, path + ".admission", /*allow_single=*/true, &t->admission, &items));
    if (t->admission.empty()) {
      return NodeError(p->where, path + ".admission is an empty list",
                       "at least one of: " + JoinNames(AdmissionPolicyNames()));
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (!Known(AdmissionPolicyNames(), t->admission[i])) {
        return NodeError(items[i]->where, "unknown admission policy '" + t->admission[i] + "'",
                         "one of: " + JoinNames(AdmissionPolicyNames()));
      }
      const auto before = t->admission.begin() + static_cast<std::ptrdiff_t>(i);
      if (std::find(t->admission.begin(), before, t->admission[i]) != before) {
        return NodeError(items[i]->where, path + ".admission lists '" + t->admission[i] + "' twice",
                         "each policy once: all of the list must admit a block");
      }
      if (t->admission[i] == "write_budget" && t->policy.write_budget_bytes_per_day == 0) {
        // The budget's key, when set to 0 (by a --set, say), is the one to blame.
        const ConfigNode* policy = node.Find("policy");
        const ConfigNode* budget = policy != nullptr && policy->kind == ConfigNode::Kind::kMap
                                       ? policy->Find("write_budget_per_day")
                                       : nullptr;
        return NodeError(Blame(budget, items[i], *items[i]).where,
                         path + ".admission has write_budget but " + path +
                             ".policy.write_budget_per_day" +
                             (budget != nullptr ? " is 0" : " is not set"),
                         "a budget such as 'policy: {write_budget_per_day: 200GiB}'");
      }
      if (t->admission[i] == "frequency") frequency = items[i];
    }
  }
  KVTIER_RETURN_IF_ERROR(CheckCheckpointsOnly(node, path, *t));
  return CheckSketchAging(node, path, t->policy, frequency);
}

const BackendKeys* FindBackend(std::string_view type) {
  for (const BackendKeys& b : BackendKeyTable()) {
    if (b.type == type) return &b;
  }
  return nullptr;
}

// A key that belongs to other types than the tier's own is an error naming
// both, not an unknown key: "path" on a host tier would otherwise be taken
// for a typo, or worse, be read and have no effect. When an override set the
// type, the override is blamed.
Status CheckOtherTypesKeys(const ConfigNode& node, const std::string& path, const BackendKeys& own,
                           const ConfigNode& type, std::span<const std::string_view> allowed) {
  for (const ConfigNode& item : node.items) {
    if (Known(allowed, item.key)) continue;
    std::vector<std::string_view> owners;
    for (const BackendKeys& b : BackendKeyTable()) {
      if (Known(b.keys(), item.key)) owners.push_back(b.type);
    }
    if (owners.empty()) continue;  // an unknown key: CheckMap's error
    std::string what = path + ": key '" + item.key + "'";
    if (type.from_override) what += " (at " + item.key_where + ")";
    what += " is for tiers of type " + JoinNames(owners) + ", not " + std::string(own.type);
    return NodeError(type.from_override ? type.where : item.key_where, what,
                     "for type " + std::string(own.type) + " one of: " + JoinNames(allowed));
  }
  return Status::Ok();
}

Status ReadTier(const ConfigNode& node, size_t index, TierOptions* t) {
  // The type decides which keys are allowed: peek at it before checking the
  // map, so an unknown key is reported before a missing one. While the type
  // is missing or unknown every type's keys pass, so that its own error
  // comes first.
  const std::string index_path = "tiers." + std::to_string(index);
  const ConfigNode* type = nullptr;
  const BackendKeys* backend = nullptr;
  if (node.kind == ConfigNode::Kind::kMap) {
    type = node.Find("type");
    if (type != nullptr && type->kind == ConfigNode::Kind::kScalar)
      backend = FindBackend(type->text);
  }
  std::vector<std::string_view> allowed(kTierKeys.begin(), kTierKeys.end());
  for (const BackendKeys& b : BackendKeyTable()) {
    if (backend != nullptr && &b != backend) continue;
    for (std::string_view k : b.keys()) {
      // Backends share some keys (servers, connections, ...): listed once.
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) allowed.push_back(k);
    }
  }
  if (backend != nullptr) {
    KVTIER_RETURN_IF_ERROR(CheckOtherTypesKeys(node, index_path, *backend, *type, allowed));
  }
  KVTIER_RETURN_IF_ERROR(CheckMap(node, index_path, allowed));
  KVTIER_RETURN_IF_ERROR(ReadTierRequired(node, index, t));
  const std::string path = "tiers." + t->name;
  if (backend != nullptr) KVTIER_RETURN_IF_ERROR(backend->read(node, path, t));
  KVTIER_RETURN_IF_ERROR(ReadTierPolicies(node, path, t));
  // A last net under the field checks above.
  Status s = t->Validate();
  if (!s.ok()) return Status::InvalidArgument(node.where + ": " + std::string(s.message()));
  return Status::Ok();
}

}  // namespace

Status ReadTiers(const ConfigNode& root, std::vector<TierOptions>* tiers) {
  const ConfigNode* list = root.Find("tiers");
  if (list == nullptr) {
    return NodeError(root.where, "the configuration has no 'tiers'",
                     "a 'tiers' list whose first tier has type host");
  }
  if (list->kind != ConfigNode::Kind::kList) {
    return NodeError(list->where, "tiers is " + DescribeNode(*list),
                     "a list of tiers, each item starting with '- name:'");
  }
  if (list->items.empty()) {
    return NodeError(list->where, "tiers is an empty list",
                     "at least one tier, the first of type host");
  }
  if (list->items.size() > kMaxTiers) {
    return NodeError(list->items[kMaxTiers].where,
                     "more than " + std::to_string(kMaxTiers) + " tiers",
                     "at most " + std::to_string(kMaxTiers) + " tiers");
  }
  tiers->clear();
  std::unordered_map<std::string, std::string> store_of;  // FindStoreClash
  for (size_t i = 0; i < list->items.size(); ++i) {
    const ConfigNode& item = list->items[i];
    TierOptions t;
    KVTIER_RETURN_IF_ERROR(ReadTier(item, i, &t));
    if (auto clash = FindStoreClash(t, store_of)) {
      const ConfigNode* at =
          item.Find(t.type != "nvme" ? "servers" : (clash->nvme_index ? "index_path" : "path"));
      if (at == nullptr) at = item.Find("path");  // a default index, named after the path
      return NodeError(at != nullptr ? at->where : item.where, StoreClashWhat(t.name, *clash),
                       kOwnStoreExpected);
    }
    for (size_t j = 0; j < tiers->size(); ++j) {
      if ((*tiers)[j].name == t.name) {
        // The override that made the clash, when one did, not the file's line.
        const ConfigNode& at = Blame(item.Find("name"), list->items[j].Find("name"), item);
        return NodeError(at.where, "duplicate tier name '" + t.name + "'",
                         "a unique name for every tier");
      }
    }
    tiers->push_back(std::move(t));
  }
  if ((*tiers)[0].type != "host") {
    return NodeError(
        list->items[0].Find("type")->where,
        "the first tier '" + (*tiers)[0].name + "' has type '" + (*tiers)[0].type + "'",
        "the first tier to be of type host: every block passes through it");
  }
  return Status::Ok();
}

std::vector<std::string> TierKeyNames(std::string_view type) {
  std::vector<std::string> names;
  for (std::string_view k : kTierKeys) {
    if (k == "watermarks" || k == "policy") continue;
    names.emplace_back(k);
  }
  for (std::string_view k : kWatermarkKeys) names.push_back("watermarks." + std::string(k));
  if (const BackendKeys* b = FindBackend(type)) {
    for (std::string_view k : b->keys()) names.emplace_back(k);
  }
  for (std::string_view k : PolicyKeys()) names.push_back("policy." + std::string(k));
  return names;
}

}  // namespace kvtier::internal
