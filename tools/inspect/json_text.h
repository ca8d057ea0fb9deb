// The text of kvtier-inspect's --json documents. File names, config keys and
// values are bytes from the user, not necessarily UTF-8: an invalid sequence
// is written as U+FFFD rather than failing the dump (which would abort).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvtier::inspect {

// `j` as JSON text; `indent` as nlohmann's dump (-1: one line).
inline std::string JsonText(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvtier::inspect
