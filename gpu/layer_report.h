// Running the caller's callbacks from a copy engine. They are the serving
// engine's code: an exception from one must not unwind through a copy
// (skipping `done`, or leaving a copy in flight) or out of an engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "kvtier/copy_engine.h"
#include "kvtier/status.h"

namespace kvtier::internal {

// Runs on_layer(layer). An exception becomes Internal "on_layer(<layer>)
// threw: <what>"; the engine then fails the copies still in flight.
Status ReportLayer(const LayerDone& on_layer, uint32_t layer) noexcept;

// Runs done(results), if set. An exception is dropped: the copies are over
// and there is nobody left to tell.
void ReportDone(const CopyDone& done, std::vector<Status> results);

}  // namespace kvtier::internal
