# Install rules and the exported package. find_package(zeppelin CONFIG REQUIRED) gives
# zeppelin::core, and zeppelin::cuda and zeppelin::kernels when the install was configured
# with CUDA and the consumer's machine has the CUDA toolkit and NCCL (COMPONENTS cuda makes
# that required). Two export sets, so that a consumer without CUDA still loads zeppelin::core:
#   zeppelin-targets.cmake       zeppelin::core
#   zeppelin-cuda-targets.cmake  zeppelin::cuda (links CUDA::cudart, CCCL::CCCL, NCCL::NCCL,
#                                which zeppelin-config.cmake finds again on the consumer side)
#                                and zeppelin::kernels (lib/libzeppelin_kernels.a; kernels/)
# The `zeppelin` tool goes to bin/ (examples/CMakeLists.txt).
include(CMakePackageConfigHelpers)

set(ZEPPELIN_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_DATADIR}/cmake/zeppelin"
    CACHE STRING "Where the zeppelin CMake package files are installed, relative to the prefix")
mark_as_advanced(ZEPPELIN_CMAKE_INSTALL_DIR)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/zeppelin" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

install(TARGETS zeppelin_core EXPORT zeppelin-targets)
install(EXPORT zeppelin-targets NAMESPACE zeppelin:: DESTINATION "${ZEPPELIN_CMAKE_INSTALL_DIR}")
if(ZEPPELIN_CUDA_ENABLED)
  install(TARGETS zeppelin_cuda EXPORT zeppelin-cuda-targets)
  install(EXPORT zeppelin-cuda-targets NAMESPACE zeppelin:: DESTINATION "${ZEPPELIN_CMAKE_INSTALL_DIR}")
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/zeppelin_find_nccl.cmake" "${PROJECT_SOURCE_DIR}/cmake/zeppelin_cuda20_shim.cmake"
          DESTINATION "${ZEPPELIN_CMAKE_INSTALL_DIR}")
endif()

# Values substituted into zeppelin-config.cmake.
if(ZEPPELIN_CCCL_TARGET)
  set(ZEPPELIN_PACKAGE_NEEDS_CCCL ON)
else()
  set(ZEPPELIN_PACKAGE_NEEDS_CCCL OFF)
endif()
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/zeppelin-config.cmake.in"
  "${PROJECT_BINARY_DIR}/zeppelin-config.cmake" INSTALL_DESTINATION "${ZEPPELIN_CMAKE_INSTALL_DIR}")
# 0.x: only the same minor version is compatible. Header-only: fits any architecture.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/zeppelin-config-version.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/zeppelin-config.cmake" "${PROJECT_BINARY_DIR}/zeppelin-config-version.cmake"
  DESTINATION "${ZEPPELIN_CMAKE_INSTALL_DIR}")
