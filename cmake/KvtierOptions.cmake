# Backend switches: AUTO builds a backend when its dependency is found, ON
# fails the configure when it is not, OFF never builds it. REMOTE is the
# remote tier and kvtier-memd (Boost.Asio).
foreach(backend CUDA RDMA URING REDIS ROCKSDB REMOTE)
  set(KVTIER_WITH_${backend} AUTO CACHE STRING "Build the ${backend} backend (AUTO|ON|OFF)")
  set_property(CACHE KVTIER_WITH_${backend} PROPERTY STRINGS AUTO ON OFF)
endforeach()

# Sanitizers for the whole build, e.g. -DKVTIER_SANITIZE=address,undefined or thread.
set(KVTIER_SANITIZE "" CACHE STRING "Comma-separated -fsanitize= list for every target")
if(KVTIER_SANITIZE)
  # C and C++ only: nvcc does not take these flags.
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${KVTIER_SANITIZE}>"
                      "$<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>"
                      "$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>")
  add_link_options(-fsanitize=${KVTIER_SANITIZE})
endif()

find_program(KVTIER_CCACHE ccache)
if(KVTIER_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_C_COMPILER_LAUNCHER "${KVTIER_CCACHE}")
  set(CMAKE_CXX_COMPILER_LAUNCHER "${KVTIER_CCACHE}")
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${KVTIER_CCACHE}")
endif()

# kvtier_resolve_backend(NAME FOUND [DEPENDENCY]): sets KVTIER_HAVE_<NAME> to
# 0/1 from the switch and whether the dependency (named in the error) was found.
function(kvtier_resolve_backend name found)
  set(mode "${KVTIER_WITH_${name}}")
  set(dependency "its dependency")
  if(ARGC GREATER 2)
    set(dependency "${ARGV2}")
  endif()
  if(mode STREQUAL "OFF")
    set(KVTIER_HAVE_${name} 0 PARENT_SCOPE)
  elseif(found)
    set(KVTIER_HAVE_${name} 1 PARENT_SCOPE)
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "KVTIER_WITH_${name}=ON but ${dependency} was not found")
  else()
    set(KVTIER_HAVE_${name} 0 PARENT_SCOPE)
  endif()
endfunction()
