// nvme and redis: offline views of persistent stores. This build does not
// include them yet (see the README of this folder); they answer with exit
// code 2 so that scripts can tell "not available" from "store is bad".
#include <iostream>
#include <nlohmann/json.hpp>

#include "tools/inspect/inspect.h"

namespace kvtier::inspect {
namespace {

int NotAvailable(const std::string& what, const Output& o) {
  const std::string msg = "kvtier-inspect " + what + ": not available in this build";
  if (o.json) {
    o.out << nlohmann::json{{"error", msg}, {"available", false}}.dump() << "\n";
  }
  o.err << msg << "\n";
  return kExitUsage;
}

}  // namespace

int RunNvme(const std::string& path, const std::string& action, bool read_only,
            const Output& o) {
  (void)path;
  (void)read_only;
  return NotAvailable("nvme " + action, o);
}

int RunRedis(const std::string& url, const std::string& action, const Output& o) {
  (void)url;
  return NotAvailable("redis " + action, o);
}

}  // namespace kvtier::inspect
