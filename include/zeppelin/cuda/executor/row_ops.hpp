// zeppelin/cuda/executor/row_ops.hpp
// The two element-wise device operations the CUDA executors need besides the attention,
// merge, cast and copy kernels of cuda/:
//   fill(dst, value, n)   dst[i] = value           (e.g. LSE accumulators to -inf)
//   add(dst, src, n)      dst[i] += src[i]         (e.g. a received partial dK/dV added to the
//                                                   one computed while it travelled)
// fp32 arrays; definitions in row_ops.cuh (grid-stride, float4 accesses when both pointers
// are 16-byte aligned), instantiated in zeppelin::kernels (kernels/executor_row_ops.cu).
// Both return cudaError_t and never throw.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

template <class T>
cudaError_t launch_fill(T* dst, T value, std::int64_t n, cudaStream_t stream);
template <class T>
cudaError_t launch_add(T* dst, const T* src, std::int64_t n, cudaStream_t stream);

//! dst[i] = value for i < n.
inline cudaError_t fill_f32(float* dst, float value, std::int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && dst == nullptr)) return cudaErrorInvalidValue;
  return n == 0 ? cudaSuccess : launch_fill<float>(dst, value, n, stream);
}

//! dst[i] += src[i] for i < n (dst and src must not overlap partially).
inline cudaError_t add_f32(float* dst, const float* src, std::int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (dst == nullptr || src == nullptr))) return cudaErrorInvalidValue;
  return n == 0 ? cudaSuccess : launch_add<float>(dst, src, n, stream);
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
