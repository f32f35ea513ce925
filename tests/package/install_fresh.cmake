# Installs a zeppelin build tree into an empty prefix (the fixture of the find_package
# consumer tests) and checks that the package files are there.
#   cmake -DBUILD_DIR=<build tree> -DPREFIX=<prefix> [-DCONFIG=<config>] -P install_fresh.cmake
foreach(var IN ITEMS BUILD_DIR PREFIX)
  if(NOT ${var})
    message(FATAL_ERROR "install_fresh.cmake: ${var} is not set")
  endif()
endforeach()
file(REMOVE_RECURSE "${PREFIX}")  # a header deleted from the source tree must not linger
set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" ${config_args}
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} failed: ${status}")
endif()
file(GLOB_RECURSE config_files "${PREFIX}/*/zeppelin-config.cmake")
file(GLOB_RECURSE version_files "${PREFIX}/*/zeppelin-config-version.cmake")
file(GLOB_RECURSE target_files "${PREFIX}/*/zeppelin-targets.cmake")
if(NOT EXISTS "${PREFIX}/include/zeppelin/core.hpp" OR NOT config_files OR NOT version_files OR NOT target_files)
  message(FATAL_ERROR "the install into ${PREFIX} lacks headers or package files")
endif()
message(STATUS "zeppelin installed into ${PREFIX}: ${config_files}")
