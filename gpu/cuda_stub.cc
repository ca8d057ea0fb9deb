// CreateCudaCopyEngine for builds without the CUDA toolkit (chosen by the
// source list in gpu/CMakeLists.txt).

#include "kvtier/copy_engine.h"

namespace kvtier {

Result<std::unique_ptr<CopyEngine>> CreateCudaCopyEngine(const CudaCopyEngineOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  return Status::NotSupported("cuda copy engine: kvtier was built without CUDA");
}

}  // namespace kvtier
