// CudaCopyEngineOptions::Validate: built with or without CUDA, so option
// errors read the same everywhere.

#include <string>

#include "kvtier/copy_engine.h"

namespace kvtier {

Status CudaCopyEngineOptions::Validate() const {
  KVTIER_RETURN_IF_ERROR(layout.Validate().WithContext("cuda copy engine"));
  const uint32_t want = EngineTensorCount(layout);
  if (tensors.size() != want) {
    return Status::InvalidArgument("cuda copy engine: layout " +
                                   std::string(KvLayoutKindName(layout.kind)) + " has " +
                                   std::to_string(want) + " engine tensors; got " +
                                   std::to_string(tensors.size()) + " tensor pointers");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i] == nullptr) {
      return Status::InvalidArgument("cuda copy engine: tensor " + std::to_string(i) + " is null");
    }
  }
  // cudaStreamPerThread is the handle 0x2 (driver_types.h); compared by value
  // so that this file builds without CUDA.
  if (compute_stream == reinterpret_cast<void*>(0x2)) {
    return Status::InvalidArgument(
        "cuda copy engine: compute_stream is cudaStreamPerThread, which names the stream of "
        "whichever thread uses it; pass the engine's stream itself");
  }
  if (device < 0) {
    return Status::InvalidArgument("cuda copy engine: device is " + std::to_string(device));
  }
  if (path != CudaCopyPath::kAuto && path != CudaCopyPath::kDma && path != CudaCopyPath::kKernel) {
    return Status::InvalidArgument("cuda copy engine: unknown copy path");
  }
  return Status::Ok();
}

}  // namespace kvtier
