// zeppelin/nccl/error.hpp
// Turning NCCL result codes into exceptions at the host boundary.
//   throw_on_nccl_error(code, what, comm)  throws zeppelin::nccl_error (code = ncclResult_t)
//                                          whose message names the operation, the NCCL error
//                                          string and ncclGetLastError's detail
//   ZEPPELIN_NCCL_CHECK(expr)              the same for an expression, with file and line
// ncclInProgress is NOT an error here only where a caller polls for it (non-blocking
// communicators, nccl/communicator.hpp); this check treats anything but ncclSuccess as one.
// nvcc-safe; needs nccl.h.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <nccl.h>

#include <string>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN
namespace nccl {

//! The message of a failed NCCL operation: "<what> failed: <code string> (<last error>)".
[[nodiscard]] inline std::string describe(ncclResult_t code, std::string_view what, ncclComm_t comm = nullptr) {
  std::string message = std::string(what) + " failed: " + ncclGetErrorString(code);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
  return message;
}

//! Throws nccl_error when `code` is not ncclSuccess.
inline void throw_on_nccl_error(ncclResult_t code, std::string_view what, const char* file, int line, ncclComm_t comm = nullptr) {
  if (code == ncclSuccess) return;
  throw nccl_error(static_cast<int>(code), describe(code, what, comm), file, line);
}

}  // namespace nccl
ZEPPELIN_NAMESPACE_END

//! Evaluates `expr` (an ncclResult_t) once and throws zeppelin::nccl_error on failure.
#define ZEPPELIN_NCCL_CHECK(expr) ::zeppelin::nccl::throw_on_nccl_error((expr), #expr, __FILE__, __LINE__)
