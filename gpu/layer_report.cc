#include "gpu/layer_report.h"

#include <exception>
#include <string>
#include <utility>

namespace kvtier::internal {

namespace {

Status Threw(uint32_t layer, const char* what) noexcept {
  return DescribedStatus(StatusCode::kInternal, "on_layer threw", [&] {
    return Status::Internal("on_layer(" + std::to_string(layer) + ") threw: " + what);
  });
}

}  // namespace

Status ReportLayer(const LayerDone& on_layer, uint32_t layer) noexcept {
  // Runs on a copy engine's own thread: whatever the callback throws, and
  // memory running out while saying what, ends as a Status.
  try {
    on_layer(layer);
    return Status::Ok();
  } catch (const std::exception& e) {
    return Threw(layer, e.what());
  } catch (...) {
    return Threw(layer, "an exception that is not a std::exception");
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
