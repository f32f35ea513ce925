# Finds NCCL (nccl.h and libnccl) and defines the IMPORTED target NCCL::NCCL.
# In: CUDAToolkit_INCLUDE_DIRS / CUDAToolkit_LIBRARY_DIR (from find_package(CUDAToolkit)),
#     optionally NCCL_ROOT (variable or environment) or the cache entries NCCL_INCLUDE_DIR
#     and NCCL_LIBRARY to point at a non-default install.
# Out: NCCL_FOUND, NCCL_VERSION (from nccl.h) and the target NCCL::NCCL.
# Used by zeppelin's own build (cmake/zeppelin_cuda.cmake) and installed next to
# zeppelin-config.cmake, which runs it again in the consumer: the exported zeppelin::cuda
# links NCCL::NCCL by name, never by an absolute path of the machine that built it.
if(TARGET NCCL::NCCL)
  set(NCCL_FOUND TRUE)
  return()
endif()

find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include
  DOC "Folder holding nccl.h")
find_library(NCCL_LIBRARY nccl
  HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64
  DOC "The NCCL library (libnccl)")
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

unset(NCCL_VERSION)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" zeppelin_nccl_version_lines
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(part IN ITEMS MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define NCCL_${part} +([0-9]+).*" "\\1" zeppelin_nccl_${part} "${zeppelin_nccl_version_lines}")
  endforeach()
  set(NCCL_VERSION "${zeppelin_nccl_MAJOR}.${zeppelin_nccl_MINOR}.${zeppelin_nccl_PATCH}")
  unset(zeppelin_nccl_version_lines)
endif()

include(FindPackageHandleStandardArgs)
# NAME_MISMATCHED: this snippet is included from zeppelin's files, not found as FindNCCL.
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION NAME_MISMATCHED)

if(NCCL_FOUND)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
