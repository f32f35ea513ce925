// zeppelin/core/config.hpp
// Library-wide macros: version, the inline ABI namespace, host/device annotations.
// nvcc-safe: includes nothing beyond the C++ standard library.
#pragma once

#define ZEPPELIN_VERSION_MAJOR 0
#define ZEPPELIN_VERSION_MINOR 2
#define ZEPPELIN_VERSION_PATCH 0

//! Bumped when the layout of a public type changes; mixing two versions in one program then
//! fails at link time instead of misbehaving.
#define ZEPPELIN_ABI_VERSION v1  // v1 (0.2): plan::notes holds plan_note, not std::string

#define ZEPPELIN_NAMESPACE_BEGIN \
  namespace zeppelin {           \
  inline namespace ZEPPELIN_ABI_VERSION {
#define ZEPPELIN_NAMESPACE_END \
  }                            \
  }

#if defined(__CUDACC__) || defined(__HIPCC__)
#define ZEPPELIN_HOST_DEVICE __host__ __device__
#define ZEPPELIN_DEVICE __device__
#else
#define ZEPPELIN_HOST_DEVICE
#define ZEPPELIN_DEVICE
#endif

#if defined(__GNUC__) || defined(__clang__)
//! Kernels and internal symbols are not exported from shared objects that include us.
#define ZEPPELIN_HIDDEN __attribute__((visibility("hidden")))
#else
#define ZEPPELIN_HIDDEN
#endif

#define ZEPPELIN_STRINGIFY_IMPL(x) #x
#define ZEPPELIN_STRINGIFY(x) ZEPPELIN_STRINGIFY_IMPL(x)
