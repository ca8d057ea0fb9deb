#include "gpu/layer_report.h"

#include <exception>
#include <string>
#include <utility>

namespace kvtier::internal {

Status ReportLayer(const LayerDone& on_layer, uint32_t layer) noexcept {
  // Runs on a copy engine's own thread: whatever the callback throws, and
  // memory running out while saying what, ends as a Status.
  std::string what;
  try {
    on_layer(layer);
    return Status::Ok();
  } catch (const std::exception& e) {
    try {
      what = e.what();
    } catch (...) {
    }
  } catch (...) {
    try {
      what = "an exception that is not a std::exception";
    } catch (...) {
    }
  }
  try {
    return Status::Internal("on_layer(" + std::to_string(layer) + ") threw: " + what);
  } catch (...) {
    return Status(StatusCode::kInternal, "on_layer threw");
  }
}

void ReportDone(const CopyDone& done, std::vector<Status> results) {
  if (!done) return;
  try {
    done(std::move(results));
  } catch (...) {
  }
}

}  // namespace kvtier::internal
