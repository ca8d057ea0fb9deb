# Installation and the exported kvtier::kvtier package.
#
# Installs the shared library (the only installed ABI), the public headers with
# the generated build_config.h, a CMake package (find_package(kvtier) ->
# kvtier::kvtier) and a pkg-config file (kvtier.pc). Rules are split into two
# components so a partial build can still install the library alone:
#   runtime      libkvtier.so*, and the Python binding in <libdir>/kvtier/python
#                (the package python/kvtier finds the library three levels up)
#   development  headers, CMake package files, kvtier.pc
# The static kvtier_internal library is for tests and tools and is not installed.
include(CMakePackageConfigHelpers)

set(KVTIER_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kvtier"
    CACHE STRING "Where kvtierConfig.cmake is installed, relative to the prefix")

install(TARGETS kvtier EXPORT kvtierTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT runtime
          NAMELINK_COMPONENT development
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT runtime)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/python/kvtier"
  DESTINATION "${CMAKE_INSTALL_LIBDIR}/kvtier/python" COMPONENT runtime
  FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/kvtier"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" COMPONENT development
  FILES_MATCHING PATTERN "*.h")
install(FILES "${PROJECT_BINARY_DIR}/include/kvtier/build_config.h"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/kvtier" COMPONENT development)

install(EXPORT kvtierTargets NAMESPACE kvtier:: FILE kvtierTargets.cmake
  DESTINATION "${KVTIER_INSTALL_CMAKEDIR}" COMPONENT development)

configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/kvtierConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/kvtierConfig.cmake"
  INSTALL_DESTINATION "${KVTIER_INSTALL_CMAKEDIR}")
# 0.x releases make no compatibility promise across minor versions.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/kvtierConfig.cmake"
              "${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake"
  DESTINATION "${KVTIER_INSTALL_CMAKEDIR}" COMPONENT development)

# kvtier.pc is written at install time, not configure time, so that the
# prefix given to `cmake --install --prefix` ends up in it. A literal prefix
# (rather than one relative to ${pcfiledir}) lets pkg-config drop system
# include and library directories from its output.
set(_kvtier_pc_generated "${PROJECT_BINARY_DIR}/pkgconfig/kvtier.pc")
install(CODE "
  set(KVTIER_PC_VERSION \"${PROJECT_VERSION}\")
  set(KVTIER_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  foreach(_kind LIBDIR INCLUDEDIR)
    if(_kind STREQUAL \"LIBDIR\")
      set(_dir \"${CMAKE_INSTALL_LIBDIR}\")
    else()
      set(_dir \"${CMAKE_INSTALL_INCLUDEDIR}\")
    endif()
    if(IS_ABSOLUTE \"\${_dir}\")
      set(KVTIER_PC_\${_kind} \"\${_dir}\")
    else()
      set(KVTIER_PC_\${_kind} \"\\\${prefix}/\${_dir}\")
    endif()
  endforeach()
  configure_file(\"${CMAKE_CURRENT_LIST_DIR}/kvtier.pc.in\" \"${_kvtier_pc_generated}\" @ONLY)
" COMPONENT development)
install(FILES "${_kvtier_pc_generated}"
  DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig" COMPONENT development)
unset(_kvtier_pc_generated)
