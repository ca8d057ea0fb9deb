// The offline store commands of a build without their backend: they answer
// with exit code 2 so that scripts can tell "not available" from "store is
// bad". CMakeLists.txt picks this file's pieces per missing backend.
#include <iostream>

#include "tools/inspect/inspect.h"
#include "tools/inspect/json_text.h"

namespace kvtier::inspect {

int NotAvailable(const std::string& what, const Output& o) {
  const std::string msg = "kvtier-inspect " + what + ": not available in this build";
  if (o.json) {
    o.out << JsonText({{"error", msg}, {"available", false}}) << "\n";
  }
  o.err << msg << "\n";
  return kExitUsage;
}

}  // namespace kvtier::inspect
