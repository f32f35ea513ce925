# Install rules and the exported package: find_package(zeppelin CONFIG REQUIRED) gives
# zeppelin::core (and zeppelin::cuda when the install was configured with CUDA).
include(CMakePackageConfigHelpers)

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/zeppelin" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
set(zeppelin_install_targets zeppelin_core)
if(ZEPPELIN_CUDA_ENABLED)
  list(APPEND zeppelin_install_targets zeppelin_cuda zeppelin_nccl_imported)
endif()
install(TARGETS ${zeppelin_install_targets} EXPORT zeppelin-targets)

set(ZEPPELIN_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_DATADIR}/cmake/zeppelin")
install(EXPORT zeppelin-targets NAMESPACE zeppelin:: DESTINATION "${ZEPPELIN_CMAKE_INSTALL_DIR}")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/zeppelin-config.cmake.in"
  "${PROJECT_BINARY_DIR}/zeppelin-config.cmake" INSTALL_DESTINATION "${ZEPPELIN_CMAKE_INSTALL_DIR}")
# Header-only: the package fits any architecture.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/zeppelin-config-version.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/zeppelin-config.cmake" "${PROJECT_BINARY_DIR}/zeppelin-config-version.cmake"
  DESTINATION "${ZEPPELIN_CMAKE_INSTALL_DIR}")
