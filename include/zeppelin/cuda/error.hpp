// zeppelin/cuda/error.hpp
// Turning CUDA runtime error codes into exceptions at the host boundary.
//   ZEPPELIN_CUDA_CHECK(expr)  evaluates a cudaError_t expression; on failure throws
//                              zeppelin::cuda_error (code, cudaGetErrorName/String, the
//                              expression text, file and line of the call site).
// Device launch facades return cudaError_t (so they can run inside CUDA graph capture);
// wrap them in ZEPPELIN_CUDA_CHECK where an exception is wanted.
// nvcc-safe; needs the CUDA runtime headers.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <cuda_runtime_api.h>

#include <string>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! Throws cuda_error when `code` is not cudaSuccess; `what` names the failed expression.
inline void throw_on_cuda_error(cudaError_t code, const char* what, const char* file, int line) {
  if (code == cudaSuccess) return;
  std::string message = std::string(what) + " failed: " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")";
  throw cuda_error(static_cast<int>(code), message, file, line);
}

}  // namespace device
ZEPPELIN_NAMESPACE_END

//! Evaluates `expr` (a cudaError_t) once and throws zeppelin::cuda_error with file/line on failure.
#define ZEPPELIN_CUDA_CHECK(expr) ::zeppelin::device::throw_on_cuda_error((expr), #expr, __FILE__, __LINE__)
