#include "gpu/layer_report.h"

#include <exception>
#include <string>
#include <utility>

namespace kvtier::internal {

Status ReportLayer(const LayerDone& on_layer, uint32_t layer) {
  std::string what;
  try {
    on_layer(layer);
    return Status::Ok();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  return Status::Internal("on_layer(" + std::to_string(layer) + ") threw: " + what);
}

void ReportDone(const CopyDone& done, std::vector<Status> results) {
  if (!done) return;
  try {
    done(std::move(results));
  } catch (...) {
  }
}

}  // namespace kvtier::internal
