# Required dependencies, then the optional backends. Results:
#   KVTIER_PRIVATE_DEPS  link libraries of the library itself
#   KVTIER_HAVE_<X>      0/1 for each optional backend
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(yaml-cpp REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)

set(KVTIER_PRIVATE_DEPS Threads::Threads OpenSSL::Crypto yaml-cpp PkgConfig::XXHASH)

# CUDA: only the toolkit is needed to build; running needs a device.
set(_cuda_found FALSE)
if(NOT KVTIER_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(_cuda_found TRUE)
    endif()
  endif()
endif()
kvtier_resolve_backend(CUDA ${_cuda_found})

pkg_check_modules(IBVERBS QUIET IMPORTED_TARGET libibverbs)
kvtier_resolve_backend(RDMA "${IBVERBS_FOUND}")
pkg_check_modules(URING QUIET IMPORTED_TARGET liburing)
kvtier_resolve_backend(URING "${URING_FOUND}")
pkg_check_modules(HIREDIS QUIET IMPORTED_TARGET hiredis)
kvtier_resolve_backend(REDIS "${HIREDIS_FOUND}")
find_package(RocksDB CONFIG QUIET)
kvtier_resolve_backend(ROCKSDB "${RocksDB_FOUND}")
