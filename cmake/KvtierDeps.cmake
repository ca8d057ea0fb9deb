# Required dependencies, then the optional backends. Results:
#   KVTIER_PRIVATE_DEPS  link libraries of the library itself
#   KVTIER_HAVE_<X>      0/1 for each optional backend
#   KVTIER_HAVE_REMOTE   0/1: the remote tier and kvtier-memd (Boost.Asio;
#                        switch KVTIER_WITH_REMOTE)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)
find_package(yaml-cpp REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)

set(KVTIER_PRIVATE_DEPS Threads::Threads OpenSSL::SSL OpenSSL::Crypto yaml-cpp PkgConfig::XXHASH)

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
kvtier_resolve_backend(CUDA ${_cuda_found} "the CUDA toolkit (nvcc)")
if(KVTIER_HAVE_CUDA)
  # A100 (80) and H100/H200 (90) unless the caller chose.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  # The shared runtime, the same one CUDA::cudart names: one copy per process.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  list(APPEND KVTIER_PRIVATE_DEPS CUDA::cudart)
endif()

# Boost.Asio (header-only) for the remote tier and kvtier-memd; without it
# the remote tier is a stub answering NotSupported (KVTIER_HAVE_REMOTE 0).
set(_boost_found FALSE)
if(NOT KVTIER_WITH_REMOTE STREQUAL "OFF")
  find_package(Boost 1.74 QUIET)
  set(_boost_found "${Boost_FOUND}")
endif()
kvtier_resolve_backend(REMOTE "${_boost_found}" "Boost.Asio 1.74+ (libboost-dev)")
# RDMA is a transport of the remote tier: it needs libibverbs and the tier.
pkg_check_modules(IBVERBS QUIET IMPORTED_TARGET libibverbs)
if(IBVERBS_FOUND AND NOT KVTIER_HAVE_REMOTE AND NOT KVTIER_WITH_RDMA STREQUAL "OFF")
  if(KVTIER_WITH_RDMA STREQUAL "ON")
    message(FATAL_ERROR "KVTIER_WITH_RDMA=ON needs the remote tier, of which RDMA is a "
                        "transport: KVTIER_WITH_REMOTE must not be OFF and Boost.Asio 1.74+ "
                        "(libboost-dev) must be installed")
  endif()
  message(STATUS "RDMA not built: libibverbs is there but the remote tier, which needs "
                 "Boost.Asio 1.74+ (libboost-dev) and KVTIER_WITH_REMOTE not OFF, is not")
endif()
if(IBVERBS_FOUND AND KVTIER_HAVE_REMOTE)
  kvtier_resolve_backend(RDMA TRUE "libibverbs (libibverbs-dev)")
else()
  kvtier_resolve_backend(RDMA FALSE "libibverbs (libibverbs-dev)")
endif()
if(KVTIER_HAVE_RDMA)
  list(APPEND KVTIER_PRIVATE_DEPS PkgConfig::IBVERBS)
endif()
if(KVTIER_HAVE_REMOTE)
  list(APPEND KVTIER_PRIVATE_DEPS Boost::boost)
endif()
pkg_check_modules(URING QUIET IMPORTED_TARGET liburing)
kvtier_resolve_backend(URING "${URING_FOUND}" "liburing (liburing-dev)")
pkg_check_modules(HIREDIS QUIET IMPORTED_TARGET hiredis)
kvtier_resolve_backend(REDIS "${HIREDIS_FOUND}" "hiredis (libhiredis-dev)")
if(KVTIER_HAVE_REDIS)
  list(APPEND KVTIER_PRIVATE_DEPS PkgConfig::HIREDIS)
endif()
find_package(RocksDB CONFIG QUIET)
kvtier_resolve_backend(ROCKSDB "${RocksDB_FOUND}" "RocksDB (librocksdb-dev)")
if(KVTIER_HAVE_URING)
  list(APPEND KVTIER_PRIVATE_DEPS PkgConfig::URING)
endif()
if(KVTIER_HAVE_ROCKSDB)
  # The shared library: Debian's librocksdb.a is not position-independent and
  # cannot go into libkvtier.so.
  if(TARGET RocksDB::rocksdb-shared)
    list(APPEND KVTIER_PRIVATE_DEPS RocksDB::rocksdb-shared)
  else()
    list(APPEND KVTIER_PRIVATE_DEPS RocksDB::rocksdb)
  endif()
endif()
